"""Indexing: gather → GATHER / GATHER_ND, scatter(-add) → SCATTER_ND + SELECT_V2/ADD,
sort / top_k → TOPK_V2 (never STABLEHLO_SORT, which ai-edge-litert 2.3 refuses).

Out-of-range indices abort TFLite's GATHER / SCATTER_ND, while lax gives them a
meaning that lowerings rely on (``histc`` drops values outside its range through a
scatter, ``masked_scatter`` gathers with index -1 and selects the result away), so
the rules reproduce lax's modes: a gather clamps its index rows (CLIP,
PROMISE_IN_BOUNDS: what XLA does) or also replaces out-of-range rows with the fill
value (FILL_OR_DROP); a scatter clamps (CLIP; PROMISE_IN_BOUNDS, the torch write ops'
mode: torch refuses such indices) or drops out-of-range updates (FILL_OR_DROP) by
redirecting them to one padding slot appended to the operand and sliced off. Constant indices are checked at export time and cost
nothing when they are in range.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Sequence

import numpy as np
from jax.extend.core import primitives as lax
from jax.lax import GatherScatterMode

from exporters.litert.emitter import Emitter, Val, is_static, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.linalg import _permuted
from exporters.litert.rules.shape import _same, dynamic_range, i32, reshape_to


def _index_tensor(em: Emitter, idx: Val) -> Any:
    """The index tensor in int32/int64 (TFLite's index dtypes)."""
    t = em.tensor_of(idx, None, expand=True)
    if np.dtype(t.dtype) not in (np.dtype(np.int32), np.dtype(np.int64)):
        t = em.cast(t, np.int32)
    return t


def _clamped(em: Emitter, it: Any, bounds: Sequence, mask: bool) -> tuple[Any, Any]:
    """Clamp each index row of ``it`` (``[..., k]``) into ``[0, bounds[j] - 1]`` per column.

    Returns:
        (clamped index tensor, in-range mask shaped ``[..., 1]``); the mask is ``None``
        unless ``mask`` is set, and also when constant indices are all in range.
    """
    if it.is_const and all(is_static(b) for b in bounds):  # (a dynamic bound: clamped in the program, below)
        a = np.asarray(it.data)
        hi = np.asarray([int(b) - 1 for b in bounds], a.dtype)
        c = np.minimum(np.maximum(a, 0), hi)
        ok = np.all(c == a, axis=-1, keepdims=True)
        return em.const(c), (em.const(ok) if mask and not ok.all() else None)
    if all(is_static(b) for b in bounds):
        hi = em.const(np.asarray([int(b) - 1 for b in bounds], it.dtype))
    else:
        hi = em.cast(em.shape_tensor([b - 1 for b in bounds]), it.dtype)
    low = em.emit_like("MAXIMUM", [it, em.const(np.zeros((), it.dtype))], it)
    c = em.emit_like("MINIMUM", [low, hi], it)
    if not mask:
        return c, None
    same = em.emit_like("EQUAL", [it, c], it, np.bool_)
    last = len(it.shape) - 1
    ok = em.reduced(it, [last], "in_range")
    ok.dtype = np.dtype(np.bool_)
    em.op("REDUCE_ALL", [same, em.const(i32([last]))], [ok], keepDims=True)
    return c, ok


def _fill_value(eqn: Any, dtype: np.dtype) -> np.ndarray:
    """A FILL_OR_DROP gather's fill value (lax.gather puts its default, NaN or the dtype's extreme, in the eqn)."""
    return np.asarray(eqn.params["fill_value"], dtype)


def _with_batching_indices(em: Emitter, idx: Val, operand_bdims: tuple, index_bdims: tuple,
                           index_map: tuple) -> tuple[Val, tuple]:
    """Turn batching dims into explicit index columns (iota), for GATHER_ND/SCATTER_ND."""
    if not operand_bdims:
        return idx, tuple(index_map)
    batch_shape = list(idx.shape[:-1])
    t = em.tensor_of(idx, None, expand=True)
    if not idx.static:  # the columns at run time: RANGE over each batching dim, broadcast (a dynamic batch)
        parts = [_iota_column(em, batch_shape, ib, np.dtype(idx.dtype)) for ib in index_bdims]
        dims = batch_shape + [len(parts) + idx.shape[-1]]
        cat = em.emit("CONCATENATION", parts + [t], dims, idx.dtype, axis=len(batch_shape))
        return Val(dims, idx.dtype, tensor=cat), tuple(operand_bdims) + tuple(index_map)
    cols = []
    for ib in index_bdims:
        col = np.arange(batch_shape[ib]).reshape([-1 if i == ib else 1 for i in range(len(batch_shape))])
        cols.append(np.broadcast_to(col, batch_shape)[..., None].astype(np.dtype(idx.dtype)))
    iota = np.concatenate(cols, axis=-1) if cols else None
    it = em.const(iota, idx.dtype)
    dims = batch_shape + [len(cols) + idx.shape[-1]]
    cat = em.emit("CONCATENATION", [it, t], dims, idx.dtype, axis=len(batch_shape))
    return Val(dims, idx.dtype, tensor=cat), tuple(operand_bdims) + tuple(index_map)


def _iota_column(em: Emitter, batch_shape: list, ib: int, dtype: np.dtype) -> Any:
    """``batch_shape + [1]`` holding each position's index along batch dim ``ib`` (``batch_shape`` may be symbolic):
    RANGE (or a constant) along ``ib``, broadcast over the rest."""
    n = batch_shape[ib]
    base = [1] * len(batch_shape) + [1]
    base[ib] = n
    r = em.const(np.arange(int(n), dtype=dtype).reshape(base)) if is_static(n) else dynamic_range(em, n, base, dtype)
    return em.tensor_of(Val(batch_shape + [1], dtype, tensor=r, base=base), None, expand=True)


@rule(lax.gather_p)
def lower_gather(em: Emitter, eqn: Any, x: Val, idx: Val) -> Val:
    """gather of whole slices → GATHER (one indexed dim) or GATHER_ND (several)."""
    dn = eqn.params["dimension_numbers"]
    sizes = tuple(eqn.params["slice_sizes"])
    aval = out_aval(eqn)
    idx, index_map = _with_batching_indices(em, idx, tuple(dn.operand_batching_dims),
                                            tuple(dn.start_indices_batching_dims), tuple(dn.start_index_map))
    collapsed = set(dn.collapsed_slice_dims) | set(dn.operand_batching_dims)
    for d in range(x.rank):
        if d in index_map:
            if sizes[d] != 1:
                raise Unsupported("gather of partial slices along an indexed dim")
        elif not _same(sizes[d], x.shape[d]):
            raise Unsupported("gather of partial slices (only whole-slice gathers map to TFLite)")
    rest = [d for d in range(x.rank) if d not in index_map]
    batch_shape = list(idx.shape[:-1])
    fill = eqn.params.get("mode") == GatherScatterMode.FILL_OR_DROP
    it, in_range = _clamped(em, _index_tensor(em, idx), [x.shape[d] for d in index_map], fill)
    if len(index_map) == 1:
        a = index_map[0]
        it = em.emit("RESHAPE", [it, em.shape_operand(batch_shape)], batch_shape, it.dtype)
        xt = em.tensor_of(x, None, expand=True)
        gshape = list(x.shape[:a]) + batch_shape + list(x.shape[a + 1:])
        out = em.emit("GATHER", [xt, it], gshape, x.dtype, axis=a, batchDims=0)
        # GATHER order: operand dims before a, batch dims, operand dims after a.
        order = list(range(a)) + [("b", i) for i in range(len(batch_shape))] + list(range(a + 1, x.rank))
    else:
        xp = _permuted(x, list(index_map) + rest)
        xt = em.tensor_of(xp, None, expand=True)
        gshape = batch_shape + [x.shape[d] for d in rest]
        out = em.emit("GATHER_ND", [xt, it], gshape, x.dtype)
        order = [("b", i) for i in range(len(batch_shape))] + rest
    g = Val(gshape, x.dtype, tensor=out)
    # Output of lax.gather: offset dims (operand dims not collapsed, in order) at
    # positions offset_dims; batch dims fill the remaining positions in order.
    offset_ops = [d for d in range(x.rank) if d not in collapsed]
    slots: list[Any] = [None] * len(aval.shape)
    for pos, d in zip(dn.offset_dims, offset_ops):
        slots[pos] = d
    bi = iter(range(len(batch_shape)))
    slots = [("b", next(bi)) if s is None else s for s in slots]
    # offset dims that were indexed (size-1, not collapsed) are not in the GATHER output.
    present = [s for s in slots if s in order]
    y = _permuted(g, [order.index(s) for s in present])
    if len(present) != len(slots):
        y = reshape_to(em, y, aval.shape)
    if in_range is None:
        return y
    # FILL_OR_DROP: rows with an out-of-range index give the fill value (the mask's
    # batch dims are in output order, the offset dims become 1 and broadcast).
    mshape = _expand(batch_shape, dn.offset_dims)
    mask = em.emit("RESHAPE", [in_range, em.shape_operand(mshape)], mshape, np.bool_)
    yt = em.tensor_of(y, None, expand=True)
    out = em.emit("SELECT_V2", [mask, yt, em.const(_fill_value(eqn, np.dtype(x.dtype)))], aval.shape, x.dtype)
    return Val(aval.shape, x.dtype, tensor=out)


def _expand(batch_shape: list, offset_dims: Sequence) -> list:
    """``batch_shape`` placed at the output positions that are not ``offset_dims`` (1 elsewhere)."""
    rank = len(batch_shape) + len(offset_dims)
    dims = iter(batch_shape)
    return [1 if pos in offset_dims else next(dims) for pos in range(rank)]


def _scatter(em: Emitter, eqn: Any, x: Val, idx: Val, upd: Val, add: bool, reduce: str | None = None) -> Val:
    """scatter / scatter-add of whole slices → SCATTER_ND (see the module docstring for
    out-of-range indices); ``add``: operand + scattered, else SELECT_V2 on a hit mask. ``reduce``
    ("MAX" / "MIN"): :func:`_scatter_extreme` instead of SCATTER_ND."""
    dn = eqn.params["dimension_numbers"]
    if any(is_static(d) and d == 0 for d in upd.shape):
        return x  # no updates
    idx, index_map = _with_batching_indices(em, idx, tuple(dn.operand_batching_dims),
                                            tuple(dn.scatter_indices_batching_dims),
                                            tuple(dn.scatter_dims_to_operand_dims))
    inserted = set(dn.inserted_window_dims) | set(dn.operand_batching_dims)
    if set(index_map) != inserted:
        raise Unsupported("scatter of partial windows along an indexed dim")
    rest = [d for d in range(x.rank) if d not in index_map]
    window = list(dn.update_window_dims)
    for w, d in zip(window, rest):
        if not _same(upd.shape[w], x.shape[d]):
            raise Unsupported("scatter of partial windows (only whole-slice updates map to TFLite)")
    batch_pos = [i for i in range(upd.rank) if i not in window]
    u = _permuted(upd, batch_pos + window)
    ut = em.tensor_of(u, None, expand=True)
    order = list(index_map) + rest
    xt = em.tensor_of(x, tuple(order), expand=True)
    shape = [x.shape[d] for d in order]  # (dynamic dims: the shape operands are computed at run time)
    drop = eqn.params.get("mode") == GatherScatterMode.FILL_OR_DROP
    it, in_range = _clamped(em, _index_tensor(em, idx), shape[:len(index_map)], drop)
    full = list(shape)
    if in_range is not None:  # dropped updates go to a padding slot after the first indexed dim
        full[0] = shape[0] + 1
        if is_static(shape[0]):
            pad = np.zeros(len(index_map), np.dtype(it.dtype))
            pad[0] = shape[0]
            padding = em.const(pad)
        else:
            parts = [em.cast(em.dim_tensor(shape[0]), it.dtype)]
            if len(index_map) > 1:
                parts.append(em.const(np.zeros(len(index_map) - 1, np.dtype(it.dtype))))
            padding = parts[0] if len(parts) == 1 else \
                em.emit("CONCATENATION", parts, [len(index_map)], it.dtype, axis=0)
        if it.is_const and padding.is_const:
            it = em.const(np.where(in_range.data, it.data, padding.data))
        else:
            it = em.emit_like("SELECT_V2", [in_range, it, padding], it)
    # SCATTER_ND takes int32 indices only, with an int32 shape (the clamped values fit).
    it = em.cast(it, np.int32)
    if reduce is not None:
        out = _scatter_extreme(em, it, ut, xt, shape, list(u.shape), reduce, x.dtype)
        return Val(x.shape, x.dtype, tensor=out, perm=tuple(order))
    if not ut.shape:  # one scalar update (``x.at[i, j].set(v)``): SCATTER_ND takes updates of rank 1 or more
        ut = em.emit("RESHAPE", [ut, em.const(i32([1]))], [1], x.dtype)
        it = em.emit("RESHAPE", [it, em.const(i32([1, len(index_map)]))], [1, len(index_map)], np.int32)
    shape_t = em.shape_tensor(full)

    def scatter_nd(updates: Any, dtype: Any) -> Any:
        out = em.emit("SCATTER_ND", [it, updates, shape_t], full, dtype)
        if in_range is None:
            return out
        return em.emit("SLICE", [out, em.const(i32([0] * len(shape))), em.shape_tensor(shape)], shape, dtype)

    if add:
        out = em.emit("ADD", [xt, scatter_nd(ut, x.dtype)], shape, x.dtype)
    else:
        if ut.dynamic:  # (ones of the updates' run-time shape)
            dims = em.emit("SHAPE", [ut], [len(ut.shape)], np.int32, outType=2)
            ones = em.emit("FILL", [dims, em.const(np.ones((), np.float32))], u.shape, np.float32)
        else:
            ones = em.const(np.ones(ut.shape, np.float32))
        rows = list(idx.shape[:-1]) if it.dynamic else list(it.shape[:-1])  # (symbolic where dynamic)
        keep = _last_writes(em, it, rows, len(ut.shape) - (len(it.shape) - 1))
        if keep is not None:  # duplicate indices: only the last write to a position counts
            ut = em.emit("SELECT_V2", [keep, ut, em.const(np.zeros((), ut.dtype))], ut.shape, ut.dtype)
            ones = em.emit("SELECT_V2", [keep, ones, em.const(np.zeros((), np.float32))], ut.shape, np.float32)
        hits = scatter_nd(ones, np.float32)
        mask = em.emit("GREATER", [hits, em.const(np.zeros((), np.float32))], shape, np.bool_)
        out = em.emit("SELECT_V2", [mask, scatter_nd(ut, x.dtype), xt], shape, x.dtype)
    return Val(x.shape, x.dtype, tensor=out, perm=tuple(order))


#: The most elements of the (rows × slots × slice) comparison :func:`_scatter_extreme` builds.
MAX_EXTREME_SCATTER_ELEMENTS = 1 << 24


def _scatter_extreme(em: Emitter, it: Any, ut: Any, xt: Any, shape: list, upd_shape: list, reduce: str,
                     dtype: Any) -> Any:
    """scatter-max / scatter-min of whole slices along one indexed dim (``EmbeddingBag(mode="max")``): TFLite has no
    reducing scatter, so each update row is compared with every slot (a one-hot EQUAL of its index with a RANGE of
    the slots; a dropped row's padding index matches none), the rows that miss a slot take the reduction's identity
    (SELECT_V2), REDUCE_MAX / REDUCE_MIN over the rows, then MAXIMUM / MINIMUM with the operand. ``upd_shape``: the
    updates' shape, symbolic where dynamic. The rows and slots may be dynamic (a dynamic batch of bags), the slices
    not; static sizes are held to at most :data:`MAX_EXTREME_SCATTER_ELEMENTS` compared elements."""
    if it.shape[-1] != 1 or not all(is_static(d) for d in shape[1:]):
        raise Unsupported(f"scatter-{reduce.lower()} of dynamic slices or along more than one indexed dim")
    slots, window = shape[0], [int(d) for d in shape[1:]]
    row_dims = upd_shape[:len(upd_shape) - len(window)]
    rows = functools.reduce(operator.mul, row_dims, 1)  # (a symbolic dim where a row dim is dynamic)
    if is_static(rows) and is_static(slots):
        if int(rows) * int(slots) * int(np.prod(window, dtype=np.int64)) > MAX_EXTREME_SCATTER_ELEMENTS:
            raise Unsupported(f"scatter-{reduce.lower()} of {rows} rows into {slots} slots of {window} (the "
                              f"comparison would exceed {MAX_EXTREME_SCATTER_ELEMENTS} elements)")
    else:
        em.note(f"scatter-{reduce.lower()} of a dynamic number of rows or slots: its rows × slots comparison is "
                f"sized at run time")
    slot_ids = em.const(np.arange(int(slots), dtype=np.int32).reshape(1, -1)) if is_static(slots) else \
        dynamic_range(em, slots, [1, slots], np.int32)
    ones = [1] * len(window)
    index = em.emit("RESHAPE", [it, em.shape_operand([rows, 1])], [rows, 1], np.int32)
    hit = em.emit("EQUAL", [index, slot_ids], [rows, slots], np.bool_)
    hit = em.emit("RESHAPE", [hit, em.shape_operand([rows, slots] + ones)], [rows, slots] + ones, np.bool_)
    values = em.emit("RESHAPE", [ut, em.shape_operand([rows, 1] + window)], [rows, 1] + window, dtype)
    kind = np.dtype(dtype)
    far = (-np.inf if reduce == "MAX" else np.inf) if kind.kind == "f" else \
        (np.iinfo(kind).min if reduce == "MAX" else np.iinfo(kind).max)
    picked = em.emit("SELECT_V2", [hit, values, em.const(np.asarray(far, kind))], [rows, slots] + window, dtype)
    reduced = em.emit(f"REDUCE_{reduce}", [picked, em.const(i32([0]))], shape, dtype, keepDims=False)
    return em.emit("MAXIMUM" if reduce == "MAX" else "MINIMUM", [xt, reduced], shape, dtype)


#: Above this many runtime index rows (a static number of them) the n×n duplicate check is not emitted (noted instead).
MAX_DYNAMIC_SCATTER_ROWS = 1024
_DUPLICATES_NOTE = ("scatter (index_put) with {what}: assumes unique indices (SCATTER_ND sums duplicate "
                    "writes where torch keeps the last)")


def _last_writes(em: Emitter, it: Any, rows: list, window_rank: int) -> Any:
    """A bool mask over the update rows of a replacing scatter, True where no later row
    writes the same position (XLA and torch's CPU kernels let the last write win, while
    SCATTER_ND sums duplicates), shaped to broadcast over the updates; None when every
    row is kept (constant, unique indices: nothing to emit) or the check is not emitted
    (more than :data:`MAX_DYNAMIC_SCATTER_ROWS` runtime rows: the artifact's notes say that
    unique indices are assumed). ``rows``: the index rows' shape (symbolic dims where dynamic: a
    dynamic number of rows is compared pairwise at run time, the order of the rows from a RANGE).
    """
    k = int(it.shape[-1])
    mask_shape = rows + [1] * window_rank
    n = functools.reduce(operator.mul, rows, 1)  # (a symbolic dim where a row dim is dynamic)
    n = int(n) if is_static(n) else n
    if it.is_const:
        flat = np.asarray(it.data).reshape(n, k)
        _, last_from_end = np.unique(flat[::-1], axis=0, return_index=True)
        keep = np.zeros(n, np.bool_)
        keep[n - 1 - last_from_end] = True
        return None if keep.all() else em.const(keep.reshape(mask_shape))
    if is_static(n) and n <= 1:
        return None
    if is_static(n) and n > MAX_DYNAMIC_SCATTER_ROWS:
        em.note(_DUPLICATES_NOTE.format(what=f"{n} runtime index rows (> {MAX_DYNAMIC_SCATTER_ROWS})"))
        return None
    flat = em.emit("RESHAPE", [it, em.shape_operand([n, k])], [n, k], it.dtype)
    a = em.emit("RESHAPE", [flat, em.shape_operand([n, 1, k])], [n, 1, k], it.dtype)
    b = em.emit("RESHAPE", [flat, em.shape_operand([1, n, k])], [1, n, k], it.dtype)
    same = em.emit("REDUCE_ALL", [em.emit("EQUAL", [a, b], [n, n, k], np.bool_), em.const(i32([2]))], [n, n],
                   np.bool_, keepDims=False)
    if is_static(n):
        after = em.const(np.triu(np.ones((n, n), np.bool_), 1))
    else:
        after = em.emit("GREATER", [dynamic_range(em, n, [1, n], np.int32), dynamic_range(em, n, [n, 1], np.int32)],
                        [n, n], np.bool_)
    later = em.emit("LOGICAL_AND", [same, after], [n, n], np.bool_)
    overwritten = em.emit("REDUCE_ANY", [later, em.const(i32([1]))], [n], np.bool_, keepDims=False)
    keep = em.emit("LOGICAL_NOT", [overwritten], [n], np.bool_)
    return em.emit("RESHAPE", [keep, em.shape_operand(mask_shape)], mask_shape, np.bool_)


@rule(lax.scatter_p)
def lower_scatter(em: Emitter, eqn: Any, x: Val, idx: Val, upd: Val) -> Val:
    """scatter (replace) → SCATTER_ND of updates and of a hit mask, then SELECT_V2."""
    return _scatter(em, eqn, x, idx, upd, add=False)


@rule(lax.scatter_add_p)
def lower_scatter_add(em: Emitter, eqn: Any, x: Val, idx: Val, upd: Val) -> Val:
    """scatter-add → operand + SCATTER_ND (which sums duplicate indices, like scatter-add)."""
    return _scatter(em, eqn, x, idx, upd, add=True)


@rule(lax.scatter_max_p)
def lower_scatter_max(em: Emitter, eqn: Any, x: Val, idx: Val, upd: Val) -> Val:
    """scatter-max → a one-hot comparison, REDUCE_MAX and MAXIMUM (:func:`_scatter_extreme`)."""
    return _scatter(em, eqn, x, idx, upd, add=False, reduce="MAX")


@rule(lax.scatter_min_p)
def lower_scatter_min(em: Emitter, eqn: Any, x: Val, idx: Val, upd: Val) -> Val:
    """scatter-min → a one-hot comparison, REDUCE_MIN and MINIMUM (:func:`_scatter_extreme`)."""
    return _scatter(em, eqn, x, idx, upd, add=False, reduce="MIN")


def _topk(em: Emitter, x: Val, axis: int, k: Any, descending: bool) -> tuple[Any, Any, tuple, list]:
    """TOPK_V2 along ``axis`` (moved last); returns (values, int32 indices, layout, dims)."""
    perm = tuple([p for p in x.perm if p != axis] + [axis])
    t = em.tensor_of(x, perm, expand=True)
    dtype = np.dtype(x.dtype)
    if not descending:
        if tfl_dtype(dtype).kind not in "fi":
            raise Unsupported(f"ascending sort of {dtype.name}")
        t = em.emit_like("NEG", [t], t)
    dims = [x.shape[p] for p in perm[:-1]] + [k]
    kt = em.const(np.asarray(k, np.int32)) if is_static(k) else \
        em.emit("RESHAPE", [em.dim_tensor(k), em.const(i32([]))], [], np.int32)
    vals = em.tensor(dims, dtype, "topk_values")
    inds = em.tensor(dims, np.int32, "topk_indices")
    em.op("TOPK_V2", [t, kt], [vals, inds])
    if not descending:
        vals = em.emit_like("NEG", [vals], vals)
    return vals, inds, perm, dims


@rule(lax.top_k_p)
def lower_top_k(em: Emitter, eqn: Any, x: Val) -> list[Val]:
    """top_k → TOPK_V2 (+ CAST of the indices)."""
    axis = eqn.params.get("axis", x.rank - 1)
    k = eqn.params["k"]
    vals, inds, perm, _ = _topk(em, x, axis, k, True)
    ia = out_aval(eqn, 1)
    inds = em.cast(inds, ia.dtype)
    return [Val(out_aval(eqn).shape, x.dtype, tensor=vals, perm=perm), Val(ia.shape, ia.dtype, tensor=inds, perm=perm)]


def _is_iota(v: Val, axis: int) -> bool:
    if not v.is_const or not v.static:
        return False
    ref = np.arange(v.shape[axis]).reshape([-1 if i == axis else 1 for i in range(v.rank)])
    return bool(np.array_equal(v.full(), np.broadcast_to(ref, v.shape)))


def _batched_gather(em: Emitter, t: Any, idx: Any, dims: list) -> Any:
    """``t[..., idx]`` along the last axis, per row (GATHER with batch_dims = rank - 1)."""
    rank = len(dims)
    return em.emit("GATHER", [t, idx], dims, t.dtype, axis=rank - 1, batchDims=rank - 1)


@rule(lax.sort_p)
def lower_sort(em: Emitter, eqn: Any, *xs: Val) -> list[Val]:
    """sort → TOPK_V2 with k = n on the negated key (TOPK breaks ties by index, so this is a
    stable ascending sort). Several keys: one stable pass per key, last key first. Other
    operands are gathered with the resulting order (an iota operand, i.e. argsort, *is* it)."""
    nk = eqn.params["num_keys"]
    axis = eqn.params["dimension"]
    keys = xs[:nk]
    n = keys[0].shape[axis]
    em.note("sort lowers to TOPK_V2 (k = n) on the negated key; ties keep index order")
    if nk == 1:
        vals, order, perm, dims = _topk(em, keys[0], axis, n, False)
    else:
        order = None
        for key in reversed(keys):
            perm = tuple([p for p in key.perm if p != axis] + [axis])
            dims = [key.shape[p] for p in perm]
            t = em.tensor_of(key, perm, expand=True)
            if tfl_dtype(t.dtype).kind in "bu":
                t = em.cast(t, np.int32)
            if order is not None:
                t = _batched_gather(em, t, order, dims)
            kv = Val(dims, t.dtype, tensor=t)
            _, idx, _, _ = _topk(em, kv, len(dims) - 1, n, False)
            order = idx if order is None else _batched_gather(em, order, idx, dims)
        vals = None
    outs = []
    for i, (v, ov) in enumerate(zip(xs, eqn.outvars)):
        if i == 0 and vals is not None:
            outs.append(Val(v.shape, v.dtype, tensor=vals, perm=perm))
        elif _is_iota(v, axis):
            outs.append(Val(v.shape, v.dtype, tensor=em.cast(order, v.dtype), perm=perm))
        else:
            t = em.tensor_of(v, perm, expand=True)
            outs.append(Val(ov.aval.shape, v.dtype, tensor=_batched_gather(em, t, order, dims), perm=perm))
    return outs
