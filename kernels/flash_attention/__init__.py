"""Flash attention: Pallas kernel (fwd + bwd) and its plain-jnp reference."""

from kernels.flash_attention.kernel import flash_attention
from kernels.flash_attention.reference import flash_attention_reference

__all__ = ["flash_attention", "flash_attention_reference"]
