"""gather → Gather / GatherND; scatter* → ScatterND; sort / top_k → TopK.

Out-of-range indices (ONNX Runtime rejects them; a negative one it wraps) get
XLA's meaning: a gather clamps them (``CLIP``, ``PROMISE_IN_BOUNDS``) or clamps
them and fills the slice (``FILL_OR_DROP``, a Where on the clamped index rows); a
scatter clamps them (``CLIP``; ``PROMISE_IN_BOUNDS``, the torch write ops' mode: torch
refuses such indices, so a cheap clamp of the indices, never a copy of the operand) or
drops their updates (``FILL_OR_DROP``: the operand gets one padding slot per scattered
dim, those indices are redirected there and the slot is sliced off — right for every
reduction). Constant indices already in range need none of this.
ONNX TopK breaks ties by the lower index, so a TopK with k = n is a stable sort.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.jaxpr_walk import same_dim as _same
from exporters.onnx.graph import OnnxGraph, Val, is_static
from exporters.onnx.rules import Unsupported, out_aval, rule
from exporters.onnx.rules.linalg import _inverse, permuted

def _indices(g: OnnxGraph, idx: Val, perm: list[int]) -> str:
    t = permuted(g, idx, perm)
    return g.cast(t, idx.dtype, np.int64)


def _in_range(idx: Val, bounds: list) -> bool:
    """True when ``idx`` (index vectors along its last dim) is a constant with every component
    ``k`` in ``[0, bounds[k]]``."""
    if not idx.is_const or not all(is_static(b) for b in bounds):
        return False
    v = idx.const  # (its values: a broadcast to the logical shape, which may be dynamic, adds none)
    return bool(np.all((v >= 0) & (v <= np.asarray([int(b) for b in bounds], np.int64))))


def _clamp(g: OnnxGraph, it: str, bounds: list) -> str:
    """int64 index vectors ``it`` (last dim) clamped to ``[0, bounds[k]]`` per component."""
    if len(bounds) == 1 and is_static(bounds[0]):
        return g.op("Clip", [it, g.const(np.asarray(0, np.int64)), g.const(np.asarray(int(bounds[0]), np.int64))])
    return g.op("Max", [g.op("Min", [it, g.shape_tensor(bounds)]), g.i64([0] * len(bounds))])


def _filled(g: OnnxGraph, out: str, it: str, clamped: str, slice_rank: int, aval: Any, fill: Any) -> str:
    """``out`` (index dims first, then ``slice_rank`` slice dims) with the slices of out-of-range
    index vectors (where ``clamped`` differs from ``it``) replaced by ``fill``."""
    valid = g.op("ReduceMin", [g.op("Equal", [it, clamped]), g.i64([-1])], keepdims=1)
    rank = len(aval.shape)  # index dims + slice dims
    if slice_rank == 0:
        valid = g.op("Squeeze", [valid, g.i64([-1])])
    elif slice_rank > 1:
        valid = g.op("Unsqueeze", [valid, g.i64(list(range(rank - slice_rank + 1, rank)))])
    return g.where(valid, out, g.const(np.asarray(fill, aval.dtype)), aval.dtype)


@rule(lax.gather_p)
def lower_gather(g: OnnxGraph, eqn: Any, x: Val, idx: Val) -> Val:
    """gather that picks whole slices along some dims (embedding lookups, index_select,
    take_along_axis, advanced indexing; an indexed dim may keep its size-1 slice) → Gather(axis=0) for one
    indexed dim, else
    GatherND(batch_dims); Transposes move the indexed dims first and the result to lax's order.
    Indices not known to be in range are clamped (a Clip, or Min and Max); ``FILL_OR_DROP`` then
    puts ``fill_value`` where a clamp changed the index vector (Equal, ReduceMin, Where)."""
    aval = out_aval(eqn)
    dn = eqn.params["dimension_numbers"]
    offset, collapsed, sim = list(dn.offset_dims), list(dn.collapsed_slice_dims), list(dn.start_index_map)
    obatch, ibatch = list(dn.operand_batching_dims), list(dn.start_indices_batching_dims)
    sizes = eqn.params["slice_sizes"]
    rest = [i for i in range(x.rank) if i not in sim and i not in obatch]
    if idx.rank == 1 and not collapsed and not obatch and list(offset) == list(range(x.rank)):
        return _window(g, eqn, aval, x, idx, sim, sizes)
    if not set(collapsed) <= set(sim) or not sim \
            or any(not _same(sizes[i], 1) for i in sim + obatch) or any(not _same(sizes[i], x.shape[i]) for i in rest):
        raise Unsupported(f"gather of partial slices (slice_sizes {tuple(sizes)} of operand {tuple(x.shape)})")
    ones = [i for i in sim if i not in collapsed]  # indexed dims whose size-1 slice the output keeps
    nvec = idx.rank - 1
    iothers = [i for i in range(nvec) if i not in ibatch]
    operand = permuted(g, x, obatch + sim + rest)
    it = _indices(g, idx, ibatch + iothers + [nvec])
    bounds = [x.shape[i] - 1 for i in sim]
    unchecked = it
    if not _in_range(idx, bounds):
        it = _clamp(g, it, bounds)
    if not obatch and len(sim) == 1:
        out = g.op("Gather", [operand, g.op("Squeeze", [it, g.i64([nvec])])], axis=0)
    else:
        out = g.op("GatherND", [operand, it], batch_dims=len(obatch))
    if it is not unchecked and "FILL" in str(eqn.params.get("mode", "")):
        out = _filled(g, out, unchecked, it, len(rest), aval, eqn.params["fill_value"])
    labels = [("i", j) for j in ibatch + iothers] + [("r", r) for r in rest]
    if ones:  # (``histogram``'s bin lookup: slices of size 1 not collapsed)
        out = g.op("Unsqueeze", [out, g.i64(list(range(len(labels), len(labels) + len(ones))))])
        labels += [("r", d) for d in ones]
    kept = iter(sorted(rest + ones))  # the operand dims the output keeps, in their order (its offset dims)
    want, ii = [], iter(range(nvec))
    for pos in range(len(aval.shape)):
        want.append(("r", next(kept)) if pos in offset else ("i", next(ii)))
    perm = [labels.index(w) for w in want]
    if perm != list(range(len(perm))):
        out = g.op("Transpose", [out], perm=perm)
    return g.val(out, aval.shape, aval.dtype)


def _window(g: OnnxGraph, eqn: Any, aval: Any, x: Val, idx: Val, sim: list, sizes: Any) -> Val:
    """A gather of one window (what ``x[:, a:b]`` becomes with symbolic shapes) → Slice from the
    start clamped to ``[0, dim - size]`` (``FILL_OR_DROP``: ``fill_value`` if the clamp moved it)."""
    it = g.cast(g.tensor(idx), idx.dtype, np.int64)
    bounds = [x.shape[i] - sizes[i] for i in sim]
    start = it if _in_range(idx, bounds) else _clamp(g, it, bounds)
    ends = g.op("Add", [start, g.shape_tensor([sizes[i] for i in sim])])
    out = g.op("Slice", [g.tensor(x), start, ends, g.i64(sim)])
    if start is not it and "FILL" in str(eqn.params.get("mode", "")):
        valid = g.op("ReduceMin", [g.op("Equal", [it, start]), g.i64([0])], keepdims=0)
        out = g.where(valid, out, g.const(np.asarray(eqn.params["fill_value"], aval.dtype)), aval.dtype)
    return g.val(out, aval.shape, aval.dtype)


_SCATTER = {lax.scatter_p: None, lax.scatter_add_p: "add", lax.scatter_mul_p: "mul",
            lax.scatter_min_p: "min", lax.scatter_max_p: "max"}


def _scatter(g: OnnxGraph, eqn: Any, x: Val, idx: Val, upd: Val) -> Val:
    """scatter / scatter-add / -mul / -min / -max of whole slices → ScatterND(reduction), with
    Transposes that move the scattered dims first and the update windows last. Indices not known
    to be in range: ``CLIP`` and ``PROMISE_IN_BOUNDS`` clamp them; ``FILL_OR_DROP`` (XLA drops such updates)
    adds a slot past each scattered dim (Pad), Less / Where / Min send out-of-range indices there, a Slice
    cuts it off."""
    aval = out_aval(eqn)
    dn = eqn.params["dimension_numbers"]
    uwd, inserted, sdod = list(dn.update_window_dims), list(dn.inserted_window_dims), \
        list(dn.scatter_dims_to_operand_dims)
    if list(dn.operand_batching_dims) or sorted(inserted) != sorted(sdod) or not sdod:
        raise Unsupported("scatter with batching dims or partial windows")
    rest = [i for i in range(x.rank) if i not in sdod]
    if len(rest) != len(uwd) or any(not _same(upd.shape[u], x.shape[r]) for u, r in zip(uwd, rest)):
        raise Unsupported("scatter of partial windows")
    nvec = idx.rank - 1
    xperm = sdod + rest
    operand = permuted(g, x, xperm)
    uscatter = [i for i in range(upd.rank) if i not in uwd]
    updates = permuted(g, upd, uscatter + uwd)
    it = _indices(g, idx, list(range(nvec + 1)))
    bounds, k = [x.shape[i] - 1 for i in sdod], len(sdod)
    drop = not _in_range(idx, bounds) and "FILL" in str(eqn.params.get("mode", ""))
    if drop:
        # out-of-range index vectors write into one padding slot past the end of each scattered dim
        dims = g.shape_tensor([x.shape[i] for i in sdod])
        it = g.op("Min", [g.op("Where", [g.op("Less", [it, g.const(np.asarray(0, np.int64))]), dims, it]), dims])
        operand = g.op("Pad", [operand, g.i64([0] * x.rank + [1] * k + [0] * (x.rank - k))])
    elif not _in_range(idx, bounds):
        it = _clamp(g, it, bounds)
    out = g.op("ScatterND", [operand, it, updates], reduction=_SCATTER[eqn.primitive])
    if drop:
        out = g.op("Slice", [out, g.i64([0] * k), g.i64([-1] * k), g.i64(list(range(k)))])
    inv = _inverse(xperm)
    if inv != list(range(len(inv))):
        out = g.op("Transpose", [out], perm=inv)
    return g.val(out, aval.shape, aval.dtype)


for _p in _SCATTER:
    rule(_p)(_scatter)


def _k_tensor(g: OnnxGraph, k: Any) -> str:
    return g.dim_tensor(k)


@rule(lax.top_k_p)
def lower_top_k(g: OnnxGraph, eqn: Any, x: Val) -> list[Val]:
    """top_k → TopK(largest=1, sorted=1) + Cast of the int64 indices."""
    vals, idx = out_aval(eqn, 0), out_aval(eqn, 1)
    axis = int(eqn.params.get("axis", x.rank - 1)) % x.rank
    v, i = g.op("TopK", [g.tensor(x), _k_tensor(g, eqn.params["k"])], n_out=2, axis=axis, largest=1, sorted=1)
    return [g.val(v, vals.shape, vals.dtype), g.val(g.cast(i, np.int64, idx.dtype), idx.shape, idx.dtype)]


def _is_iota(v: Val, axis: int) -> bool:
    if not v.is_const or not v.static:
        return False
    ref = np.arange(int(v.shape[axis])).reshape([-1 if i == axis else 1 for i in range(v.rank)])
    return bool(np.array_equal(v.full(), np.broadcast_to(ref, v.shape)))


_TOPK_TYPES = (np.float32, np.float64, np.int32, np.int64)


@rule(lax.sort_p)
def lower_sort(g: OnnxGraph, eqn: Any, *xs: Val) -> list[Val]:
    """sort → TopK(largest=0, k = n) per key, last key first (each pass stable: ties keep the
    lower index), composing the order with GatherElements; other operands are gathered with
    the final order (an iota operand, i.e. argsort, *is* the order)."""
    nk = int(eqn.params["num_keys"])
    axis = int(eqn.params["dimension"]) % xs[0].rank
    keys = xs[:nk]
    k = _k_tensor(g, keys[0].shape[axis])
    order, first = None, None
    for key in reversed(keys):
        t = g.tensor(key)
        if key.dtype not in [np.dtype(d) for d in _TOPK_TYPES]:
            t = g.cast(t, key.dtype, np.int32 if key.dtype.kind in "biu" else np.float32)
        if order is not None:
            t = g.op("GatherElements", [t, order], axis=axis)
        vals, idx = g.op("TopK", [t, k], n_out=2, axis=axis, largest=0, sorted=1)
        order = idx if order is None else g.op("GatherElements", [order, idx], axis=axis)
        first = vals
    outs = []
    for i, (v, ov) in enumerate(zip(xs, eqn.outvars)):
        if i == 0 and nk == 1 and v.dtype in [np.dtype(d) for d in _TOPK_TYPES]:
            name = first
        elif _is_iota(v, axis):
            name = g.cast(order, np.int64, v.dtype)
        else:
            name = g.op("GatherElements", [g.tensor(v), order], axis=axis)
        outs.append(g.val(name, ov.aval.shape, ov.aval.dtype))
    return outs
