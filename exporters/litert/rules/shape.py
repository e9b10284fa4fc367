"""Shape and data-movement primitives: broadcast, reshape, squeeze, transpose,
concatenate, slice, pad, rev, iota, split, dynamic slices.

``transpose`` emits nothing (it only changes the value's layout); broadcasts stay
pending; reshapes that only add or drop size-1 dims keep the layout.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from jax._src.export import shape_poly
from jax._src.lax import lax as lax_internal
from jax.extend.core import primitives as lax

from exporters.jaxpr_values import nonnegative
from exporters.jaxpr_walk import same_dim as _same
from exporters.litert.emitter import Emitter, Val, identity, is_static
from exporters.litert.rules import Unsupported, out_aval, rule


def i32(values: Any) -> np.ndarray:
    """An int32 array."""
    return np.asarray(values, dtype=np.int32)


def unit_layout(old: Val, mapping: dict[int, int], new_rank: int) -> tuple:
    """A layout for a value derived from ``old`` by adding/dropping size-1 dims.

    ``mapping`` sends old logical dims that survive to new logical dims. The
    surviving dims keep their relative physical order; new dims stay in place.
    """
    mapped = [mapping[p] for p in old.perm if p in mapping]
    slots = sorted(mapped)
    perm = list(range(new_rank))
    for slot, dim in zip(slots, mapped):
        perm[slot] = dim
    return tuple(perm)


def relayout(em: Emitter, old: Val, shape: Sequence, base: Sequence, perm: Sequence, dtype: Any = None) -> Val:
    """A value with the same elements as ``old`` in new (unit-dim) ``shape``/``base``/``perm``."""
    dtype = old.dtype if dtype is None else dtype
    if old.is_const:
        return Val(shape, dtype, const=np.reshape(old.const, tuple(base)))
    t = em.tensor_of(old, old.perm)
    dims = [base[p] for p in perm]
    if list(t.signature) != [int(d) if is_static(d) else -1 for d in dims] or \
            list(t.shape) != [em.example(d) for d in dims]:
        t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, dtype)
    return Val(shape, dtype, tensor=t, perm=perm, base=base)


@rule(lax.broadcast_in_dim_p)
def lower_broadcast_in_dim(em: Emitter, eqn: Any, x: Val, *dyn: Val) -> Val:
    """broadcast_in_dim → nothing yet: a RESHAPE to the rank, the broadcast stays pending."""
    if dyn:
        raise Unsupported("broadcast_in_dim with dynamic shape operands")
    shape = tuple(eqn.params["shape"])
    bdims = tuple(eqn.params["broadcast_dimensions"])
    base = [1] * len(shape)
    for i, d in enumerate(bdims):
        base[d] = x.base[i]
    mapping = {i: d for i, d in enumerate(bdims)}
    return relayout(em, x, shape, base, unit_layout(x, mapping, len(shape)))


def _unit_mapping(old: Sequence, new: Sequence) -> dict[int, int] | None:
    """If ``old``→``new`` only adds/removes size-1 dims, map the non-unit old dims to new ones."""
    a = [i for i, d in enumerate(old) if not (is_static(d) and d == 1)]
    b = [i for i, d in enumerate(new) if not (is_static(d) and d == 1)]
    if len(a) != len(b) or any(not _same(old[i], new[j]) for i, j in zip(a, b)):
        return None
    return dict(zip(a, b))


@rule(lax.reshape_p)
def lower_reshape(em: Emitter, eqn: Any, x: Val, *dyn: Val) -> Val:
    """reshape → RESHAPE (layout kept when only size-1 dims change)."""
    if dyn or eqn.params.get("dimensions") not in (None, ()):
        raise Unsupported("reshape with dimensions/dynamic operands")
    shape = tuple(eqn.params["new_sizes"])
    return reshape_to(em, x, shape)


def reshape_to(em: Emitter, x: Val, shape: Sequence) -> Val:
    """Reshape value ``x`` to logical ``shape``."""
    shape = tuple(shape)
    mapping = _unit_mapping(x.shape, shape)
    if mapping is not None:
        base = [1] * len(shape)
        for i, j in mapping.items():
            base[j] = x.base[i]
        return relayout(em, x, shape, base, unit_layout(x, mapping, len(shape)))
    if x.is_const and x.static:
        return Val(shape, x.dtype, const=np.reshape(x.full(), shape))
    kept = _layout_preserving(x, shape)
    if kept is not None:
        dims = [shape[p] for p in kept]
        out = em.emit("RESHAPE", [em.tensor_of(x, x.perm), em.shape_operand(dims)], dims, x.dtype)
        return Val(shape, x.dtype, tensor=out, perm=kept)
    t = em.tensor_of(x, None, expand=True)
    out = em.emit("RESHAPE", [t, em.shape_operand(shape)], shape, x.dtype)
    return Val(shape, x.dtype, tensor=out)


def _groups(old: Sequence, new: Sequence) -> list[tuple[list, list]] | None:
    """Split a static reshape into (old dims, new dims) groups of equal size, in order."""
    if not all(is_static(d) and d > 0 for d in list(old) + list(new)):
        return None
    groups: list[tuple[list, list]] = []
    i = j = 0
    while i < len(old) and j < len(new):
        og, ng, po, pn = [i], [j], int(old[i]), int(new[j])
        i, j = i + 1, j + 1
        while po != pn:
            if po < pn:
                if i >= len(old):
                    return None
                og.append(i)
                po, i = po * int(old[i]), i + 1
            else:
                if j >= len(new):
                    return None
                ng.append(j)
                pn, j = pn * int(new[j]), j + 1
        groups.append((og, ng))
    if not groups or any(int(d) != 1 for d in list(old[i:]) + list(new[j:])):
        return None
    groups[-1][0].extend(range(i, len(old)))
    groups[-1][1].extend(range(j, len(new)))
    return groups


def _layout_preserving(x: Val, shape: Sequence) -> tuple | None:
    """A layout for ``x.reshape(shape)`` that keeps ``x``'s physical order, if one exists.

    Each group of merged/split logical dims must be contiguous and in order in the
    physical layout (e.g. NCHW→NC(HW) on an NHWC tensor gives N(HW)C, no TRANSPOSE).
    """
    if x.pending or x.perm == identity(x.rank):
        return None
    groups = _groups(x.shape, shape)
    if groups is None:
        return None
    placed = []
    for og, ng in groups:
        pos = [x.perm.index(d) for d in og]
        if pos != list(range(pos[0], pos[0] + len(og))):
            return None
        placed.append((pos[0], ng))
    return tuple(d for _, ng in sorted(placed) for d in ng)


@rule(lax.squeeze_p)
def lower_squeeze(em: Emitter, eqn: Any, x: Val) -> Val:
    """squeeze → (a RESHAPE that keeps the layout)."""
    return reshape_to(em, x, out_aval(eqn).shape)


@rule(lax.transpose_p)
def lower_transpose(em: Emitter, eqn: Any, x: Val) -> Val:
    """transpose → nothing: only the value's layout changes (TRANSPOSE is emitted on demand)."""
    q = tuple(eqn.params["permutation"])
    qinv = [q.index(i) for i in range(len(q))]
    shape = tuple(x.shape[i] for i in q)
    if x.is_const:
        return Val(shape, x.dtype, const=np.transpose(x.const, q))
    perm = tuple(qinv[p] for p in x.perm)
    return Val(shape, x.dtype, tensor=x.tensor, perm=perm, base=tuple(x.base[i] for i in q))


