"""Reductions: sum, mean, prod, amax/amin, max/min, argmax/argmin, var, any, cumulative ops, vector norms.

Torch semantics kept here: ``dim=None`` or ``[]`` reduces every dim; 0-d tensors
accept ``dim`` 0 / -1; integer and bool sums/products accumulate in int64;
float16/bfloat16 accumulate in float32 (as PyTorch CPU does) and are cast back;
NaN propagates through max/min and argmax/argmin point at the first NaN.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.helpers import dims as norm_dims
from converter.lowering.helpers import centered_mean, pnorm
from converter.lowering.ops.convert import cast
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _axes(x, dim) -> tuple[int, ...]:
    """Reduced axes of ``x`` (0-d tensors have none, whatever dim says)."""
    return () if x.ndim == 0 else norm_dims(dim, x.ndim)


def _acc(dtype):
    """Accumulation dtype: float32 for float16/bfloat16, else ``dtype``."""
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype


def _sum_dtype(ctx, x, dtype):
    """Result dtype of sum/prod/cumsum: torch's ``dtype`` or int64 for integer/bool input."""
    if ctx.out_dtype is not None:
        return ctx.out_dtype
    if dtype is not None:
        return to_jax_dtype(dtype)
    return x.dtype if jnp.issubdtype(x.dtype, jnp.inexact) else jnp.int64


def _count(x, axes):
    """Number of reduced elements as a traced value (works for symbolic dims)."""
    return jnp.asarray(math.prod(x.shape[a] for a in axes), dtype=jnp.int64)


@lowering(aten.sum.dim_IntList)
def lower_sum_dim_intlist(ctx, self, dim, keepdim=False, *, dtype=None):
    """sum.dim_IntList(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    Emits ``reduce_sum``; bool/int inputs sum in int64, f16/bf16 in float32; a ``dtype`` converts the input as
    ``.to(dtype)`` does (floats into uint8 wrap: -1.0 is 255).
    """
    out = _sum_dtype(ctx, self, dtype)
    return jnp.sum(cast(self, _acc(out)), axis=_axes(self, dim), keepdims=keepdim).astype(out)


@lowering(aten.mean.dim, aten.mean.default)
def lower_mean_dim(ctx, self, dim=None, keepdim=False, *, dtype=None):
    """mean.dim(Tensor self, int[1]? dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    Also mean.default(Tensor self, *, ScalarType? dtype=None). Emits ``reduce_sum``
    and a division; f16/bf16 accumulate in float32. An empty reduction gives NaN.
    """
    out = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else self.dtype)
    return jnp.mean(self.astype(_acc(out)), axis=_axes(self, dim), keepdims=keepdim).astype(out)


@lowering(aten.prod.dim_int, aten.prod.default)
def lower_prod_dim_int(ctx, self, dim=None, keepdim=False, *, dtype=None):
    """prod.dim_int(Tensor self, int dim, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    Also prod.default(Tensor self, *, ScalarType? dtype=None). Emits ``reduce_prod``;
    bool/int inputs multiply in int64 (wrapping like torch), f16/bf16 in float32.
    """
    out = _sum_dtype(ctx, self, dtype)
    axes = _axes(self, None if dim is None else [dim])
    return jnp.prod(cast(self, _acc(out)), axis=axes, keepdims=keepdim).astype(out)


@lowering(aten.amax.default)
def lower_amax_default(ctx, self, dim=(), keepdim=False):
    """amax(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor

    Emits ``reduce_max`` (NaN propagates, as in torch).
    """
    return jnp.max(self, axis=_axes(self, dim), keepdims=keepdim)


@lowering(aten.amin.default)
def lower_amin_default(ctx, self, dim=(), keepdim=False):
    """amin(Tensor self, int[1] dim=[], bool keepdim=False) -> Tensor

    Emits ``reduce_min`` (NaN propagates, as in torch).
    """
    return jnp.min(self, axis=_axes(self, dim), keepdims=keepdim)


