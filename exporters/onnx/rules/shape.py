"""Shape primitives → ONNX Reshape, Expand, Transpose, Squeeze, Concat, Slice, Pad, Range, Split."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax._src.export import shape_poly
from jax._src.lax import lax as lax_internal
from jax.extend.core import primitives as lax
from onnx import TensorProto, helper

from exporters.jaxpr_values import nonnegative
from exporters.jaxpr_walk import same_dim as _same
from exporters.onnx.graph import OnnxGraph, Val, is_static
from exporters.onnx.rules import Unsupported, out_aval, rule
from exporters.onnx.rules.elementwise import is_one

_INT64_MIN = np.iinfo(np.int64).min


@rule(lax.broadcast_in_dim_p)
def lower_broadcast_in_dim(g: OnnxGraph, eqn: Any, x: Val, *dyn: Val) -> Val:
    """broadcast_in_dim → Reshape to the output rank (unit dims where new); the broadcast
    itself stays pending until a consumer needs it (then Expand)."""
    if dyn:
        raise Unsupported("broadcast_in_dim with dynamic shape operands")
    aval = out_aval(eqn)
    shape = tuple(aval.shape)
    dims = eqn.params["broadcast_dimensions"]
    base = [1] * len(shape)
    for j, axis in enumerate(dims):
        base[axis] = 1 if is_one(x.base[j]) else shape[axis]
    base = tuple(base)
    if x.is_const:
        return Val(shape, aval.dtype, const=np.asarray(x.const).reshape([int(d) for d in base]))
    name = g.tensor(x, expand=False)
    if tuple(x.base) != base:
        name = g.reshape(name, base)
    return g.val(name, shape, aval.dtype, base)


@rule(lax.reshape_p)
def lower_reshape(g: OnnxGraph, eqn: Any, x: Val, *dyn: Val) -> Val:
    """reshape → Reshape(allowzero=1) (``-1`` for one dynamic dim, a Shape-derived tensor for several)."""
    if dyn:
        raise Unsupported("reshape with dynamic shape operands")
    aval = out_aval(eqn)
    if eqn.params.get("dimensions") is not None:
        raise Unsupported("reshape with a dimension permutation")
    shape = tuple(aval.shape)
    if x.is_const and x.scalar() is not None and all(is_static(d) for d in shape):
        # a uniform constant stays one scalar broadcast (no full-size initializer)
        return Val(shape, aval.dtype, const=np.full([1] * len(shape), x.scalar(), aval.dtype))
    if x.is_const and all(is_static(d) for d in shape):
        return Val(shape, aval.dtype, const=np.reshape(x.full(), [int(d) for d in shape]))
    return g.val(g.reshape(g.tensor(x), shape), shape, aval.dtype)


@rule(lax.squeeze_p)
def lower_squeeze(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """squeeze → Squeeze(axes); a pending broadcast stays pending."""
    aval = out_aval(eqn)
    axes = [int(a) % x.rank for a in eqn.params["dimensions"]]
    base = tuple(d for i, d in enumerate(x.base) if i not in axes)
    if x.is_const:
        return Val(aval.shape, aval.dtype, const=np.squeeze(x.const, tuple(axes)))
    return g.val(g.op("Squeeze", [g.tensor(x, expand=False), g.i64(axes)]), aval.shape, aval.dtype, base)


@rule(lax.transpose_p)
def lower_transpose(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """transpose → Transpose(perm) of the stored tensor (a pending broadcast stays pending)."""
    aval = out_aval(eqn)
    perm = [int(p) for p in eqn.params["permutation"]]
    base = tuple(x.base[p] for p in perm)
    if perm == list(range(x.rank)):
        return x
    if x.is_const:
        return Val(aval.shape, aval.dtype, const=np.transpose(x.const, perm))
    return g.val(g.op("Transpose", [g.tensor(x, expand=False)], perm=perm), aval.shape, aval.dtype, base)


@rule(lax.concatenate_p)
def lower_concatenate(g: OnnxGraph, eqn: Any, *xs: Val) -> Val:
    """concatenate → Concat(axis)."""
    aval = out_aval(eqn)
    return g.val(g.op("Concat", [g.tensor(x) for x in xs], axis=int(eqn.params["dimension"])), aval.shape,
                 aval.dtype)


@rule(lax_internal.stack_p)
def lower_stack(g: OnnxGraph, eqn: Any, *xs: Val) -> Val:
    """stack → Unsqueeze(axis) of each operand, then Concat(axis)."""
    aval = out_aval(eqn)
    axis = int(eqn.params["axis"])
    axes = g.const(np.asarray([axis], dtype=np.int64))
    parts = [g.op("Unsqueeze", [g.tensor(x), axes]) for x in xs]
    return g.val(g.op("Concat", parts, axis=axis), aval.shape, aval.dtype)


@rule(lax.slice_p)
def lower_slice(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """slice → Slice(starts, ends, axes, steps) over the sliced axes."""
    aval = out_aval(eqn)
    start, limit = eqn.params["start_indices"], eqn.params["limit_indices"]
    strides = eqn.params.get("strides") or [1] * x.rank
    axes = [i for i in range(x.rank)
            if not (is_static(start[i]) and int(start[i]) == 0 and int(strides[i]) == 1 and _same(limit[i], x.shape[i]))]
    if not axes:
        return x
    starts = g.shape_tensor([start[i] for i in axes])
    ends = g.shape_tensor([limit[i] for i in axes])
    out = g.op("Slice", [g.tensor(x), starts, ends, g.i64(axes), g.i64([int(strides[i]) for i in axes])])
    return g.val(out, aval.shape, aval.dtype)


def reverse(g: OnnxGraph, name: str, axes: list[int]) -> str:
    """Tensor ``name`` reversed along ``axes``: Slice with step -1."""
    n = len(axes)
    return g.op("Slice", [name, g.i64([-1] * n), g.i64([_INT64_MIN] * n), g.i64(axes), g.i64([-1] * n)])


@rule(lax.rev_p)
def lower_rev(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """rev → Slice with step -1 on the reversed axes."""
    return g.val(reverse(g, g.tensor(x), [int(a) for a in eqn.params["dimensions"]]), x.shape, x.dtype)


@rule(lax_internal.tile_p)
def lower_tile(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """tile (``Tensor.repeat``) → Tile with the repeats (computed at run time when one is a dynamic dim:
    ``alibi.repeat(batch, 1, 1)``)."""
    aval = out_aval(eqn)
    out = g.op("Tile", [g.tensor(x), g.shape_tensor(list(eqn.params["reps"]))])
    return g.val(out, aval.shape, aval.dtype)


def _dynamic_pad(g: OnnxGraph, eqn: Any, x: Val, value: Val) -> Val:
    """pad whose edges are dim expressions (``F.pad(x, (0, (8 - n % 8) % 8))`` of a dynamic ``n``) → one Pad with
    the edges computed at run time; they must be provably non-negative (a mod is), and interior padding is refused."""
    config = eqn.params["padding_config"]
    if any(int(c[2]) for c in config) or not all(nonnegative(v) for c in config for v in c[:2]):
        raise Unsupported("a padding whose size depends on a dynamic dim and may be negative, or interior")
    pads = g.op("Concat", [g.dim_tensor(c[0]) for c in config] + [g.dim_tensor(c[1]) for c in config], axis=0)
    out = g.op("Pad", [g.tensor(x), pads, g.tensor(value)], mode="constant")
    aval = out_aval(eqn)
    return g.val(out, aval.shape, aval.dtype)


@rule(lax.pad_p)
def lower_pad(g: OnnxGraph, eqn: Any, x: Val, value: Val) -> Val:
    """pad → Pad(mode=constant) for the non-negative edges, then Slice for negative ones. Interior padding
    (``i`` values between neighbours: jax's associative scans, strided convolutions' gradients) goes first, per
    axis of static length ``n``: Unsqueeze a unit axis after it, Pad that to ``1 + i``, Reshape the two into
    ``n·(1 + i)`` and Slice off the trailing ``i``."""
    aval = out_aval(eqn)
    config = eqn.params["padding_config"]
    if not all(is_static(v) for c in config for v in c[:2]):  # a pad that is a dim expression (pad to a multiple)
        return _dynamic_pad(g, eqn, x, value)
    lo = [int(c[0]) for c in config]
    hi = [int(c[1]) for c in config]
    t = g.tensor(x)
    shape, rank = list(x.shape), x.rank
    for ax, (_, _, interior) in enumerate(config):
        interior = int(interior)
        if not interior:
            continue
        n = shape[ax]
        if not is_static(n):
            raise Unsupported("interior padding (lax.pad with interior > 0) of a dynamic axis")
        n = int(n)
        if n <= 1:
            continue
        pads = [0] * (2 * (rank + 1))
        pads[rank + 1 + ax + 1] = interior
        spaced = g.op("Pad", [g.op("Unsqueeze", [t, g.i64([ax + 1])]), g.i64(pads), g.tensor(value)], mode="constant")
        merged = g.reshape(spaced, shape[:ax] + [n * (1 + interior)] + shape[ax + 1:])
        shape[ax] = n + (n - 1) * interior
        t = g.op("Slice", [merged, g.i64([0]), g.i64([shape[ax]]), g.i64([ax])])
    if any(v > 0 for v in lo + hi):
        pads = [max(v, 0) for v in lo] + [max(v, 0) for v in hi]
        t = g.op("Pad", [t, g.i64(pads), g.tensor(value)], mode="constant")
    cut = [i for i in range(x.rank) if lo[i] < 0 or hi[i] < 0]
    if cut:
        starts = [max(-lo[i], 0) for i in cut]
        ends = [hi[i] if hi[i] < 0 else np.iinfo(np.int64).max for i in cut]
        t = g.op("Slice", [t, g.i64(starts), g.i64(ends), g.i64(cut)])
    return g.val(t, aval.shape, aval.dtype)


@rule(lax.iota_p)
def lower_iota(g: OnnxGraph, eqn: Any) -> Val:
    """iota → a constant (broadcast pending) for static sizes, else Range(0, n, 1)."""
    aval = out_aval(eqn)
    shape, axis = tuple(aval.shape), int(eqn.params["dimension"])
    dtype = np.dtype(eqn.params["dtype"])
    base = tuple(shape[axis] if i == axis else 1 for i in range(len(shape)))
    n = shape[axis]
    if is_static(n):
        return Val(shape, dtype, const=np.arange(int(n), dtype=dtype).reshape([int(d) for d in base]))
    limit = g.op("Squeeze", [g.dim_tensor(n), g.i64([0])])
    r = g.op("Range", [g.const(np.asarray(0, np.int64)), limit, g.const(np.asarray(1, np.int64))])
    r = g.cast(r, np.int64, dtype)
    if len(shape) > 1:
        r = g.reshape(r, base)
    return g.val(r, shape, dtype, base)


@rule(shape_poly.dim_as_value_p)
def lower_dim_as_value(g: OnnxGraph, eqn: Any) -> Val:
    """dim_as_value → the dim read from the input's Shape, as a scalar."""
    aval = out_aval(eqn)
    d = eqn.params["dim"]
    if is_static(d):
        return Val((), aval.dtype, const=np.asarray(int(d), aval.dtype))
    t = g.op("Squeeze", [g.dim_tensor(d), g.i64([0])])
    return g.val(g.cast(t, np.int64, aval.dtype), (), aval.dtype)


