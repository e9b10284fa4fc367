"""ATen ops that capture's one-pass trace keeps and torch's Python decompositions would rewrite.

``converter.capture`` traces a model once, straight to functional ATen, and keeps
that program when the table lowers every op in it. What the second trace of
``run_decompositions`` would have rewritten (``transpose.int`` → ``permute``,
``_unsafe_view`` → ``view``, ``zeros`` → ``full``…) stays in the program; each row
here lowers it through the row of the op it would have become, so the math is
written once.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import check_fits
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.ops.creation import lower_arange_start_step
from converter.lowering.ops.reduction import lower_sum_dim_intlist
from converter.lowering.ops.shape import lower_cat_default, lower_split_with_sizes_default
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _dtype(ctx, dtype, default):
    """A factory's result dtype: the recorded one, else the requested one, else ``default``."""
    if ctx.out_dtype is not None:
        return ctx.out_dtype
    return to_jax_dtype(dtype) if dtype is not None else default


@lowering(aten.transpose.int)
def lower_transpose_int(ctx, self, dim0, dim1):
    """transpose.int(Tensor(a) self, int dim0, int dim1) -> Tensor(a)

    ``transpose`` swapping the two dims (0-d and 1-d tensors come back unchanged).
    """
    if self.ndim < 2:
        return self
    return jnp.swapaxes(self, norm_dim(dim0, self.ndim), norm_dim(dim1, self.ndim))


@lowering(aten._unsafe_view.default)
def lower__unsafe_view_default(ctx, self, size):
    """_unsafe_view(Tensor self, SymInt[] size) -> Tensor

    ``reshape`` (``-1`` inferred), as ``view``.
    """
    return jnp.reshape(self, tuple(size))


@lowering(aten.split.Tensor)
def lower_split_tensor(ctx, self, split_size, dim=0):
    """split.Tensor(Tensor(a -> *) self, SymInt split_size, int dim=0) -> Tensor(a)[]

    ``split_with_sizes`` with pieces of ``split_size`` (the last one shorter); of a dynamic size (``x.chunk(2)`` of
    a ``2 * h`` dim), as many pieces as torch traced (their number is the graph's), the last one the rest.
    """
    n = self.shape[norm_dim(dim, self.ndim)] if self.ndim else 1
    if not (isinstance(n, int) and isinstance(split_size, int)):  # a dynamic size: as many pieces as torch traced
        pieces = ctx.node.meta.get("val") if ctx.node is not None else None
        if not isinstance(pieces, (list, tuple)) or not pieces:
            raise UnsupportedOpError(str(aten.split.Tensor), ctx.target, ctx.location,
                                     reason="a split of a dynamic size into a number of pieces the graph does not say")
        sizes = [split_size] * (len(pieces) - 1) + [n - (len(pieces) - 1) * split_size]
        return lower_split_with_sizes_default(ctx, self, sizes, dim)
    sizes = [min(split_size, n - start) for start in range(0, n, split_size)] if split_size else [n]
    return lower_split_with_sizes_default(ctx, self, sizes or [0], dim)


@lowering(aten.masked_fill.Scalar)
def lower_masked_fill_scalar(ctx, self, mask, value):
    """masked_fill.Scalar(Tensor self, Tensor mask, Scalar value) -> Tensor

    ``select``: ``value`` (cast to ``self``'s dtype) where ``mask``, else ``self`` (an int the dtype cannot hold is
    refused, as by torch).
    """
    value = check_fits(value, self.dtype)
    return jnp.where(mask, jnp.asarray(value).astype(self.dtype), self)


@lowering(aten.arange.start)
def lower_arange_start(ctx, start, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    """arange.start(Scalar start, Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``arange.start_step`` with step 1.
    """  # noqa: E501 (the first line is the exact schema)
    return lower_arange_start_step(ctx, start, end, 1, dtype=dtype)


@lowering(aten.arange.default)
def lower_arange_default(ctx, end, *, dtype=None, layout=None, device=None, pin_memory=None):
    """arange(Scalar end, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``arange.start_step`` from 0 with step 1.
    """  # noqa: E501 (the first line is the exact schema)
    return lower_arange_start_step(ctx, 0, end, 1, dtype=dtype)


@lowering(aten.zeros.default)
def lower_zeros_default(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """zeros(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``full`` of 0 in the result dtype.
    """  # noqa: E501 (the first line is the exact schema)
    return jnp.zeros(tuple(size), _dtype(ctx, dtype, to_jax_dtype(torch.get_default_dtype())))


@lowering(aten._efficientzerotensor.default)
def lower_efficientzerotensor_default(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """_efficientzerotensor(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    The zero tensor autograd formulas return for a gradient known to be zero (``sgn``'s): ``zeros``.
    """  # noqa: E501 (the first line is the exact schema)
    return lower_zeros_default(ctx, size, dtype=dtype)


@lowering(aten.ones.default)
def lower_ones_default(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """ones(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``full`` of 1 in the result dtype.
    """  # noqa: E501 (the first line is the exact schema)
    return jnp.ones(tuple(size), _dtype(ctx, dtype, to_jax_dtype(torch.get_default_dtype())))


@lowering(aten.zeros_like.default)
def lower_zeros_like_default(ctx, self, *, dtype=None, layout=None, device=None, pin_memory=None,
                             memory_format=None):
    """zeros_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    ``full`` of 0 with ``self``'s shape.
    """  # noqa: E501 (the first line is the exact schema)
    return jnp.zeros(self.shape, _dtype(ctx, dtype, self.dtype))


@lowering(aten.new_ones.default)
def lower_new_ones_default(ctx, self, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """new_ones(Tensor self, SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``full`` of 1 (``self``'s dtype unless one is given).
    """  # noqa: E501 (the first line is the exact schema)
    return jnp.ones(tuple(size), _dtype(ctx, dtype, self.dtype))


@lowering(aten.stack.default)
def lower_stack_default(ctx, tensors, dim=0):
    """stack(Tensor[] tensors, int dim=0) -> Tensor

    ``cat`` of the tensors, each with a new unit dim at ``dim`` (cat's type promotion).
    """
    d = norm_dim(dim, tensors[0].ndim + 1)
    return lower_cat_default(ctx, [jnp.expand_dims(t, d) for t in tensors], d)


@lowering(aten.sum.default)
def lower_sum_default(ctx, self, *, dtype=None):
    """sum(Tensor self, *, ScalarType? dtype=None) -> Tensor

    ``sum.dim_IntList`` over every dim.
    """
    return lower_sum_dim_intlist(ctx, self, None, False, dtype=dtype)


@lowering(aten.lift_fresh_copy.default)
def lower_lift_fresh_copy_default(ctx, self):
    """lift_fresh_copy(Tensor self) -> Tensor

    The value itself (JAX values are immutable: a copy is the same value).
    """
    return self
