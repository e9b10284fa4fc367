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

    Also the 1d and 3d overloads. A composite whose body is ``jnp.pad(mode="edge")``.
    """
    return _pad_spatial(self, padding, "edge")
