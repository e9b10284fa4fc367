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
    reduce_and / reduce_or on bool → ReduceMin / ReduceMax between Casts to int32."""
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
    return g.val(out, aval.shape, aval.dtype)


for _p in _REDUCE:
    rule(_p)(_reduce)


@rule(lax.argmax_p, lax.argmin_p)
def lower_argmax(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """argmax / argmin → ArgMax / ArgMin (keepdims=0, first index on ties) + Cast of the index; a bool input
    is cast to int32 first (ONNX Runtime's ArgMax takes no bool: max pooling's indices take the first ``True``)."""
    aval = out_aval(eqn)
    (axis,) = eqn.params["axes"]
    op = "ArgMax" if eqn.primitive is lax.argmax_p else "ArgMin"
    t = g.tensor(x)
    if x.dtype == np.bool_:
        t = g.cast(t, np.bool_, np.int32)
    out = g.op(op, [t], axis=int(axis), keepdims=0)
    return g.val(g.cast(out, np.int64, aval.dtype), aval.shape, aval.dtype)


@rule(lax.cumsum_p)
def lower_cumsum(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """cumsum → CumSum(axis, reverse)."""
    aval = out_aval(eqn)
    axis = int(eqn.params["axis"])
    out = g.op("CumSum", [g.tensor(x), g.const(np.asarray(axis, np.int64))],
               reverse=int(bool(eqn.params.get("reverse", False))))
    return g.val(out, aval.shape, aval.dtype)
