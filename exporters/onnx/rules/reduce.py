"""Reductions → ReduceSum / ReduceMax / ReduceMin / ReduceProd, ArgMax / ArgMin, CumSum."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.onnx.graph import OnnxGraph, Val
from exporters.onnx.rules import Unsupported, out_aval, rule

_REDUCE = {lax.reduce_sum_p: "ReduceSum", lax.reduce_max_p: "ReduceMax", lax.reduce_min_p: "ReduceMin",
           lax.reduce_prod_p: "ReduceProd", lax.reduce_and_p: "ReduceMin", lax.reduce_or_p: "ReduceMax"}


def _reduce(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """reduce_sum / max / min / prod → ReduceSum / ReduceMax / ReduceMin / ReduceProd (keepdims=0);
    reduce_and / reduce_or on bool → ReduceMin / ReduceMax between Casts to int32. ONNX Runtime's
    ReduceMax / ReduceMin skip NaN, lax's propagate it: a float max / min is Where(any NaN, NaN, …)
    (3 more nodes: IsNaN, ReduceMax, Where)."""
    aval = out_aval(eqn)
    axes = [int(a) for a in eqn.params["axes"]]
    if not axes:
        return x
    op = _REDUCE[eqn.primitive]
    t = g.tensor(x)
    boolean = x.dtype == np.bool_
    if boolean:
        t = g.cast(t, np.bool_, np.int32)
    elif eqn.primitive in (lax.reduce_and_p, lax.reduce_or_p):
        raise Unsupported(f"{eqn.primitive.name} of {x.dtype.name}")
    out = g.op(op, [t, g.i64(axes)], keepdims=0)
    if boolean:
        out = g.cast(out, np.int32, np.bool_)
    elif x.dtype.kind == "f" and op in ("ReduceMax", "ReduceMin"):
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
    if x.dtype.kind == "f":
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
