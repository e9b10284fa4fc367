"""Padding. Only constant_pad_nd survives core-ATen decomposition: reflection and
replication pads arrive as ``index.Tensor`` with computed indices, circular
padding as ``slice_scatter`` + ``copy`` (both lowered in indexing.py / shape.py).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.registry import lowering

aten = torch.ops.aten


@lowering(aten.constant_pad_nd.default)
def lower_constant_pad_nd_default(ctx, self, pad, value=0):
    """constant_pad_nd(Tensor self, SymInt[] pad, Scalar value=0) -> Tensor

    Emits ``lax.pad``; ``pad`` pairs apply from the last dim backwards and negative
    amounts crop, as in torch. ``value`` is cast to the tensor's dtype.
    """
    config = [(0, 0, 0)] * self.ndim
    for i in range(len(pad) // 2):
        config[self.ndim - 1 - i] = (pad[2 * i], pad[2 * i + 1], 0)
    return jax.lax.pad(self, jnp.asarray(value, dtype=self.dtype), config)