@rule(lax.concatenate_p)
def lower_concatenate(em: Emitter, eqn: Any, *xs: Val) -> Val:
    """concatenate → CONCATENATION along the physical axis of the shared layout."""
    return concat(em, list(xs), eqn.params["dimension"], out_aval(eqn))


@rule(lax_internal.stack_p)
def lower_stack(em: Emitter, eqn: Any, *xs: Val) -> Val:
    """stack → each operand gains its unit dim (layout kept), then CONCATENATION on it."""
    aval = out_aval(eqn)
    dim = eqn.params["axis"]
    unit = tuple(aval.shape[:dim]) + (1,) + tuple(aval.shape[dim + 1:])
    return concat(em, [reshape_to(em, x, unit) for x in xs], dim, aval)


def concat(em: Emitter, xs: list, dim: int, aval: Any) -> Val:
    """CONCATENATION of ``xs`` along logical ``dim`` into ``aval``."""
    rank = len(aval.shape)
    perm = em.choose_perm(list(xs), rank)
    parts = [em.tensor_of(x, perm, expand=True) for x in xs if not (is_static(x.shape[dim]) and x.shape[dim] == 0)]
    dims = [aval.shape[p] for p in perm]
    if len(parts) == 1:
        return Val(aval.shape, aval.dtype, tensor=parts[0], perm=perm)
    out = em.emit("CONCATENATION", parts, dims, aval.dtype, axis=perm.index(dim))
    return Val(aval.shape, aval.dtype, tensor=out, perm=perm)


