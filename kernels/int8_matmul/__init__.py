"""int8 weight-only matmul: Pallas kernel, plain-jnp reference and per-channel quantizer."""

from kernels.int8_matmul.kernel import int8_matmul
from kernels.int8_matmul.reference import int8_matmul_reference, quantize_per_channel

__all__ = ["int8_matmul", "int8_matmul_reference", "quantize_per_channel"]
