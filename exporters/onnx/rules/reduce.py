"""Reductions → ReduceSum / ReduceMax / ReduceMin / ReduceProd, ArgMax / ArgMin, CumSum, and the other cumulative
scans as log-step scans."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.onnx.graph import OnnxGraph, Val, onnx_dtype
from exporters.onnx.rules import Unsupported, out_aval, rule
from exporters.onnx.rules.elementwise import scalar
from exporters.onnx.rules.shape import reverse

_REDUCE = {lax.reduce_sum_p: "ReduceSum", lax.reduce_max_p: "ReduceMax", lax.reduce_min_p: "ReduceMin",
           lax.reduce_prod_p: "ReduceProd", lax.reduce_and_p: "ReduceMin", lax.reduce_or_p: "ReduceMax"}


def _reduce(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """reduce_sum / max / min / prod → ReduceSum / ReduceMax / ReduceMin / ReduceProd (keepdims=0);
    reduce_and / reduce_or on bool → ReduceMin / ReduceMax between Casts to uint8: over no elements ONNX gives the
    type's highest / lowest value, 255 / 0, so "all" of none is True and "any" False (int32's lowest made "any"
    True). ONNX Runtime's ReduceMax / ReduceMin skip NaN, lax's propagate it: a float max / min is
    Where(any NaN, NaN, …) (3 more nodes: IsNaN, ReduceMax, Where)."""
    aval = out_aval(eqn)
    axes = [int(a) for a in eqn.params["axes"]]
    if not axes:
        return x
    op = _REDUCE[eqn.primitive]
    t = g.tensor(x)
    boolean = x.dtype == np.bool_
    if boolean:
        t = g.cast(t, np.bool_, np.uint8)
    elif eqn.primitive in (lax.reduce_and_p, lax.reduce_or_p):
        raise Unsupported(f"{eqn.primitive.name} of {x.dtype.name}")
    out = g.op(op, [t, g.i64(axes)], keepdims=0)
    if boolean:
        out = g.cast(out, np.uint8, np.bool_)
    elif onnx_dtype(x.dtype).kind == "f" and op in ("ReduceMax", "ReduceMin"):
        any_nan = g.op("ReduceMax", [g.op("IsNaN", [t]), g.i64(axes)], keepdims=0)
        out = g.op("Where", [any_nan, g.const(np.asarray(np.nan, x.dtype)), out])
    return g.val(out, aval.shape, aval.dtype)


for _p in _REDUCE:
    rule(_p)(_reduce)


@rule(lax.argmax_p, lax.argmin_p)
def lower_argmax(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """argmax / argmin → ArgMax / ArgMin (keepdims=0, first index on ties) + Cast of the index; a bool input
    is cast to int32 first (ONNX Runtime's ArgMax takes no bool: max pooling's indices take the first ``True``).
    A float input's first NaN wins, as in lax (ONNX Runtime skips NaN): Where(any NaN, ArgMax(IsNaN), …)
    (5 more nodes: IsNaN, Cast, ArgMax, ReduceMax, Where)."""
    aval = out_aval(eqn)
    (axis,) = eqn.params["axes"]
    op = "ArgMax" if eqn.primitive is lax.argmax_p else "ArgMin"
    t = g.tensor(x)
    if x.dtype == np.bool_:
        t = g.cast(t, np.bool_, np.int32)
    out = g.op(op, [t], axis=int(axis), keepdims=0)
    if onnx_dtype(x.dtype).kind == "f":
        nan = g.op("IsNaN", [t])
        first = g.op("ArgMax", [g.cast(nan, np.bool_, np.int32)], axis=int(axis), keepdims=0)
        out = g.op("Where", [g.op("ReduceMax", [nan, g.i64([int(axis)])], keepdims=0), first, out])
    return g.val(g.cast(out, np.int64, aval.dtype), aval.shape, aval.dtype)


@rule(lax.cumsum_p)
def lower_cumsum(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """cumsum → CumSum(axis, reverse)."""
    aval = out_aval(eqn)
    axis = int(eqn.params["axis"])
    out = g.op("CumSum", [g.tensor(x), g.const(np.asarray(axis, np.int64))],
               reverse=int(bool(eqn.params.get("reverse", False))))
    return g.val(out, aval.shape, aval.dtype)


def _logaddexp(g: OnnxGraph, a: str, b: str, dtype: Any) -> str:
    """``m + log(exp(a - m) + exp(b - m))`` with ``m = max(a, b)`` clamped to the finite range: exact at the
    infinities too (two -inf give -inf, two +inf give +inf)."""
    finfo = np.finfo(dtype)
    m = g.op("Max", [g.op("Max", [a, b]), scalar(g, finfo.min, dtype)])
    m = g.op("Min", [m, scalar(g, finfo.max, dtype)])
    total = g.op("Add", [g.op("Exp", [g.op("Sub", [a, m])]), g.op("Exp", [g.op("Sub", [b, m])])])
    return g.op("Add", [m, g.op("Log", [total])])


def _extreme(dtype: Any, low: bool) -> Any:
    dtype = np.dtype(dtype)
    if onnx_dtype(dtype).kind == "f":
        return -np.inf if low else np.inf
    info = np.iinfo(dtype)
    return info.min if low else info.max


_SCANS = {lax.cumprod_p: ("Mul", lambda dt: 1), lax.cummax_p: ("Max", lambda dt: _extreme(dt, True)),
          lax.cummin_p: ("Min", lambda dt: _extreme(dt, False)), lax.cumlogsumexp_p: (_logaddexp, lambda dt: -np.inf)}


@rule(*_SCANS)
def lower_cumulative(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """cumprod / cummax / cummin / cumlogsumexp → a log-step (Hillis–Steele) scan: ceil(log2 n) rounds of
    ``y = op(y, shift(y, k))``, the shift a Pad with the op's identity and a Slice (ONNX has CumSum only);
    ``reverse`` reverses the axis around it. The scanned axis must be static."""
    aval = out_aval(eqn)
    dtype = np.dtype(x.dtype)
    if onnx_dtype(dtype).kind not in "fiu":
        raise Unsupported(f"{eqn.primitive.name} of {dtype.name}")
    code, identity = _SCANS[eqn.primitive]
    axis, rank = int(eqn.params["axis"]), len(x.shape)
    n = x.shape[axis]
    if not isinstance(n, (int, np.integer)):
        raise Unsupported(f"{eqn.primitive.name} over a dynamic axis")
    n, t = int(n), g.tensor(x)
    backwards = bool(eqn.params.get("reverse", False))
    if backwards:
        t = reverse(g, t, [axis])
    fill = scalar(g, identity(dtype), dtype)
    k = 1
    while k < n:
        pads = [0] * (2 * rank)
        pads[axis] = k
        shifted = g.op("Slice", [g.op("Pad", [t, g.i64(pads), fill], mode="constant"), g.i64([0]), g.i64([n]),
                                 g.i64([axis])])
        t = g.op(code, [t, shifted]) if isinstance(code, str) else code(g, t, shifted, dtype)
        k *= 2
    if backwards:
        t = reverse(g, t, [axis])
    return g.val(t, aval.shape, aval.dtype)