def _bound(em: Emitter, value: Any, dim: Any, is_end: bool) -> tuple[int, bool]:
    """A STRIDED_SLICE begin/end for a possibly symbolic bound: (value, use mask)."""
    if is_static(value):
        if is_end and _same(value, dim):
            return 0, True
        return int(value), False
    if _same(value, dim):
        return 0, True
    gap = dim - value
    if is_static(gap) or (hasattr(gap, "_is_constant") and gap._is_constant):
        return -int(gap), False
    raise Unsupported(f"slice bound {value} of dynamic dim {dim}")


@rule(lax.slice_p)
def lower_slice(em: Emitter, eqn: Any, x: Val) -> Val:
    """slice → SLICE (unit strides, static) or STRIDED_SLICE, in the input's layout."""
    aval = out_aval(eqn)
    start = list(eqn.params["start_indices"])
    limit = list(eqn.params["limit_indices"])
    strides = list(eqn.params["strides"] or [1] * x.rank)
    base = list(aval.shape)
    for i in range(x.rank):  # a pending broadcast dim stays pending
        if x.base[i] == 1 and not (is_static(x.shape[i]) and x.shape[i] == 1):
            start[i], limit[i], strides[i], base[i] = 0, 1, 1, 1
    static = all(is_static(v) for v in start + limit + list(x.shape))
    if x.is_const and static:
        sl = tuple(slice(int(a), int(b), int(s)) for a, b, s in zip(start, limit, strides))
        return Val(aval.shape, x.dtype, const=np.ascontiguousarray(x.const[sl]))
    p = x.perm
    t = em.tensor_of(x, p)
    dims = [base[i] for i in p]
    step = em.const(i32([strides[i] for i in p]))
    if static and all(s == 1 for s in strides):
        size = [int(limit[i]) - int(start[i]) for i in p]
        out = em.emit("SLICE", [t, em.const(i32([start[i] for i in p])), em.const(i32(size))], dims, x.dtype)
        return Val(aval.shape, aval.dtype, tensor=out, perm=p, base=base)
    try:
        begins, ends, bmask, emask = [], [], 0, 0
        for k, i in enumerate(p):
            b, bm = _bound(em, start[i], x.base[i], False)
            e, em_ = _bound(em, limit[i], x.base[i], True)
            begins.append(b)
            ends.append(e)
            bmask |= (1 << k) if bm else 0
            emask |= (1 << k) if em_ else 0
        bt, et = em.const(i32(begins)), em.const(i32(ends))
    except Unsupported:  # bounds only known at run time (e.g. a constant sliced to a dynamic length)
        bt, et, bmask, emask = em.shape_tensor([start[i] for i in p]), em.shape_tensor([limit[i] for i in p]), 0, 0
    out = em.emit("STRIDED_SLICE", [t, bt, et, step], dims, x.dtype, beginMask=bmask, endMask=emask)
    return Val(aval.shape, aval.dtype, tensor=out, perm=p, base=base)


