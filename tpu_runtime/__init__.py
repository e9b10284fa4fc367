"""The TPU runtime: lowered programs compiled with jax.jit on jax.devices()[0]."""

from tpu_runtime.module import TpuModule

__all__ = ["TpuModule"]