@rule(lax_internal.split_p)
def lower_split(g: OnnxGraph, eqn: Any, x: Val) -> list[Val]:
    """split → Split(axis) with the given sizes."""
    sizes, axis = eqn.params["sizes"], int(eqn.params["axis"])
    outs = g.op("Split", [g.tensor(x), g.shape_tensor(list(sizes))], n_out=len(sizes), axis=axis)
    outs = outs if isinstance(outs, list) else [outs]
    return [g.val(o, v.aval.shape, v.aval.dtype) for o, v in zip(outs, eqn.outvars)]


def _index_vector(g: OnnxGraph, starts: tuple, x: Val, sizes: list) -> str:
    """int64 ``[rank]`` start indices, clamped to ``[0, dim - size]`` like lax."""
    parts = []
    for s in starts:
        t = g.tensor(s)
        parts.append(g.reshape(g.cast(t, s.dtype, np.int64), [1]))
    vec = parts[0] if len(parts) == 1 else g.op("Concat", parts, axis=0)
    upper = g.shape_tensor([d - s for d, s in zip(x.shape, sizes)])  # (computed at run time for dynamic dims)
    return g.op("Max", [g.op("Min", [vec, upper]), g.i64([0] * len(sizes))])


@rule(lax.dynamic_slice_p)
def lower_dynamic_slice(g: OnnxGraph, eqn: Any, x: Val, *starts: Val) -> Val:
    """dynamic_slice → Slice with run-time starts (clamped like lax) and ends = starts + sizes."""
    aval = out_aval(eqn)
    sizes = list(eqn.params["slice_sizes"])  # (a dynamic dim's size is computed at run time)
    begin = _index_vector(g, starts, x, sizes)
    end = g.op("Add", [begin, g.shape_tensor(sizes)])
    out = g.op("Slice", [g.tensor(x), begin, end, g.i64(list(range(x.rank)))])
    return g.val(out, aval.shape, aval.dtype)