@rule(lax.pad_p)
def lower_pad(em: Emitter, eqn: Any, x: Val, value: Val) -> Val:
    """pad → PAD (zero) / PADV2 (other constant), in the input's layout; negative pads slice."""
    config = eqn.params["padding_config"]
    if not value.is_const:
        raise Unsupported("pad with a non-constant padding value")
    aval = out_aval(eqn)
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    if not all(is_static(v) for c in config for v in c[:2]):  # a pad that is a dim expression (pad to a multiple)
        if any(int(c[2]) for c in config) or not all(nonnegative(v) for c in config for v in c[:2]):
            raise Unsupported("a padding whose size depends on a dynamic dim and may be negative, or interior")
        edges = em.emit("CONCATENATION", [em.dim_tensor(config[i][k]) for i in p for k in (0, 1)], [2 * x.rank],
                        np.int32, axis=0)
        table = em.emit("RESHAPE", [edges, em.const(i32([x.rank, 2]))], [x.rank, 2], np.int32)
        dims = [aval.shape[i] for i in p]
        t = em.emit("PADV2", [t, table, em.const(np.asarray([value.scalar()], x.dtype))], dims, x.dtype)
        return Val(aval.shape, aval.dtype, tensor=t, perm=p)
    shape = list(x.shape)
    for i, (_, _, interior) in enumerate(config):
        if interior:
            t = _interleave(em, t, [shape[j] for j in p], p.index(i), int(interior), value)
            shape[i] = (shape[i] - 1) * (interior + 1) + 1
    mid_shape = [shape[i] + max(config[i][0], 0) + max(config[i][1], 0) for i in range(x.rank)]
    pads = i32([[max(config[i][0], 0), max(config[i][1], 0)] for i in p])
    if pads.any():
        pv = value.scalar()
        dims = [mid_shape[i] for i in p]
        if pv == 0:
            t = em.emit("PAD", [t, em.const(pads)], dims, x.dtype)
        else:
            t = em.emit("PADV2", [t, em.const(pads), em.const(np.asarray([pv], x.dtype))], dims, x.dtype)
    if any(lo < 0 or hi < 0 for lo, hi, _ in config):
        begin = [max(-config[i][0], 0) for i in p]
        size = [aval.shape[i] for i in p]
        if all(is_static(s) for s in size):
            t = em.emit("SLICE", [t, em.const(i32(begin)), em.const(i32(size))], size, x.dtype)
        else:  # a dynamic dim: its end counted from the end (TFLite's negative index), or taken whole (end mask)
            end = [min(config[i][1], 0) for i in p]
            whole = sum(1 << k for k, e in enumerate(end) if e == 0)
            t = em.emit("STRIDED_SLICE", [t, em.const(i32(begin)), em.const(i32(end)), em.const(i32([1] * x.rank))],
                        size, x.dtype, endMask=whole)
    return Val(aval.shape, aval.dtype, tensor=t, perm=p)


