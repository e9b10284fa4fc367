"""Reductions: reduce_{sum,max,min,prod,and,or} → SUM / REDUCE_MAX / …, argmax/argmin →
ARG_MAX / ARG_MIN, cumsum → CUMSUM. All work in the input's layout."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.builder import TFLITE_TYPES
from exporters.litert.emitter import Emitter, Val
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.shape import i32

_REDUCERS = {lax.reduce_sum_p: "SUM", lax.reduce_max_p: "REDUCE_MAX", lax.reduce_min_p: "REDUCE_MIN",
             lax.reduce_prod_p: "REDUCE_PROD", lax.reduce_and_p: "REDUCE_ALL", lax.reduce_or_p: "REDUCE_ANY"}
#: Reducers for which a pending (size-1) broadcast dim can be reduced without expanding it.
_IDEMPOTENT = {"REDUCE_MAX", "REDUCE_MIN", "REDUCE_ALL", "REDUCE_ANY"}


def _kept_layout(x: Val, axes: list[int]) -> tuple[tuple, list]:
    """Layout and compact shape of ``x`` with ``axes`` removed."""
    keep = [d for d in range(x.rank) if d not in axes]
    new_index = {d: i for i, d in enumerate(keep)}
    perm = tuple(new_index[p] for p in x.perm if p in new_index)
    return perm, [x.base[d] for d in keep]


@rule(*_REDUCERS)
def lower_reduce(em: Emitter, eqn: Any, x: Val) -> Val:
    """reduce_* over ``axes`` → the TFLite reducer over the matching physical axes."""
    return reduce_to(em, _REDUCERS[eqn.primitive], x, sorted(eqn.params["axes"]), out_aval(eqn))


#: body primitive of a generic ``reduce`` → (reduced primitive, its identity test)
_BODIES = {lax.add_p: (lax.reduce_sum_p, lambda v: v == 0), lax.mul_p: (lax.reduce_prod_p, lambda v: v == 1),
           lax.max_p: (lax.reduce_max_p, lambda v: v == -np.inf or v == _lowest(v)),
           lax.min_p: (lax.reduce_min_p, lambda v: v == np.inf or v == _highest(v)),
           lax.and_p: (lax.reduce_and_p, lambda v: bool(v)), lax.or_p: (lax.reduce_or_p, lambda v: not v)}


def _lowest(v: Any) -> Any:
    a = np.asarray(v)
    return np.finfo(a.dtype).min if a.dtype.kind == "f" else (np.iinfo(a.dtype).min if a.dtype.kind in "iu" else v)


def _highest(v: Any) -> Any:
    a = np.asarray(v)
    return np.finfo(a.dtype).max if a.dtype.kind == "f" else (np.iinfo(a.dtype).max if a.dtype.kind in "iu" else v)


def monoid(eqn: Any) -> Any:
    """The binary primitive a single-op reducer body applies (``None`` if it is not one)."""
    body = eqn.params["jaxpr"]
    jaxpr = getattr(body, "jaxpr", body)
    if len(jaxpr.eqns) != 1 or len(jaxpr.invars) != 2 or len(jaxpr.outvars) != 1:
        return None
    e = jaxpr.eqns[0]
    if list(e.invars) not in (list(jaxpr.invars), list(jaxpr.invars)[::-1]) or e.outvars[0] is not jaxpr.outvars[0]:
        return None
    return e.primitive


@rule(lax.reduce_p)
def lower_reduce_generic(em: Emitter, eqn: Any, *vals: Val) -> Val:
    """reduce with a one-op body (what ``lax.reduce`` with a non-literal init gives) → SUM/REDUCE_MAX/…"""
    if len(vals) != 2:
        raise Unsupported("variadic reduce")
    x, init = vals
    prim = monoid(eqn)
    if prim not in _BODIES or not init.is_const:
        raise Unsupported("reduce with a custom reducer body")
    reduced, is_identity = _BODIES[prim]
    aval = out_aval(eqn)
    out = reduce_to(em, _REDUCERS[reduced], x, sorted(eqn.params["dimensions"]), aval)
    if is_identity(init.scalar()):
        return out
    code = {lax.add_p: "ADD", lax.mul_p: "MUL", lax.max_p: "MAXIMUM", lax.min_p: "MINIMUM",
            lax.and_p: "LOGICAL_AND", lax.or_p: "LOGICAL_OR"}[prim]
    t = em.tensor_of(out, out.perm)
    return Val(out.shape, out.dtype, tensor=em.emit_like(code, [t, em.tensor_of(init)], t), perm=out.perm,
               base=out.base)


def reduce_to(em: Emitter, code: str, x: Val, axes: list, aval: Any) -> Val:
    """Reduce ``x`` over logical ``axes`` with the TFLite reducer ``code``."""
    if not axes:
        return x
    expand = code not in _IDEMPOTENT and any(x.base[a] != x.shape[a] for a in axes)
    if code == "REDUCE_PROD" and np.dtype(x.dtype) == np.int64:
        raise Unsupported("integer product reduction on int64")
    p = x.perm
    t = em.tensor_of(x, p, expand=expand)
    perm, base = _kept_layout(x, axes)
    if expand:
        base = [aval.shape[i] for i in range(len(base))]
    dims = [base[i] for i in perm]
    phys_axes = i32([p.index(a) for a in axes])
    out = em.emit(code, [t, em.const(phys_axes)], dims, aval.dtype, keepDims=False)
    return Val(aval.shape, aval.dtype, tensor=out, perm=perm, base=base)


@rule(lax.argmax_p, lax.argmin_p)
def lower_argmax(em: Emitter, eqn: Any, x: Val) -> Val:
    """argmax/argmin → ARG_MAX/ARG_MIN (first index on ties, like torch)."""
    (axis,) = eqn.params["axes"]
    aval = out_aval(eqn)
    code = "ARG_MAX" if eqn.primitive is lax.argmax_p else "ARG_MIN"
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    perm, _ = _kept_layout(x, [axis])
    dims = [aval.shape[i] for i in perm]
    idx = np.dtype(eqn.params["index_dtype"])
    out_type = TFLITE_TYPES[np.dtype(np.int64 if idx == np.int64 else np.int32)]
    out = em.emit(code, [t, em.const(i32([p.index(axis)]))], dims, idx if idx in (np.int32, np.int64) else np.int32,
                  outputType=out_type)
    if idx not in (np.int32, np.int64):
        out = em.cast(out, idx)
    return Val(aval.shape, aval.dtype, tensor=out, perm=perm)


@rule(lax.cumsum_p)
def lower_cumsum(em: Emitter, eqn: Any, x: Val) -> Val:
    """cumsum → CUMSUM along the physical axis (inclusive; ``reverse`` kept)."""
    axis = eqn.params["axis"]
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    out = em.emit_like("CUMSUM", [t, em.const(np.asarray(p.index(axis), np.int32))], t,
                       exclusive=False, reverse=bool(eqn.params.get("reverse", False)))
    return Val(x.shape, x.dtype, tensor=out, perm=p)



def _logaddexp(em: Emitter, a: Any, b: Any) -> Any:
    """max(a, b) + log(1 + exp(-|a - b|))."""
    m = em.emit_like("MAXIMUM", [a, b], a)
    d = em.emit_like("NEG", [em.emit_like("ABS", [em.emit_like("SUB", [a, b], a)], a)], a)
    one = em.const(np.asarray(1, a.dtype))
    return em.emit_like("ADD", [m, em.emit_like("LOG", [em.emit_like("ADD", [em.emit_like("EXP", [d], a), one], a)],
                                                a)], a)


_SCANS = {lax.cumprod_p: ("MUL", lambda dt: 1), lax.cummax_p: ("MAXIMUM", lambda dt: _lowest(np.zeros((), dt))),
          lax.cummin_p: ("MINIMUM", lambda dt: _highest(np.zeros((), dt))),
          lax.cumlogsumexp_p: (_logaddexp, lambda dt: _lowest(np.zeros((), dt)))}


@rule(*_SCANS)
def lower_cumulative(em: Emitter, eqn: Any, x: Val) -> Val:
    """cumprod/cummax/cummin/cumlogsumexp → a log-step (Hillis–Steele) scan: ceil(log2 n) rounds of
    ``y = op(y, shift(y, k))``, the shift being CONCATENATION of identity values and a SLICE."""
    code, identity_of = _SCANS[eqn.primitive]
    axis, reverse = eqn.params["axis"], bool(eqn.params.get("reverse", False))
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    dims = [x.shape[i] for i in p]
    ax = p.index(axis)
    if not all(isinstance(d, (int, np.integer)) for d in dims):
        raise Unsupported("cumulative product/max/min over a dynamic shape")
    dims = [int(d) for d in dims]
    n = dims[ax]
    axes = em.const(i32([ax]))
    if reverse:
        t = em.emit_like("REVERSE_V2", [t, axes], t)
    k = 1
    while k < n:
        head = dims[:ax] + [k] + dims[ax + 1:]
        keep = dims[:ax] + [n - k] + dims[ax + 1:]
        fill = em.const(np.full(head, identity_of(t.dtype), t.dtype))
        part = em.emit("SLICE", [t, em.const(i32([0] * len(dims))), em.const(i32(keep))], keep, t.dtype)
        shifted = em.emit("CONCATENATION", [fill, part], dims, t.dtype, axis=ax)
        t = em.emit_like(code, [t, shifted], t) if isinstance(code, str) else code(em, t, shifted)
        k *= 2
    if reverse:
        t = em.emit_like("REVERSE_V2", [t, axes], t)
    return Val(x.shape, x.dtype, tensor=t, perm=p)
