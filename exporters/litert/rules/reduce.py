"""Reductions: reduce_{sum,max,min,prod,and,or} → SUM / REDUCE_MAX / …, argmax/argmin →
ARG_MAX / ARG_MIN, cumsum → CUMSUM, other scans → log-step scans. All work in the input's layout, and
emit through :mod:`.kernels` (bool max/min → REDUCE_ANY/ALL, 8/16-bit sums in int32, …)."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.builder import TFLITE_TYPES
from exporters.litert.emitter import Emitter, Val, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.kernels import emit, emit_like, has_kernel
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
    kind = tfl_dtype(a.dtype).kind
    return np.finfo(a.dtype).min if kind == "f" else (np.iinfo(a.dtype).min if kind in "iu" else v)


def _highest(v: Any) -> Any:
    a = np.asarray(v)
    kind = tfl_dtype(a.dtype).kind
    return np.finfo(a.dtype).max if kind == "f" else (np.iinfo(a.dtype).max if kind in "iu" else v)


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
    return Val(out.shape, out.dtype, tensor=emit_like(em, code, [t, em.tensor_of(init)], t), perm=out.perm,
               base=out.base)


def reduce_to(em: Emitter, code: str, x: Val, axes: list, aval: Any) -> Val:
    """Reduce ``x`` over logical ``axes`` with the TFLite reducer ``code`` (bool max/min → REDUCE_ANY/ALL)."""
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
    out = emit(em, code, [t, em.const(phys_axes)], dims, aval.dtype, keepDims=False)
    return Val(aval.shape, aval.dtype, tensor=out, perm=perm, base=base)


@rule(lax.argmax_p, lax.argmin_p)
def lower_argmax(em: Emitter, eqn: Any, x: Val) -> Val:
    """argmax/argmin → ARG_MAX/ARG_MIN (first index on ties, like torch).

    A dtype the kernel lacks even widened (int64: "Unknown input type") takes the exact
    ``ARG_MAX(x == REDUCE_MAX(x))``: the first index holding the extreme value.
    """
    (axis,) = eqn.params["axes"]
    aval = out_aval(eqn)
    code = "ARG_MAX" if eqn.primitive is lax.argmax_p else "ARG_MIN"
    p = x.perm
    t = em.tensor_of(x, p, expand=True)
    ax = p.index(axis)
    perm, _ = _kept_layout(x, [axis])
    dims = [aval.shape[i] for i in perm]
    if not has_kernel(code, t.dtype):
        full = [x.shape[i] for i in p]
        kept = [1 if i == ax else d for i, d in enumerate(full)]
        extreme = emit(em, "REDUCE_MAX" if code == "ARG_MAX" else "REDUCE_MIN", [t, em.const(i32([ax]))], kept,
                       t.dtype, keepDims=True)
        t, code = emit(em, "EQUAL", [t, extreme], full, np.bool_), "ARG_MAX"
    idx = np.dtype(eqn.params["index_dtype"])
    out_type = TFLITE_TYPES[np.dtype(np.int64 if idx == np.int64 else np.int32)]
    out = emit(em, code, [t, em.const(i32([ax]))], dims, idx if idx in (np.int32, np.int64) else np.int32,
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
    out = emit_like(em, "CUMSUM", [t, em.const(np.asarray(p.index(axis), np.int32))], t,
                    exclusive=False, reverse=bool(eqn.params.get("reverse", False)))
    return Val(x.shape, x.dtype, tensor=out, perm=p)


def _logaddexp(em: Emitter, a: Any, b: Any) -> Any:
    """``m + log(exp(a - m) + exp(b - m))`` with ``m = max(a, b)`` clamped to the finite range: exact at the
    infinities too (two -inf give -inf, two +inf give +inf, where ``max + log1p(exp(-|a - b|))`` gives NaN)."""
    finfo = np.finfo(a.dtype)
    m = em.emit_like("MAXIMUM", [em.emit_like("MAXIMUM", [a, b], a), em.const(np.asarray(finfo.min, a.dtype))], a)
    m = em.emit_like("MINIMUM", [m, em.const(np.asarray(finfo.max, a.dtype))], a)
    total = em.emit_like("ADD", [em.emit_like("EXP", [em.emit_like("SUB", [a, m], a)], a),
                                 em.emit_like("EXP", [em.emit_like("SUB", [b, m], a)], a)], a)
    return em.emit_like("ADD", [m, em.emit_like("LOG", [total], a)], a)


_SCANS = {lax.cumprod_p: ("MUL", lambda dt: 1), lax.cummax_p: ("MAXIMUM", lambda dt: _lowest(np.zeros((), dt))),
          lax.cummin_p: ("MINIMUM", lambda dt: _highest(np.zeros((), dt))),
          lax.cumlogsumexp_p: (_logaddexp, lambda dt: -np.inf)}


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
        t = emit_like(em, code, [t, shifted], t) if isinstance(code, str) else code(em, t, shifted)
        k *= 2
    if reverse:
        t = em.emit_like("REVERSE_V2", [t, axes], t)
    return Val(x.shape, x.dtype, tensor=t, perm=p)