def _interleave(em: Emitter, t: Any, dims: list, axis: int, k: int, value: Val) -> Any:
    """Insert ``k`` padding values between neighbours along ``axis`` (lax.pad interior):
    RESHAPE to (…, n, 1, …), CONCATENATION with a (…, n, k, …) fill, RESHAPE, SLICE."""
    if not all(is_static(d) for d in dims):
        raise Unsupported("interior padding of a dynamic shape")
    dims = [int(d) for d in dims]
    n = dims[axis]
    split = dims[:axis + 1] + [1] + dims[axis + 1:]
    x = em.emit("RESHAPE", [t, em.const(i32(split))], split, t.dtype)
    fill = em.const(np.full(dims[:axis + 1] + [k] + dims[axis + 1:], value.scalar(), t.dtype))
    both = split[:axis + 1] + [k + 1] + split[axis + 2:]
    x = em.emit("CONCATENATION", [x, fill], both, t.dtype, axis=axis + 1)
    flat = dims[:axis] + [n * (k + 1)] + dims[axis + 1:]
    x = em.emit("RESHAPE", [x, em.const(i32(flat))], flat, t.dtype)
    out = dims[:axis] + [(n - 1) * (k + 1) + 1] + dims[axis + 1:]
    return em.emit("SLICE", [x, em.const(i32([0] * len(dims))), em.const(i32(out))], out, t.dtype)


@rule(lax.rev_p)
def lower_rev(em: Emitter, eqn: Any, x: Val) -> Val:
    """rev → one REVERSE_V2 per run of adjacent physical axes (the kernel takes contiguous
    axes only); size-1 and pending-broadcast dims are constant along the axis and skipped."""
    p = x.perm
    t = em.tensor_of(x, p)
    axes = sorted(p.index(d) for d in eqn.params["dimensions"] if not (is_static(x.base[d]) and x.base[d] == 1))
    runs: list[list[int]] = []
    for a in axes:
        if runs and runs[-1][-1] == a - 1:
            runs[-1].append(a)
        else:
            runs.append([a])
    for run in runs:
        t = em.emit_like("REVERSE_V2", [t, em.const(i32(run))], t)
    return Val(x.shape, x.dtype, tensor=t, perm=p, base=x.base)


@rule(lax_internal.tile_p)
def lower_tile(em: Emitter, eqn: Any, x: Val) -> Val:
    """tile (``Tensor.repeat``) → TILE with the repeats in the value's layout (its pending broadcasts made first;
    the repeats computed at run time when one is a dynamic dim: ``alibi.repeat(batch, 1, 1)``)."""
    aval = out_aval(eqn)
    p = x.perm
    reps = [eqn.params["reps"][d] for d in p]
    out = em.emit("TILE", [em.tensor_of(x, p, expand=True), em.shape_tensor(reps)], [aval.shape[d] for d in p],
                  aval.dtype)
    return Val(aval.shape, aval.dtype, tensor=out, perm=p)


@rule(lax.iota_p)
def lower_iota(em: Emitter, eqn: Any) -> Val:
    """iota → a (pending-broadcast) constant; RANGE when the iota's length is dynamic."""
    aval = out_aval(eqn)
    shape, dim, dtype = tuple(eqn.params["shape"]), eqn.params["dimension"], np.dtype(eqn.params["dtype"])
    base = [1] * len(shape)
    base[dim] = shape[dim]
    n = shape[dim]
    if is_static(n):
        return Val(shape, dtype, const=np.arange(int(n), dtype=dtype).reshape(base))
    return Val(shape, aval.dtype, tensor=dynamic_range(em, n, base, dtype), base=base)


def dynamic_range(em: Emitter, n: Any, base: Sequence, dtype: Any) -> Any:
    """``0 .. n-1`` (``n`` a dynamic dim) in ``dtype``, shaped ``base`` (1 except ``n`` on its axis): RANGE, CAST,
    RESHAPE."""
    limit = em.emit("RESHAPE", [em.dim_tensor(n), em.const(i32([]))], [], np.int32)
    r = em.emit("RANGE", [em.const(np.asarray(0, np.int32)), limit, em.const(np.asarray(1, np.int32))],
                [n], np.int32)
    r = em.cast(r, dtype)
    if len(base) > 1:
        r = em.emit("RESHAPE", [r, em.shape_operand(base)], list(base), dtype)
    return r


