"""Indexing and scatter: index.Tensor, index_put, index_select, gather, scatter*, put, …

Integer indices follow torch: negative entries count from the end where torch
allows them (``index``, ``index_put``, ``put``); ``None`` entries in an index
list keep a dim whole; advanced-index dims land where NumPy (and torch) put
them. Boolean-mask *reads* have a data-dependent shape and raise
UnsupportedOpError; boolean-mask *writes* of one value are a ``select``.
Duplicate indices in a non-accumulating write pick an arbitrary writer, as in
torch.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import dim as norm_dim, wrapped_int
from converter.lowering.registry import lowering

aten = torch.ops.aten
lax = jax.lax

_MASK_DTYPES = (jnp.bool_, jnp.uint8)
#: The scatter mode of the torch write ops (index_put, scatter*, put): torch refuses an out-of-range index (the
#: runtime checks it first: tpu_runtime.bounds), so the scatter promises its indices in range and an exporter
#: emits no guard for them (lax's default, FILL_OR_DROP, makes ONNX and LiteRT drop them at a cost per write).
_IN_RANGE = "promise_in_bounds"


def _unsupported(ctx, op, reason):
    return UnsupportedOpError(str(op), ctx.target, ctx.location, reason=reason)


def _wrap(idx, size):
    """Negative indices count from the end of a dim of ``size``."""
    return jnp.where(idx < 0, idx + size, idx)


@lowering(aten.index.Tensor)
def lower_index_tensor(ctx, self, indices):
    """index.Tensor(Tensor self, Tensor?[] indices) -> Tensor

    Advanced indexing: emits one ``gather`` (NumPy placement rules, which torch
    shares). ``None`` entries keep a dim. Boolean masks raise UnsupportedOpError:
    the result's length depends on the data. Reflection/replication padding and
    torch.take decompose to this.
    """
    parts = []
    for d, idx in enumerate(indices):
        if idx is None:
            parts.append(slice(None))
        elif idx.dtype in _MASK_DTYPES:
            raise _unsupported(ctx, aten.index.Tensor,
                               "indexing with a boolean mask has a data-dependent output shape; "
                               "use torch.where(mask, x, other) or masked_fill to keep shapes static")
        else:
            parts.append(_wrap(idx, self.shape[d]))
    return self[tuple(parts)]


def _mask_put(ctx, self, indices, values, accumulate):
    """``x[mask] = v`` (``x[:, mask] = v``): a ``select``, no data-dependent shape.

    One value broadcasts over the selected elements. Values along the selected elements (as
    ``torch.compile`` traces ``x[mask] = values``: their count is static) are taken in order, the
    ``k``-th selected element getting the ``k``-th value (a running count of the mask picks it);
    that the mask selects exactly that many elements is an error check (``ctx.checks``) the
    caller runs after the program, as torch raises on a mismatch.
    """
    given = [i for i in indices if i is not None]
    if len(given) != 1:
        return _mask_and_indices_put(ctx, self, indices, values, accumulate)
    pos = next(d for d, i in enumerate(indices) if i is not None)
    mask = given[0].astype(bool)
    rest = self.shape[pos + mask.ndim:]
    if values.size == 1:
        full = mask.reshape((1,) * pos + mask.shape + (1,) * len(rest))
        v = values.reshape(()).astype(self.dtype)
        return jnp.where(full, self + v if accumulate else v, self)
    flat = mask.reshape(-1)
    x = self.reshape(self.shape[:pos] + flat.shape + rest)
    target = x.ndim
    v = values.astype(self.dtype).reshape((1,) * (target - values.ndim) + values.shape)
    count = v.shape[pos]
    v = jnp.broadcast_to(v, self.shape[:pos] + (count,) + rest)
    if count != 1:
        ctx.checks.append((jnp.sum(flat) == count, aten._assert_async.msg,
                           (f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                            "indexing result (the mask selects another number of elements)",), {}))
    if count == 0:  # no values (``x[mask] += 1`` where ``x[mask]`` was empty): the check asks for no selection
        return self
    order = jnp.clip(jnp.cumsum(flat) - 1, 0, count - 1)
    picked = jnp.take(v, order, axis=pos)
    sel = flat.reshape((1,) * pos + flat.shape + (1,) * len(rest))
    return jnp.where(sel, x + picked if accumulate else picked, x).reshape(self.shape)


def _mask_and_indices_put(ctx, self, indices, values, accumulate):
    """``x[idx, mask] = v``, ``x[mask1, mask2] = v``: boolean masks among 1-D (or 0-d) integer indices, as torch
    computes them (each mask's ``nonzero`` coordinates, broadcast together with the indices), with static shapes.

    Each mask's coordinates come from a ``nonzero`` of a static size: the indices' length ``L`` when ``L > 1``, else
    the largest mask's size. The ``k``-th selected element of each mask pairs with the ``k``-th of the others and the
    ``k``-th index; a mask selecting one element pairs it with all of them; rows past the broadcast count are
    dropped by the scatter. That every mask selects that count or one is an error check (``ctx.checks``), as torch
    refuses other counts. Values with a row per selected element beside single indices are laid out along the
    selection (:func:`_per_selected`). Indices of two or more dimensions are refused."""
    reason = ("this boolean-mask write (a mask beside indices of two or more dimensions, or values that fit neither "
              "one selected element nor the selection) has a data-dependent shape; use torch.where")
    masks = [i.astype(bool) for i in indices if i is not None and i.dtype in _MASK_DTYPES]
    ints = [i for i in indices if i is not None and i.dtype not in _MASK_DTYPES]
    if any(jnp.ndim(i) > 1 for i in ints):
        raise _unsupported(ctx, aten.index_put.default, reason)
    length = max((i.size for i in ints), default=1)
    size = length if length > 1 else max(m.size for m in masks)
    if size == 0:  # (an empty mask and no index to broadcast with: nothing is selected)
        return self
    counts = [jnp.sum(m) for m in masks]
    if length > 1:
        count = length
    else:  # the broadcast count: the count that is not 1 (0 included), else 1
        other = functools.reduce(jnp.maximum, [jnp.where(k != 1, k, -1) for k in counts])
        count = jnp.where(other < 0, 1, other)
    if length > 1 or len(masks) > 1:
        ctx.checks.append((jnp.all(jnp.stack([(k == count) | (k == 1) for k in counts])), aten._assert_async.msg,
                           ("shape mismatch: indexing tensors could not be broadcast together (a mask selects "
                            "another number of elements than the other indices hold)",), {}))
    rows = jnp.arange(size)
    coords = []
    for m, k in zip(masks, counts):
        found = jnp.nonzero(m, size=size, fill_value=m.shape)
        coords.append([jnp.where(rows < count, jnp.where(k == 1, c[0], c), n) for c, n in zip(found, m.shape)])
    parts, d, coords = [], 0, iter(coords)
    for i in indices:
        if i is None:
            parts.append(slice(None))
            d += 1
        elif i.dtype in _MASK_DTYPES:
            parts.extend(next(coords))
            d += i.ndim
        else:
            parts.append(_wrap(i, self.shape[d]))
            d += 1
    picked = jax.eval_shape(lambda x: x[tuple(parts)], self).shape  # (the indexed result's shape)
    values = _trimmed(values.astype(self.dtype), len(picked))
    if length == 1:  # values that do not broadcast to one selected row hold a row per selected element
        one = tuple(p[:1] if hasattr(p, "shape") and p.ndim == 1 else p for p in parts)
        row = jax.eval_shape(lambda x: x[one], self).shape
        if not _broadcasts(values.shape, row):
            values = _per_selected(ctx, values, picked, row, count, reason)
    at = self.at[tuple(parts)]
    if accumulate:
        return getattr(at, _how(self.dtype, "add"))(values, mode="drop")
    return at.set(values, mode="drop")


def _per_selected(ctx, values, picked, row, count, reason):
    """``values`` with a row per selected element (their count ``C`` static as traced, the mask's ``count`` known at
    run time) laid out along the indexed result's selection axis of ``size`` rows (``picked``; ``row``: its shape
    with one row): cut or zero-padded to ``size`` (rows past ``count`` are dropped by the scatter), with the check
    that ``count`` is ``C``, as torch refuses other counts."""
    axis = next((a for a, (p, r) in enumerate(zip(picked, row)) if p != r), None)
    at = None if axis is None else axis - (len(picked) - values.ndim)
    if at is None or at < 0 or not _broadcasts(values.shape[:at] + (1,) + values.shape[at + 1:], row):
        raise _unsupported(ctx, aten.index_put.default, reason)
    rows, size = values.shape[at], picked[axis]
    ctx.checks.append((count == rows, aten._assert_async.msg,
                       (f"shape mismatch: value tensor of shape {list(values.shape)} cannot be broadcast to "
                        "indexing result (the masks select another number of elements)",), {}))
    values = jax.lax.slice_in_dim(values, 0, min(rows, size), axis=at)
    pad = [(0, 0)] * values.ndim
    pad[at] = (0, size - values.shape[at])
    return jnp.pad(values, pad)


def _trimmed(values, rank):
    """``values`` without the leading size-1 dimensions past ``rank`` (the indexed result's), as the CPU's copy
    strips them."""
    while values.ndim > rank and values.shape[0] == 1:
        values = values[0]
    return values


def _broadcasts(shape, to):
    """Whether ``shape`` broadcasts to ``to``."""
    try:
        return jnp.broadcast_shapes(shape, to) == tuple(to)
    except ValueError:
        return False


@lowering(aten.index_put.default)
def lower_index_put_default(ctx, self, indices, values, accumulate=False):
    """index_put(Tensor self, Tensor?[] indices, Tensor values, bool accumulate=False) -> Tensor

    Emits a ``scatter`` (``scatter-add`` when accumulating) of ``values``
    broadcast to the indexed shape. A boolean mask becomes a ``select`` (of one value, or of
    values in mask order: :func:`_mask_put`). ``x[i] = v``, index_add, index_copy and index_fill decompose to this.
    """
    if any(i is not None and i.dtype in _MASK_DTYPES for i in indices):
        return _mask_put(ctx, self, indices, values, accumulate)
    parts = tuple(slice(None) if i is None else _wrap(i, self.shape[d]) for d, i in enumerate(indices))
    given = [i for i in indices if i is not None]
    rank = max((jnp.ndim(i) for i in given), default=0) + self.ndim - len(given)  # (the indexed result's)
    values = _trimmed(values.astype(self.dtype), rank)  # (index_add's 0-d index: a [1, n] source into a [n] row)
    at = self.at[parts]
    if accumulate:
        return getattr(at, _how(self.dtype, "add"))(values, mode=_IN_RANGE)
    return at.set(values, mode=_IN_RANGE)


@lowering(aten.index_select.default)
def lower_index_select_default(ctx, self, dim, index):
    """index_select(Tensor self, int dim, Tensor index) -> Tensor

    Emits one ``gather`` along ``dim`` (a 0-d index acts as a 1-element one).
    roll decomposes to this.
    """
    index = index.reshape(-1)
    if self.ndim == 0:
        return jnp.take(self.reshape(1), index, axis=0, mode="clip").reshape(())
    return jnp.take(self, index, axis=norm_dim(dim, self.ndim), mode="clip")


@lowering(aten.gather.default)
def lower_gather_default(ctx, self, dim, index, *, sparse_grad=False):
    """gather(Tensor self, int dim, Tensor index, *, bool sparse_grad=False) -> Tensor

    Emits ``take_along_axis`` (one ``gather``); ``self`` is first cropped to
    ``index``'s extent in the other dims, which torch allows to be smaller. An empty ``index``
    gives an empty result of its shape (torch then accepts any number of its dims).
    """
    if index.size == 0:
        return jnp.zeros(index.shape, self.dtype)
    if self.ndim == 0:
        return jnp.take(self.reshape(1), index.reshape(-1), mode="clip").reshape(index.shape)
    d = norm_dim(dim, self.ndim)
    crop = tuple(slice(None) if a == d else slice(0, index.shape[a]) for a in range(self.ndim))
    return jnp.take_along_axis(self[crop], index, axis=d, mode="clip")


def _coords(x, dim, index):
    """Full scatter coordinates: ``index`` along ``dim``, iotas elsewhere (index's shape)."""
    d = norm_dim(dim, x.ndim)
    return tuple(index if a == d else lax.broadcasted_iota(index.dtype, index.shape, a) for a in range(index.ndim))


def _crop(src, index):
    return src[tuple(slice(0, n) for n in index.shape)] if hasattr(src, "shape") and src.ndim else src


def _scatter(x, dim, index, src, how):
    """``x.at[coords].<how>(src)`` with torch's src cropping; 0-d tensors act as 1-element. An empty ``index``
    leaves ``x`` as it is (torch then accepts any number of its dims: gather's backward of an empty gather)."""
    if index.size == 0:
        return x
    if x.ndim == 0:
        out = _scatter(x.reshape(1), 0, index.reshape(-1), src if not hasattr(src, "reshape") else src.reshape(-1), how)
        return out.reshape(())
    src = _crop(src, index)
    if type(src) is int and jnp.issubdtype(x.dtype, jnp.integer):  # (-3 into uint8 is 253, as torch casts it)
        src = wrapped_int(src, x.dtype)
    src = src.astype(x.dtype) if hasattr(src, "astype") else jnp.asarray(src, x.dtype)
    return getattr(x.at[_coords(x, dim, index)], _how(x.dtype, how))(src, mode=_IN_RANGE)


def _how(dtype, how):
    """The scatter update ``how`` for ``dtype``: on bool, adding is a logical or (``max``) and multiplying a
    logical and (``min``), as torch's CPU kernels compute them (XLA's scatter-add refuses bool)."""
    return {"add": "max", "multiply": "min"}.get(how, how) if dtype == jnp.bool_ else how


@lowering(aten.scatter.src, aten.scatter.value)
def lower_scatter_src(ctx, self, dim, index, src=None, *, value=None):
    """scatter.src(Tensor self, int dim, Tensor index, Tensor src) -> Tensor

    Also scatter.value(Tensor self, int dim, Tensor index, Scalar value). Emits a
    ``scatter`` (replace). The value arrives positionally for scatter.value.
    """
    return _scatter(self, dim, index, src if value is None else value, "set")


_REDUCE = {"add": "add", "sum": "add", "multiply": "multiply", "prod": "multiply", "amax": "max", "amin": "min"}


@lowering(aten.scatter.reduce, aten.scatter.value_reduce)
def lower_scatter_reduce(ctx, self, dim, index, src, *, reduce):
    """scatter.reduce(Tensor self, int dim, Tensor index, Tensor src, *, str reduce) -> Tensor

    Also scatter.value_reduce (``src`` a Scalar). ``reduce`` is "add" or
    "multiply"; emits ``scatter-add`` / ``scatter-mul``.
    """
    if reduce not in ("add", "multiply"):
        raise _unsupported(ctx, aten.scatter.reduce, f"reduce={reduce!r} (torch accepts 'add' and 'multiply')")
    return _scatter(self, dim, index, src, _REDUCE[reduce])


@lowering(aten.scatter_add.default)
def lower_scatter_add_default(ctx, self, dim, index, src):
    """scatter_add(Tensor self, int dim, Tensor index, Tensor src) -> Tensor

    Emits ``scatter-add``.
    """
    return _scatter(self, dim, index, src, "add")


def _reduce_into(ctx, op, x, coords, src, reduce, include_self):
    """scatter_reduce/index_reduce core: sum, prod, mean, amax, amin with include_self."""
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        raise _unsupported(ctx, op, f"reduce={reduce!r}")
    src = src.astype(x.dtype)
    touched = jnp.zeros(x.shape, bool).at[coords].set(True, mode=_IN_RANGE)
    if reduce in ("sum", "mean"):
        identity = 0
    elif reduce == "prod":
        identity = 1
    elif jnp.issubdtype(x.dtype, jnp.floating):
        identity = -jnp.inf if reduce == "amax" else jnp.inf
    elif x.dtype == jnp.bool_:
        identity = reduce == "amin"
    else:
        info = jnp.iinfo(x.dtype)
        identity = info.min if reduce == "amax" else info.max
    base = x if include_self else jnp.where(touched, jnp.asarray(identity, x.dtype), x)
    out = getattr(base.at[coords], _how(x.dtype, _REDUCE.get(reduce, "add")))(src, mode=_IN_RANGE)
    if reduce != "mean":
        return out
    count = jnp.zeros(x.shape, x.dtype).at[coords].add(jnp.ones_like(src), mode=_IN_RANGE) + (1 if include_self else 0)
    count = jnp.where(touched, count, jnp.ones((), x.dtype))
    return out // count if jnp.issubdtype(x.dtype, jnp.integer) else out / count


@lowering(aten.scatter_reduce.two)
def lower_scatter_reduce_two(ctx, self, dim, index, src, reduce, *, include_self=True):
    """scatter_reduce.two(Tensor self, int dim, Tensor index, Tensor src, str reduce, *, bool include_self=True) -> Tensor

    ``reduce`` in sum/prod/mean/amax/amin: emits ``scatter`` with that combiner
    onto ``self`` (or onto the reduction's identity where touched, when
    ``include_self=False``); mean divides by a ``scatter-add`` count (floor
    division for integers, like torch). An empty ``index`` leaves ``self`` as it is.
    """
    if index.size == 0:
        return self
    if self.ndim == 0:
        return lower_scatter_reduce_two(ctx, self.reshape(1), 0, index.reshape(-1), src.reshape(-1), reduce,
                                        include_self=include_self).reshape(())
    src = _crop(src, index)
    return _reduce_into(ctx, aten.scatter_reduce.two, self, _coords(self, dim, index), src, reduce, include_self)


@lowering(aten.index_reduce.default)
def lower_index_reduce_default(ctx, self, dim, index, source, reduce, *, include_self=True):
    """index_reduce(Tensor self, int dim, Tensor index, Tensor source, str reduce, *, bool include_self=True) -> Tensor

    ``reduce`` in prod/mean/amax/amin: slice ``k`` of ``source`` along ``dim`` is
    reduced into slice ``index[k]`` of ``self`` — a scatter_reduce with the index
    broadcast along the other dims.
    """
    if self.ndim == 0:
        return lower_index_reduce_default(ctx, self.reshape(1), 0, index.reshape(-1), source.reshape(-1), reduce,
                                          include_self=include_self).reshape(())
    d = norm_dim(dim, self.ndim)
    index = jnp.broadcast_to(index.reshape((1,) * d + (-1,) + (1,) * (self.ndim - d - 1)), source.shape)
    return _reduce_into(ctx, aten.index_reduce.default, self, _coords(self, d, index), source, reduce, include_self)


@lowering(aten.masked_scatter.default)
def lower_masked_scatter_default(ctx, self, mask, source):
    """masked_scatter(Tensor self, Tensor mask, Tensor source) -> Tensor

    Position ``p`` where the (broadcast) mask is true takes ``source.flatten()[k]``,
    ``k`` counting true positions before ``p``: emits ``cumsum`` + ``gather`` +
    ``select`` — static shapes throughout.
    """
    shape = jnp.broadcast_shapes(self.shape, mask.shape)
    m = jnp.broadcast_to(mask, shape).reshape(-1)
    x = jnp.broadcast_to(self, shape).reshape(-1)
    if source.size == 0:  # torch requires as many source elements as true mask entries: none here
        return x.reshape(shape)
    pos = jnp.cumsum(m.astype(jnp.int32)) - 1
    vals = jnp.take(source.reshape(-1), pos, mode="clip").astype(self.dtype)
    return jnp.where(m, vals, x).reshape(shape)


@lowering(aten.masked_scatter_backward.default)
def lower_masked_scatter_backward_default(ctx, grad_output, mask, sizes):
    """masked_scatter_backward(Tensor grad_output, Tensor mask, SymInt[] sizes) -> Tensor

    ``source``'s gradient: the gradient at the true mask positions, in order, into the
    first elements of a zero tensor of ``sizes`` (a ``scatter-add`` at the positions'
    running count; static shapes, no data-dependent length).
    """
    g = grad_output.reshape(-1)
    m = jnp.broadcast_to(mask, grad_output.shape).reshape(-1)
    n = math.prod(sizes)
    pos = jnp.where(m, jnp.cumsum(m.astype(jnp.int32)) - 1, n)  # false positions fall off the end
    return jnp.zeros((n,), grad_output.dtype).at[pos].add(g, mode="drop").reshape(tuple(sizes))


@lowering(aten.put.default)
def lower_put_default(ctx, self, index, source, accumulate=False):
    """put(Tensor self, Tensor index, Tensor source, bool accumulate=False) -> Tensor

    Treats ``self`` as 1-d: a ``scatter`` (or ``scatter-add``) at flat indices
    (negative ones count from the end).
    """
    flat = self.reshape(-1)
    idx = _wrap(index.reshape(-1), flat.shape[0])
    src = source.reshape(-1).astype(self.dtype)
    at = flat.at[idx]
    flat = getattr(at, _how(flat.dtype, "add"))(src, mode=_IN_RANGE) if accumulate else at.set(src, mode=_IN_RANGE)
    return flat.reshape(self.shape)


@lowering(aten.nonzero_static.default)
def lower_nonzero_static_default(ctx, self, *, size, fill_value=-1):
    """nonzero_static(Tensor self, *, SymInt size, int fill_value=-1) -> Tensor

    The static-shape nonzero: ``(size, ndim)`` coordinates in row-major order,
    padded with ``fill_value`` (``jnp.nonzero(size=...)``: cumsum + scatter).
    torch.nonzero itself has a data-dependent shape and is not lowered.
    """
    if self.ndim == 0:
        return jnp.zeros((size, 0), jnp.int64)
    cols = jnp.nonzero(self, size=size, fill_value=fill_value)
    return jnp.stack(cols, axis=1).astype(jnp.int64)


@lowering(aten.repeat_interleave.Tensor)
def lower_repeat_interleave_tensor(ctx, repeats, *, output_size=None):
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor

    With ``output_size`` (static shape): ``searchsorted(cumsum(repeats), iota,
    side="right")``. Without it the length depends on the data and the op raises
    UnsupportedOpError (pass ``output_size=`` to torch.repeat_interleave).
    """
    if output_size is None:
        raise _unsupported(ctx, aten.repeat_interleave.Tensor,
                           "repeat_interleave with tensor repeats has a data-dependent output shape; "
                           "pass output_size= to torch.repeat_interleave")
    ends = jnp.cumsum(repeats.reshape(-1).astype(jnp.int64))
    return jnp.searchsorted(ends, jnp.arange(output_size, dtype=jnp.int64), side="right").astype(jnp.int64)
