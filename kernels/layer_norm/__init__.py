"""Layer norm: fused Pallas kernel (fwd + bwd) and its plain-jnp reference."""

from kernels.layer_norm.kernel import layer_norm
from kernels.layer_norm.reference import layer_norm_reference

__all__ = ["layer_norm", "layer_norm_reference"]
