"""RMS norm: fused Pallas kernel (fwd + bwd) and its plain-jnp reference."""

from kernels.rms_norm.kernel import rms_norm
from kernels.rms_norm.reference import rms_norm_reference

__all__ = ["rms_norm", "rms_norm_reference"]
