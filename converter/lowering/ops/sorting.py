"""Sorting and order statistics: sort, topk, kthvalue, median, mode, searchsorted, histc.

Torch's order is used throughout: NaN is greater than every number (last when
ascending, first when descending), ``-0.0 == 0.0``, and sorts are stable. Ties
in topk/kthvalue/median therefore resolve by original position; PyTorch leaves
those unspecified, so tests use inputs without ties there.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.helpers import dim as norm_dim
from converter.lowering.helpers import promote
from converter.lowering.registry import lowering

aten = torch.ops.aten
lax = jax.lax


def _index_dtype(n):
    """int32 sort payload when the sorted dim certainly fits, else int64."""
    return jnp.int32 if isinstance(n, int) and n < 2**31 else jnp.int64


def _sort(x, axis, descending=False):
    """Stable ``(values, indices)`` along ``axis`` in torch's order (``lax.sort``, multi-key)."""
    keys = [x.astype(jnp.uint8) if x.dtype == jnp.bool_ else x]
    if descending:
        k = keys[0]
        if jnp.issubdtype(k.dtype, jnp.inexact):
            # NaN first, then the rest largest-first; lax.sort canonicalizes -NaN/-0.0 itself.
            keys = [(~jnp.isnan(k)).astype(jnp.uint8), -k]
        else:
            keys = [~k]  # bitwise not reverses the integer order exactly, no overflow
    axis = axis % x.ndim
    iota = lax.broadcasted_iota(_index_dtype(x.shape[axis]), x.shape, axis)
    *_, values, idx = lax.sort((*keys, x, iota), dimension=axis, is_stable=True, num_keys=len(keys))
    return values, idx.astype(jnp.int64)


