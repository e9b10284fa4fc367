"""Core ATen ops that torch.export decomposes away but eager dispatch and make_fx graphs see.

The eager ``tpu`` device and un-decomposed AOTAutograd/make_fx graphs call these
directly, so each lowers to the same math as the op it decomposes into.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.lowering.helpers import dim as norm_dim
from converter.lowering.registry import lowering

aten = torch.ops.aten


@lowering(aten.fill.Scalar)
def lower_fill_scalar(ctx, self, value):
    """fill.Scalar(Tensor self, Scalar value) -> Tensor

    ``full_like``: a broadcast constant of ``self``'s shape and dtype.
    """
    return jnp.full(self.shape, value, dtype=self.dtype)


@lowering(aten.squeeze.dim)
def lower_squeeze_dim(ctx, self, dim):
    """squeeze.dim(Tensor(a) self, int dim) -> Tensor(a)

    ``reshape`` dropping ``dim`` when it has size 1 (no-op otherwise, as torch).
    """
    if self.ndim == 0:
        return self
    d = norm_dim(dim, self.ndim)
    return jnp.squeeze(self, d) if self.shape[d] == 1 else self


def _pad_spatial(x, padding, mode):
    n = len(padding) // 2
    pads = [(0, 0)] * (x.ndim - n)
    for i in range(n):  # torch lists pads from the last dim backwards
        pads.insert(x.ndim - n + i, (padding[2 * (n - 1 - i)], padding[2 * (n - 1 - i) + 1]))
    return jnp.pad(x, pads[: x.ndim], mode=mode)


@lowering(aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default)
def lower_reflection_pad2d_default(ctx, self, padding):
    """reflection_pad2d(Tensor self, SymInt[4] padding) -> Tensor

    Also the 1d and 3d overloads. ``jnp.pad(mode="reflect")`` (edge not repeated, as torch).
    """
    return _pad_spatial(self, padding, "reflect")


@lowering(aten.replication_pad2d.default, aten.replication_pad3d.default)
def lower_replication_pad2d_default(ctx, self, padding):
    """replication_pad2d(Tensor self, SymInt[4] padding) -> Tensor

    Also the 3d overload. ``jnp.pad(mode="edge")``.
    """
    return _pad_spatial(self, padding, "edge")