@lowering(aten.max.default)
def lower_max_default(ctx, self):
    """max(Tensor self) -> Tensor

    Emits ``reduce_max`` over every dim (NaN propagates).
    """
    return jnp.max(self)


@lowering(aten.min.default)
def lower_min_default(ctx, self):
    """min(Tensor self) -> Tensor

    Emits ``reduce_min`` over every dim (NaN propagates).
    """
    return jnp.min(self)


def _arg_reduce(fn, x, dim, keepdim):
    """``(values, indices)`` of argmax/argmin along ``dim``: first occurrence, NaN wins."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    idx = fn(x, axis=d, keepdims=True)
    values = jnp.take_along_axis(x, idx, axis=d)
    if not keepdim:
        idx, values = jnp.squeeze(idx, d), jnp.squeeze(values, d)
    return values, idx.astype(jnp.int64)


@lowering(aten.max.dim)
def lower_max_dim(ctx, self, dim, keepdim=False):
    """max.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits ``argmax`` (an index-carrying ``reduce``) then ``take_along_axis`` so
    values and indices agree: the first maximum, or the first NaN.
    """
    return _arg_reduce(jnp.argmax, self, dim, keepdim)


@lowering(aten.min.dim)
def lower_min_dim(ctx, self, dim, keepdim=False):
    """min.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits ``argmin`` then ``take_along_axis``: the first minimum, or the first NaN.
    """
    return _arg_reduce(jnp.argmin, self, dim, keepdim)


def _arg_all(fn, x, dim, keepdim):
    if x.dtype == jnp.bool_:  # torch's CPU and CUDA kernels refuse it (max.dim/min.dim take bool)
        raise RuntimeError(f"{fn.__name__}(): does not support bool input")
    if dim is None:
        idx = fn(x.reshape(-1)) if x.ndim else jnp.zeros((), jnp.int64)
        return idx.reshape((1,) * x.ndim if keepdim else ()).astype(jnp.int64)
    return _arg_reduce(fn, x, dim, keepdim)[1]


@lowering(aten.argmax.default)
def lower_argmax_default(ctx, self, dim=None, keepdim=False):
    """argmax(Tensor self, int? dim=None, bool keepdim=False) -> Tensor

    Emits ``argmax``; ``dim=None`` flattens first (keepdim then gives all-1 dims).
    """
    return _arg_all(jnp.argmax, self, dim, keepdim)


@lowering(aten.argmin.default)
def lower_argmin_default(ctx, self, dim=None, keepdim=False):
    """argmin(Tensor self, int? dim=None, bool keepdim=False) -> Tensor

    Emits ``argmin``; ``dim=None`` flattens first (keepdim then gives all-1 dims).
    """
    return _arg_all(jnp.argmin, self, dim, keepdim)


def _var_mean(ctx, x, dim, correction, keepdim):
    if not jnp.issubdtype(x.dtype, jnp.inexact):  # torch's CPU and CUDA kernels refuse them
        raise RuntimeError("std and var only support floating point and complex dtypes")
    out = ctx.out_dtype or x.dtype
    xf = x.astype(_acc(x.dtype))
    axes = _axes(x, dim)
    mean = centered_mean(xf, axes)
    centered = xf - mean
    sq = jnp.real(centered * jnp.conj(centered)) if jnp.iscomplexobj(xf) else centered * centered
    ss = jnp.sum(sq, axis=axes, keepdims=keepdim)
    c = 1 if correction is None else correction
    # torch divides by max(N - correction, 0): a too-large correction gives inf (or NaN), not NaN only.
    divisor = jnp.maximum(_count(x, axes).astype(ss.dtype) - c, 0)
    if not keepdim:
        mean = jnp.squeeze(mean, axes)
    return (ss / divisor).astype(out), mean.astype(x.dtype)


@lowering(aten.var.correction)
def lower_var_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    """var.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> Tensor

    Two-pass: ``reduce_sum`` for the mean, then of squared deviations, divided by
    ``max(N - correction, 0)`` (default correction 1); f16/bf16 in float32.
    """
    return _var_mean(ctx, self, dim, correction, keepdim)[0]


@lowering(aten.var_mean.correction)
def lower_var_mean_correction(ctx, self, dim=None, *, correction=None, keepdim=False):
    """var_mean.correction(Tensor self, int[1]? dim=None, *, Scalar? correction=None, bool keepdim=False) -> (Tensor, Tensor)

    Same math as var.correction; returns ``(var, mean)``.
    """
    return _var_mean(ctx, self, dim, correction, keepdim)


@lowering(aten.any.dim, aten.any.dims, aten.any.default)
def lower_any_dim(ctx, self, dim=None, keepdim=False):
    """any.dim(Tensor self, int dim, bool keepdim=False) -> Tensor

    Also any.dims(Tensor self, int[1]? dim=None, bool keepdim=False) and
    any.default(Tensor self). Emits ``ne 0`` + ``reduce_or`` (NaN counts as true).
    torch.all arrives here too: the decomposition writes it as ``not any(not x)``. An empty ``dim``
    list reduces nothing (each element's truth value), as torch's any/all do (sum's reduces every dim).
    """
    if isinstance(dim, (list, tuple)) and not dim:
        return self != 0
    return jnp.any(self != 0, axis=_axes(self, dim), keepdims=keepdim)


@lowering(aten._is_all_true.default)
def lower__is_all_true_default(ctx, self):
    """_is_all_true(Tensor self) -> Tensor

    A bool scalar: every element of the (bool) tensor is true (``reduce_and``);
    torch.distributions' argument validation asks it.
    """
    return jnp.all(self != 0)


@lowering(aten._is_any_true.default)
def lower__is_any_true_default(ctx, self):
    """_is_any_true(Tensor self) -> Tensor

    A bool scalar: some element of the (bool) tensor is true (``reduce_or``).
    """
    return jnp.any(self != 0)


def _cumulative(fn, x, d, out):
    if x.ndim == 0:
        return x.astype(out)
    return fn(cast(x, _acc(out)), axis=norm_dim(d, x.ndim)).astype(out)


@lowering(aten.cumsum.default)
def lower_cumsum_default(ctx, self, dim, *, dtype=None):
    """cumsum(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    Emits ``cumsum`` (XLA reduce-window / associative scan); int/bool in int64,
    f16/bf16 accumulate in float32.
    """
    return _cumulative(jnp.cumsum, self, dim, _sum_dtype(ctx, self, dtype))


@lowering(aten.cumprod.default)
def lower_cumprod_default(ctx, self, dim, *, dtype=None):
    """cumprod(Tensor self, int dim, *, ScalarType? dtype=None) -> Tensor

    Emits ``cumprod``; int/bool in int64, f16/bf16 accumulate in float32.
    """
    return _cumulative(jnp.cumprod, self, dim, _sum_dtype(ctx, self, dtype))


@lowering(aten.logcumsumexp.default)
def lower_logcumsumexp_default(ctx, self, dim):
    """logcumsumexp(Tensor self, int dim) -> Tensor

    Emits ``lax.cumlogsumexp`` (f16/bf16 accumulate in float32); complex input: torch's CPU recurrence as one
    sequential ``lax.scan`` (:func:`_complex_logaddexp`), whose imaginary parts are not reduced to (-π, π]
    (``lax.cumlogsumexp``'s differed from the CPU's by multiples of 2π).
    """
    out = ctx.out_dtype or self.dtype
    if jnp.issubdtype(self.dtype, jnp.complexfloating) and self.ndim:
        xs = jnp.moveaxis(self.astype(out), norm_dim(dim, self.ndim), 0)
        scan = lambda cum, v: (lambda acc: (acc, acc))(_complex_logaddexp(v, cum))  # noqa: E731
        _, ys = jax.lax.scan(scan, jnp.full(xs.shape[1:], -jnp.inf, out), xs)
        return jnp.moveaxis(ys, 0, norm_dim(dim, self.ndim))
    return _cumulative(lambda v, axis: jax.lax.cumlogsumexp(v, axis=axis), self, dim, out)


def _complex_logaddexp(v, cum):
    """One step of torch's CPU logcumsumexp of complex numbers: ``log1p(exp(lo - hi)) + hi`` with ``lo``/``hi`` the
    one of smaller/larger real part (``cum`` on a tie; a NaN makes both parts NaN); both real parts -inf: ``lo``."""
    smaller = jnp.real(v) < jnp.real(cum)
    lo, hi = jnp.where(smaller, v, cum), jnp.where(smaller, cum, v)
    both_inf = jnp.isinf(jnp.real(lo)) & (jnp.real(lo) == jnp.real(hi))
    at_inf = jnp.where(jnp.real(lo) < 0, lo, jnp.log(jnp.exp(lo) + jnp.exp(hi)))
    return jnp.where(both_inf, at_inf, jnp.log1p(jnp.exp(lo - jnp.where(both_inf, 0, hi))) + hi)


def _cum_extreme(x, dim, better):
    """``(values, indices)`` of cummax/cummin; ties and NaN take the later index, like torch."""
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    idx = jax.lax.broadcasted_iota(jnp.int64, x.shape, d)
    floating = jnp.issubdtype(x.dtype, jnp.inexact)

    def combine(a, b):
        (va, ia), (vb, ib) = a, b
        take_b = better(vb, va) | (vb == va)
        if floating:
            take_b = jnp.isnan(vb) | (~jnp.isnan(va) & take_b)
        return jnp.where(take_b, vb, va), jnp.where(take_b, ib, ia)

    return jax.lax.associative_scan(combine, (x, idx), axis=d)


@lowering(aten.cummax.default)
def lower_cummax_default(ctx, self, dim):
    """cummax(Tensor self, int dim) -> (Tensor values, Tensor indices)

    Emits an associative scan over ``(value, index)`` pairs: ``>=`` so ties take
    the later index, and NaN sticks once seen — torch's CPU rule.
    """
    return _cum_extreme(self, dim, jnp.greater)


@lowering(aten.cummin.default)
def lower_cummin_default(ctx, self, dim):
    """cummin(Tensor self, int dim) -> (Tensor values, Tensor indices)

    Emits an associative scan over ``(value, index)`` pairs (``<=``; NaN sticks).
    """
    return _cum_extreme(self, dim, jnp.less)


@lowering(aten.linalg_vector_norm.default)
def lower_linalg_vector_norm_default(ctx, self, ord=2, dim=None, keepdim=False, *, dtype=None):
    """linalg_vector_norm(Tensor self, Scalar ord=2, int[1]? dim=None, bool keepdim=False, *, ScalarType? dtype=None) -> Tensor

    ``(Σ|x|^ord)^(1/ord)`` over ``dim`` (every dim when ``None``/``[]``); ord 0 counts
    non-zeros, ±inf take the max/min of ``|x|``. ``dtype`` casts the input first;
    complex inputs give their real dtype; f16/bf16 accumulate in float32.
    """
    x = self if dtype is None else self.astype(to_jax_dtype(dtype))
    out = ctx.out_dtype or (jnp.finfo(x.dtype).dtype if jnp.issubdtype(x.dtype, jnp.complexfloating) else x.dtype)
    mag = jnp.abs(x).astype(_acc(out))
    return pnorm(mag, float(ord), _axes(self, dim), keepdim).astype(out)


@lowering(aten.dist.default)
def lower_dist_default(ctx, self, other, p=2):
    """dist(Tensor self, Tensor other, Scalar p=2) -> Tensor

    The ``p``-norm of ``self - other`` (broadcast) over every element: linalg_vector_norm's
    lowering on the difference.
    """
    return lower_linalg_vector_norm_default(ctx, jnp.subtract(self, other), p)