def _orderable_int(x):
    """An integer key with torch's order for ``x`` (floats: NaN largest, -0.0 == 0.0)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.int8)
    if not jnp.issubdtype(x.dtype, jnp.floating):
        return x
    x = jnp.where(jnp.isnan(x), jnp.array(jnp.nan, x.dtype), jnp.where(x == 0, jnp.zeros((), x.dtype), x))
    bits = lax.bitcast_convert_type(x, jnp.dtype(f"int{jnp.dtype(x.dtype).itemsize * 8}"))
    # Negative floats: flip the magnitude bits so a larger magnitude gives a smaller key.
    return jnp.where(bits < 0, bits ^ jnp.iinfo(bits.dtype).max, bits)


@lowering(aten.sort.default, aten.sort.stable)
def lower_sort_default(ctx, self, dim=-1, descending=False, *, stable=None):
    """sort(Tensor self, int dim=-1, bool descending=False) -> (Tensor values, Tensor indices)

    Also sort.stable(Tensor self, *, bool? stable, int dim=-1, bool descending=False).
    Emits one stable ``lax.sort`` with the values and an iota as payload (so
    argsort is the same op). Always stable, which sort.default permits.
    """
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    return _sort(self, norm_dim(dim, self.ndim), descending)


@lowering(aten.topk.default)
def lower_topk_default(ctx, self, k, dim=-1, largest=True, sorted=True):
    """topk(Tensor self, SymInt k, int dim=-1, bool largest=True, bool sorted=True) -> (Tensor values, Tensor indices)

    Emits ``lax.top_k`` (TFLite TOPK_V2) on an integer key with torch's order
    (floats are bit-cast so NaN counts as largest on every backend), then
    ``take_along_axis`` for the values. ``sorted=False`` still returns sorted
    results (torch leaves that order unspecified).
    """
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, self.ndim)
    x = jnp.moveaxis(self, d, -1)
    key = _orderable_int(x)
    _, idx = lax.top_k(key if largest else ~key, k)
    values = jnp.take_along_axis(x, idx, axis=-1)
    return jnp.moveaxis(values, -1, d), jnp.moveaxis(idx, -1, d).astype(jnp.int64)


def _pick(x, d, pos, keepdim):
    """Values and original indices at sorted position ``pos`` (shape of x without ``d``)."""
    values, order = _sort(x, d)
    pos = jnp.expand_dims(pos, d)
    v, i = jnp.take_along_axis(values, pos, axis=d), jnp.take_along_axis(order, pos, axis=d)
    return (v, i) if keepdim else (jnp.squeeze(v, d), jnp.squeeze(i, d))


def _nan_count(x, d):
    if jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.sum(jnp.isnan(x), axis=d)
    return jnp.zeros(x.shape[:d] + x.shape[d + 1:], jnp.int32)


@lowering(aten.kthvalue.default)
def lower_kthvalue_default(ctx, self, k, dim=-1, keepdim=False):
    """kthvalue(Tensor self, SymInt k, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits a stable ``lax.sort`` and picks sorted position ``k - 1`` (NaN sorts last).
    """
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, self.ndim)
    pos = jnp.full(self.shape[:d] + self.shape[d + 1:], k - 1, jnp.int32)
    return _pick(self, d, pos, keepdim)


def _median(x, dim, keepdim, ignore_nan):
    if x.ndim == 0:
        return x, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, x.ndim)
    n, nans = x.shape[d], _nan_count(x, d)
    if n == 0:  # (torch's message, for median and nanmedian alike)
        raise IndexError(f"median(): Expected reduction dim {dim} to have non-zero size.")
    if ignore_nan:  # lower median of the non-NaN values; all-NaN rows give NaN (torch leaves the index unspecified)
        pos = jnp.maximum(n - nans - 1, 0) // 2
    else:  # any NaN: the first NaN, which sorts right after the numbers
        pos = jnp.where(nans > 0, n - nans, (n - 1) // 2)
    return _pick(x, d, pos.astype(jnp.int32), keepdim)


@lowering(aten.median.dim)
def lower_median_dim(ctx, self, dim, keepdim=False):
    """median.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits a stable ``lax.sort``; the lower median (position ``(n-1)//2``), or the
    first NaN when the row has one (torch propagates NaN).
    """
    return _median(self, dim, keepdim, ignore_nan=False)


@lowering(aten.nanmedian.dim)
def lower_nanmedian_dim(ctx, self, dim, keepdim=False):
    """nanmedian.dim(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits a stable ``lax.sort``; the lower median of the non-NaN values.
    """
    return _median(self, dim, keepdim, ignore_nan=True)


@lowering(aten.median.default)
def lower_median_default(ctx, self):
    """median(Tensor self) -> Tensor

    Median of the flattened tensor (see median.dim); NaN for an empty floating tensor, as torch.
    """
    if self.size == 0 and jnp.issubdtype(self.dtype, jnp.inexact):
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, False, ignore_nan=False)[0]


@lowering(aten.nanmedian.default)
def lower_nanmedian_default(ctx, self):
    """nanmedian(Tensor self) -> Tensor

    NaN-ignoring median of the flattened tensor (see nanmedian.dim); NaN for an empty floating tensor.
    """
    if self.size == 0 and jnp.issubdtype(self.dtype, jnp.inexact):
        return jnp.full((), jnp.nan, self.dtype)
    return _median(self.reshape(-1), 0, False, ignore_nan=True)[0]


@lowering(aten.mode.default)
def lower_mode_default(ctx, self, dim=-1, keepdim=False):
    """mode(Tensor self, int dim=-1, bool keepdim=False) -> (Tensor values, Tensor indices)

    Emits a stable ``lax.sort``, run lengths by ``cummax`` of run starts, and
    ``argmax`` of the run length: the most frequent value, the smallest on ties,
    and the last index holding it — what PyTorch CPU returns.
    """
    if self.ndim == 0:
        return self, jnp.zeros((), jnp.int64)
    d = norm_dim(dim, self.ndim)
    values, order = _sort(jnp.moveaxis(self, d, -1), -1)
    iota = lax.broadcasted_iota(jnp.int32, values.shape, values.ndim - 1)
    new_run = jnp.concatenate([jnp.ones(values.shape[:-1] + (1,), bool), values[..., 1:] != values[..., :-1]], -1)
    run_start = lax.cummax(jnp.where(new_run, iota, 0), axis=values.ndim - 1)
    best = jnp.argmax(iota - run_start, axis=-1, keepdims=True)
    v, i = jnp.take_along_axis(values, best, -1), jnp.take_along_axis(order, best, -1)
    if keepdim:
        return jnp.moveaxis(v, -1, d), jnp.moveaxis(i, -1, d)
    return v[..., 0], i[..., 0]


def _binary_search(seq, values, right):
    """Torch's binary search of each of ``values`` in the 1-d ``seq``, unrolled: ``hi = mid`` where
    ``seq[mid] >= v`` (``> v`` when ``right``), else ``lo = mid + 1``. Its comparisons are IEEE's, so a
    NaN value lands after every element and a NaN element never bounds a value from above, as on the
    CPU (``jnp.searchsorted`` orders NaN last, which differs from it there)."""
    n = seq.shape[-1]
    lo = jnp.zeros(values.shape, jnp.int32)
    hi = jnp.full(values.shape, n, jnp.int32)
    for _ in range(n.bit_length()):
        mid = lo + (hi - lo) // 2
        probe = jnp.take(seq, jnp.minimum(mid, n - 1))
        below = (probe > values) if right else (probe >= values)
        active = lo < hi
        hi = jnp.where(active & below, mid, hi)
        lo = jnp.where(active & ~below, mid + 1, lo)
    return lo


def _searchsorted(ctx, seq, values, right, side, sorter):
    right = bool(right) or side == "right"
    if sorter is not None:
        seq = jnp.take_along_axis(seq, sorter, axis=-1)
    seq, values = promote(seq, values)
    if seq.ndim == 1 or seq.shape[-1] == 0:  # (no boundaries: every value at 0)
        out = _binary_search(seq[(0,) * (seq.ndim - 1)], values, right)
    else:  # one boundary row per leading index
        m = seq.shape[-1]
        rows = jax.vmap(lambda s, v: _binary_search(s, v, right))
        out = rows(seq.reshape(-1, m), values.reshape(-1, values.shape[-1])).reshape(values.shape)
    return out.astype(ctx.out_dtype or jnp.int64)


@lowering(aten.searchsorted.Tensor, aten.searchsorted.Scalar)
def lower_searchsorted_tensor(ctx, sorted_sequence, self, *, out_int32=False, right=False, side=None, sorter=None):
    """searchsorted.Tensor(Tensor sorted_sequence, Tensor self, *, bool out_int32=False, bool right=False, str? side=None, Tensor? sorter=None) -> Tensor

    Also searchsorted.Scalar (``self`` a Scalar, result 0-d). Emits torch's
    binary search, unrolled (``bit_length(n)`` steps, no loop op), vmapped over the
    leading dims of an N-d ``sorted_sequence``.
    """
    return _searchsorted(ctx, sorted_sequence, jnp.asarray(self), right, side, sorter)


@lowering(aten.bucketize.Tensor, aten.bucketize.Scalar)
def lower_bucketize_tensor(ctx, self, boundaries, *, out_int32=False, right=False):
    """bucketize.Tensor(Tensor self, Tensor boundaries, *, bool out_int32=False, bool right=False) -> Tensor

    Also bucketize.Scalar (``self`` a Scalar). ``searchsorted(boundaries, self)``
    with the same ``right`` flag.
    """
    return _searchsorted(ctx, boundaries, jnp.asarray(self), right, None, None)


@lowering(aten.histc.default)
def lower_histc_default(ctx, self, bins=100, min=0, max=0):
    """histc(Tensor self, int bins=100, Scalar min=0, Scalar max=0) -> Tensor

    ``min == max`` takes the data's range (widened by 1 each way when flat), as
    torch does. Bin of ``x`` is ``floor((x - min) * bins / (max - min))`` in the
    input dtype, the top edge going to the last bin; out-of-range and NaN values
    are dropped. Emits a ``scatter-add`` of ones.
    """
    x = self.reshape(-1)
    dt = x.dtype
    lo, hi = jnp.asarray(min, dt), jnp.asarray(max, dt)
    if min == max:
        lo, hi = (jnp.min(x), jnp.max(x)) if x.size else (lo, hi)
        flat = lo == hi
        lo, hi = jnp.where(flat, lo - 1, lo), jnp.where(flat, hi + 1, hi)
    inside = (x >= lo) & (x <= hi)
    pos = jnp.floor((x - lo) * jnp.asarray(bins, dt) / (hi - lo)).astype(jnp.int32)
    pos = jnp.where(inside, jnp.clip(pos, 0, bins - 1), bins)  # index ``bins`` is out of range: dropped
    return jnp.zeros((bins,), dt).at[pos].add(jnp.ones_like(x), mode="drop")
