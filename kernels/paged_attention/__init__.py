"""Paged-KV-cache decode attention: Pallas kernel and its plain-jnp reference."""

from kernels.paged_attention.kernel import paged_attention
from kernels.paged_attention.reference import paged_attention_reference

__all__ = ["paged_attention", "paged_attention_reference"]