@rule(lax.dynamic_update_slice_p)
def lower_dynamic_update_slice(g: OnnxGraph, eqn: Any, x: Val, update: Val, *starts: Val) -> Val:
    """dynamic_update_slice → ScatterND of the update at its (clamped) window of indices; with dynamic dims (a slice
    assignment into a tensor with a dynamic batch) the update padded to the operand's shape and selected where it
    lands (the window's indices would need a grid of run-time size)."""
    aval = out_aval(eqn)
    if not (x.static and update.static):
        begin = _index_vector(g, starts, x, list(update.shape))
        sizes = g.shape_tensor(update.shape)
        pads = g.op("Concat", [begin, g.op("Sub", [g.op("Sub", [g.shape_tensor(x.shape), sizes]), begin])], axis=0)
        placed = g.op("Pad", [g.tensor(update), pads])
        ones = g.op("ConstantOfShape", [sizes], value=helper.make_tensor("one", TensorProto.FLOAT, [1], [1.0]))
        mask = g.op("Cast", [g.op("Pad", [ones, pads])], to=TensorProto.BOOL)
        return g.val(g.where(mask, placed, g.tensor(x), x.dtype), aval.shape, aval.dtype)
    sizes = [int(d) for d in update.shape]
    begin = _index_vector(g, starts, x, sizes)
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in sizes], indexing="ij"), axis=-1).astype(np.int64)
    idx = g.op("Add", [g.const(grid), begin])
    out = g.op("ScatterND", [g.tensor(x), idx, g.tensor(update)])
    return g.val(out, aval.shape, aval.dtype)

