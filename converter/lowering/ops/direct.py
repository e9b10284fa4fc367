"""Core ATen ops that torch.export decomposes away but eager dispatch and make_fx graphs see.

The eager ``tpu`` device and un-decomposed AOTAutograd/make_fx graphs call these
directly, so each lowers to the same math as the op it decomposes into.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.lowering.helpers import check_fits
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.registry import lowering

aten = torch.ops.aten


@lowering(aten.fill.Scalar)
def lower_fill_scalar(ctx, self, value):
    """fill.Scalar(Tensor self, Scalar value) -> Tensor

    ``full_like``: a broadcast constant of ``self``'s shape and dtype (an int it cannot hold is refused, as by torch).
    """
    value = check_fits(value, self.dtype)
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