@rule(shape_poly.dim_as_value_p)
def lower_dim_as_value(em: Emitter, eqn: Any) -> Val:
    """dim_as_value → SHAPE-derived scalar (a dynamic dim used as a number)."""
    aval = out_aval(eqn)
    d = eqn.params["dim"]
    if is_static(d):
        return Val((), aval.dtype, const=np.asarray(d, aval.dtype))
    t = em.emit("RESHAPE", [em.dim_tensor(d), em.const(i32([]))], [], np.int32)
    return Val((), aval.dtype, tensor=em.cast(t, aval.dtype))


@rule(lax_internal.split_p)
def lower_split(em: Emitter, eqn: Any, x: Val) -> list[Val]:
    """split → SPLIT_V along the physical axis."""
    sizes, axis = list(eqn.params["sizes"]), eqn.params["axis"]
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    outs = [em.tensor([v.aval.shape[i] for i in p], x.dtype, "split") for v in eqn.outvars]
    em.op("SPLIT_V", [t, em.const(i32(sizes)), em.const(np.asarray(p.index(axis), np.int32))], outs,
          "SplitVOptions", numSplits=len(sizes))
    return [Val(v.aval.shape, x.dtype, tensor=o, perm=p) for v, o in zip(eqn.outvars, outs)]


def _starts_tensor(em: Emitter, starts: Sequence[Val], shape: Sequence, sizes: Sequence, clamp: bool = True) -> Any:
    """An int32 vector of start indices, clamped into range as lax clamps them (unless the op clamps itself);
    consecutive constant starts are one constant piece of it (a loop step's ``[i, 0, 0]``: one CONCATENATION)."""
    if all(s.is_const for s in starts) and all(is_static(d) for d in shape):
        vals = [min(max(int(s.const), 0), int(d) - int(z)) for s, d, z in zip(starts, shape, sizes)]
        return em.const(i32(vals))
    parts: list = []
    for s in starts:
        if s.is_const and parts and isinstance(parts[-1], list):
            parts[-1].append(int(s.const))
        elif s.is_const:
            parts.append([int(s.const)])
        else:
            parts.append(em.emit("RESHAPE", [em.cast(em.tensor_of(s), np.int32), em.const(i32([1]))], [1], np.int32))
    parts = [em.const(i32(p)) if isinstance(p, list) else p for p in parts]
    vec = parts[0] if len(parts) == 1 else em.emit("CONCATENATION", parts, [len(starts)], np.int32, axis=0)
    if not clamp:
        return vec
    hi = em.shape_tensor([d - z for d, z in zip(shape, sizes)])
    vec = em.emit("MINIMUM", [vec, hi], [len(starts)], np.int32)
    return em.emit("MAXIMUM", [vec, em.const(i32([0] * len(starts)))], [len(starts)], np.int32)


@rule(lax.dynamic_slice_p)
def lower_dynamic_slice(em: Emitter, eqn: Any, x: Val, *starts: Val) -> Val:
    """dynamic_slice → SLICE with a (clamped) runtime begin vector."""
    sizes = tuple(eqn.params["slice_sizes"])
    aval = out_aval(eqn)
    t = em.tensor_of(x, None, expand=True)
    begin = _starts_tensor(em, starts[: x.rank], x.shape, sizes)
    out = em.emit("SLICE", [t, begin, em.shape_tensor(sizes)], sizes, x.dtype)  # (a dynamic size: at run time)
    return Val(aval.shape, aval.dtype, tensor=out)


@rule(lax.dynamic_update_slice_p)
def lower_dynamic_update_slice(em: Emitter, eqn: Any, x: Val, update: Val, *starts: Val) -> Val:
    """dynamic_update_slice → DYNAMIC_UPDATE_SLICE (TFLite clamps the indices like XLA)."""
    t = em.tensor_of(x, None, expand=True)
    u = em.tensor_of(update, None, expand=True)
    begin = _starts_tensor(em, starts, x.shape, update.shape, clamp=False)
    out = em.emit_like("DYNAMIC_UPDATE_SLICE", [t, u, begin], t)
    return Val(x.shape, x.dtype, tensor=out)
