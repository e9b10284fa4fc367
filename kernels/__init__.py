"""Pallas kernels and the plain-JAX references of the same math (JAX only, no torch).

Each kernel is a package ``kernels/<name>/`` with ``kernel.py`` (Pallas body +
``pallas_call`` wrapper, static keyword-only tiling) and ``reference.py``
(plain ``jnp``). :mod:`kernels.dispatch` decides which one runs on the current
backend and keeps a visible record of every decision.
"""

from kernels import dispatch
from kernels.flash_attention import flash_attention, flash_attention_reference
from kernels.int8_matmul import int8_matmul, int8_matmul_reference, quantize_per_channel
from kernels.layer_norm import layer_norm, layer_norm_reference
from kernels.paged_attention import paged_attention, paged_attention_reference
from kernels.rms_norm import rms_norm, rms_norm_reference

__all__ = [
    "dispatch",
    "flash_attention", "flash_attention_reference",
    "int8_matmul", "int8_matmul_reference", "quantize_per_channel",
    "layer_norm", "layer_norm_reference",
    "paged_attention", "paged_attention_reference",
    "rms_norm", "rms_norm_reference",
]
