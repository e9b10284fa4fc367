"""Padding. ``constant_pad_nd`` lowers to ``lax.pad``; reflection and replication
pads are kept whole by capture (``converter.capture.PRESERVED_OPS``) and emitted as
composites ``aten.reflection_pad<N>d`` / ``aten.replication_pad<N>d`` (LiteRT maps
them to MIRROR_PAD); circular padding still arrives as ``slice_scatter`` + ``copy``.
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


def _pad_spatial(x, padding, mode):
    """``jnp.pad`` of the last ``len(padding) // 2`` dims; torch lists pads from the last dim backwards."""
    n = len(padding) // 2
    pads = [(0, 0)] * (x.ndim - n)
    for i in range(n):
        pads.insert(x.ndim - n + i, (padding[2 * (n - 1 - i)], padding[2 * (n - 1 - i) + 1]))
    return jnp.pad(x, pads[: x.ndim], mode=mode)


@lowering(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
          composite=True)
def lower_reflection_pad2d_default(ctx, self, padding):
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor

    Also the 1d and 3d overloads. A composite whose body is ``jnp.pad(mode="reflect")``
    (edge not repeated, as torch); LiteRT emits MIRROR_PAD (REFLECT).
    """
    return _pad_spatial(self, padding, "reflect")


@lowering(aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default,
          composite=True)
def lower_replication_pad2d_default(ctx, self, padding):
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor

    Also the 1d and 3d overloads. A composite whose body is ``jnp.pad(mode="edge")``;
    with a negative amount (torch crops, then replicates the new edge:
    ``out[i] = x[clamp(i - left, 0, n - 1)]``) a gather of those indices per dim.
    """
    if min(padding) >= 0:
        return _pad_spatial(self, padding, "edge")
    n = len(padding) // 2
    for i in range(n):
        axis, (left, right) = self.ndim - 1 - i, padding[2 * i: 2 * i + 2]
        size = self.shape[axis]
        idx = jnp.clip(jnp.arange(size + left + right) - left, 0, size - 1)
        self = jnp.take(self, idx, axis=axis)
    return self
