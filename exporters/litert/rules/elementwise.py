"""Elementwise lax primitives → TFLite arithmetic, comparison, logic and math ops.

All of these keep their inputs' layout (``Val.perm``) and pending broadcasts
(TFLite binary ops broadcast), so they never add a TRANSPOSE or BROADCAST_TO.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import jax
from jax.extend.core import primitives as lax

from exporters.litert.emitter import Emitter, Val, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule


#: Ops without an int64 kernel in ai-edge-litert 2.3: computed in int32 between CASTs.
NO_INT64 = {"DIV", "FLOOR_DIV", "POW", "SQUARED_DIFFERENCE", "ABS", "SIGN", "SQUARE"}
INT64_NOTE = "int64 DIV/ABS/SIGN/POW run in int32 between CASTs (TFLite has no int64 kernels for them)"


def elementwise(em: Emitter, eqn: Any, code: str, vals: list[Val], dtype: Any = None,
                options_type: str | None = None, **options: Any) -> Val:
    """Emit ``code`` on ``vals`` (broadcasting, layout-preserving); return the result value."""
    aval = out_aval(eqn)
    shape, rank = tuple(aval.shape), len(aval.shape)
    perm = em.choose_perm(vals, rank)
    tensors = [em.tensor_of(v, perm if v.rank == rank else None) for v in vals]
    base = tuple(shape[i] if any(v.rank == rank and v.base[i] != 1 for v in vals) else 1 for i in range(rank))
    dtype = np.dtype(aval.dtype if dtype is None else dtype)
    dims = [base[p] for p in perm]
    if code in NO_INT64 and any(np.dtype(t.dtype) == np.int64 for t in tensors):
        em.note(INT64_NOTE)
        tensors = [em.cast(t, np.int32) for t in tensors]
        out = em.emit(code, tensors, dims, np.int32 if dtype == np.int64 else dtype, options_type, **options)
        out = em.cast(out, dtype)
    else:
        out = em.emit(code, tensors, dims, dtype, options_type, **options)
    return Val(shape, dtype, tensor=out, perm=perm, base=base)


def like(em: Emitter, eqn: Any, x: Val, t: Any) -> Val:
    """Wrap tensor ``t`` computed elementwise from ``x`` (same layout and broadcast)."""
    aval = out_aval(eqn)
    return Val(aval.shape, aval.dtype, tensor=t, perm=x.perm, base=x.base)


def unary_tensor(em: Emitter, code: str, t: Any, **options: Any) -> Any:
    """Emit a unary op on a tensor."""
    return em.emit_like(code, [t], t, **options)


def scalar(em: Emitter, value: float, dtype: Any) -> Any:
    """A rank-0 constant tensor."""
    return em.const(np.asarray(value, dtype=tfl_dtype(dtype)))


_BINARY = {lax.add_p: "ADD", lax.sub_p: "SUB", lax.mul_p: "MUL", lax.pow_p: "POW",
           lax.atan2_p: "ATAN2", lax.eq_p: "EQUAL", lax.ne_p: "NOT_EQUAL", lax.lt_p: "LESS",
           lax.le_p: "LESS_EQUAL", lax.gt_p: "GREATER", lax.ge_p: "GREATER_EQUAL",
           # total-order comparisons: the same except for NaN and -0.0
           lax.eq_to_p: "EQUAL", lax.lt_to_p: "LESS", lax.le_to_p: "LESS_EQUAL"}
_UNARY = {lax.neg_p: "NEG", lax.exp_p: "EXP", lax.log_p: "LOG", lax.sqrt_p: "SQRT", lax.rsqrt_p: "RSQRT",
          lax.tanh_p: "TANH", lax.logistic_p: "LOGISTIC", lax.sin_p: "SIN", lax.cos_p: "COS",
          lax.floor_p: "FLOOR", lax.ceil_p: "CEIL", lax.sign_p: "SIGN", lax.square_p: "SQUARE"}


_NEUTRAL = {lax.add_p: (0, True), lax.sub_p: (0, False), lax.mul_p: (1, True)}


@rule(*_BINARY)
def lower_binary(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """add/sub/mul/pow/atan2/comparisons → the TFLite op of the same name (``x + 0``, ``x * 1`` vanish)."""
    neutral = _NEUTRAL.get(eqn.primitive)
    if neutral is not None:
        value, commutes = neutral
        for x, c in ((a, b), (b, a)) if commutes else ((a, b),):
            if c.is_const and c.scalar() == value and x.shape == tuple(out_aval(eqn).shape) \
                    and x.dtype == np.dtype(out_aval(eqn).dtype):
                return x
    return elementwise(em, eqn, _BINARY[eqn.primitive], [a, b])


@rule(*_UNARY)
def lower_unary(em: Emitter, eqn: Any, x: Val) -> Val:
    """neg/exp/log/sqrt/rsqrt/tanh/logistic/sin/cos/floor/ceil/sign/square (integer square → MUL)."""
    if eqn.primitive is lax.square_p and x.dtype.kind != "f":
        return elementwise(em, eqn, "MUL", [x, x])
    return elementwise(em, eqn, _UNARY[eqn.primitive], [x])


@rule(lax.abs_p)
def lower_abs(em: Emitter, eqn: Any, x: Val) -> Val:
    """abs → ABS."""
    return elementwise(em, eqn, "ABS", [x])


@rule(lax.div_p)
def lower_div(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """div → DIV; a constant divisor becomes MUL by its reciprocal (floats).

    Integer DIV truncates toward zero like lax (int64 runs in int32, see NO_INT64).
    """
    dt = np.dtype(out_aval(eqn).dtype)
    if dt.kind == "f" and b.is_const and b.const.size and np.all(np.isfinite(b.const)) and np.all(b.const != 0):
        recip = Val(b.shape, b.dtype, const=(1.0 / b.const.astype(np.float64)).astype(b.dtype))
        return elementwise(em, eqn, "MUL", [a, recip])
    return elementwise(em, eqn, "DIV", [a, b])


def _cmp(em: Emitter, eqn: Any, code: str, a: Val, b: Val) -> Val:
    """A comparison or logical op with a bool result inside a larger rule."""
    return elementwise(em, eqn, code, [a, b], dtype=np.bool_)


@rule(lax.rem_p)
def lower_rem(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """rem (C fmod: sign of the dividend) → ``a - b * trunc(a / b)`` for floats, FLOOR_MOD fix-up for ints."""
    dt = np.dtype(out_aval(eqn).dtype)
    if dt.kind == "f":
        q = elementwise(em, eqn, "DIV", [a, b])
        fl = elementwise(em, eqn, "FLOOR", [q])
        ce = elementwise(em, eqn, "CEIL", [q])
        neg = _cmp(em, eqn, "LESS", q, Val((), dt, const=np.zeros((), dt)))
        t = elementwise(em, eqn, "SELECT_V2", [neg, ce, fl])
        return elementwise(em, eqn, "SUB", [a, elementwise(em, eqn, "MUL", [t, b])])
    r = elementwise(em, eqn, "FLOOR_MOD", [a, b])
    zero = Val((), dt, const=np.zeros((), dt))
    nz = _cmp(em, eqn, "NOT_EQUAL", r, zero)
    diff = _cmp(em, eqn, "NOT_EQUAL", _cmp(em, eqn, "LESS", r, zero), _cmp(em, eqn, "LESS", a, zero))
    fix = _cmp(em, eqn, "LOGICAL_AND", nz, diff)
    return elementwise(em, eqn, "SELECT_V2", [fix, elementwise(em, eqn, "SUB", [r, b]), r])


@rule(lax.max_p)
def lower_max(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """max → MAXIMUM; ``max(x, 0)`` on floats → RELU (fused into a producing conv later)."""
    if np.dtype(out_aval(eqn).dtype).kind == "f":
        for x, c in ((a, b), (b, a)):
            if c.is_const and not x.is_const and c.scalar() == 0 and _no_broadcast(x, c):
                return elementwise(em, eqn, "RELU", [x])
    return elementwise(em, eqn, "MAXIMUM", [a, b])


@rule(lax.min_p)
def lower_min(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """min → MINIMUM (``min(relu(x), 6)`` becomes RELU6 in the fusion pass)."""
    return elementwise(em, eqn, "MINIMUM", [a, b])


def _no_broadcast(x: Val, c: Val) -> bool:
    """True when the constant does not widen ``x``'s shape."""
    return c.rank == 0 or all(cd == 1 or cd == xd for cd, xd in zip(c.base, x.base))


@rule(lax.clamp_p)
def lower_clamp(em: Emitter, eqn: Any, lo: Val, x: Val, hi: Val) -> Val:
    """clamp(lo, x, hi) → RELU6 / RELU_0_TO_1 / RELU_N1_TO_1 for those bounds, else MAXIMUM+MINIMUM."""
    bounds = (lo.scalar(), hi.scalar()) if lo.is_const and hi.is_const and lo.rank == 0 and hi.rank == 0 else None
    fused = {(0, 6): "RELU6", (0, 1): "RELU_0_TO_1", (-1, 1): "RELU_N1_TO_1"}
    if bounds in fused and np.dtype(out_aval(eqn).dtype).kind == "f":
        return elementwise(em, eqn, fused[bounds], [x])
    m = elementwise(em, eqn, "MAXIMUM", [x, lo])
    return elementwise(em, eqn, "MINIMUM", [m, hi])


@rule(lax.select_n_p)
def lower_select_n(em: Emitter, eqn: Any, pred: Val, *cases: Val) -> Val:
    """select_n(pred, *cases) → SELECT_V2 (a chain of them for an integer selector)."""
    if np.dtype(pred.dtype) == np.bool_:
        if len(cases) == 1:
            return cases[0]
        masked = _additive_mask(em, eqn, pred, cases[0], cases[1])
        if masked is not None:
            return masked
        return elementwise(em, eqn, "SELECT_V2", [pred, cases[1], cases[0]])
    result = cases[0]
    for i, c in enumerate(cases[1:], start=1):
        idx = Val((), pred.dtype, const=np.asarray(i, pred.dtype))
        p = _cmp(em, eqn, "EQUAL", pred, idx)
        result = elementwise(em, eqn, "SELECT_V2", [p, c, result])
    return result


def _additive_mask(em: Emitter, eqn: Any, pred: Val, on_false: Val, on_true: Val) -> Val | None:
    """``where(const_mask, x, ±inf)`` (attention masking) → ``x + const(0 / ±inf)``: exact, and an
    ADD stays inside the XNNPACK partition where SELECT_V2 would split it."""
    for x, c, keep_where in ((on_true, on_false, True), (on_false, on_true, False)):
        value = c.scalar() if c.is_const else None
        if pred.is_const and not x.is_const and x.dtype.kind == "f" and value is not None \
                and np.isinf(value) and x.shape == tuple(out_aval(eqn).shape):
            m = pred.const if keep_where else ~pred.const
            bias = Val(pred.shape, x.dtype, const=np.where(m, 0, value).astype(x.dtype))
            return elementwise(em, eqn, "ADD", [x, bias])
    return None


@rule(lax.convert_element_type_p)
def lower_convert(em: Emitter, eqn: Any, x: Val) -> Val:
    """convert_element_type → CAST (none when the TFLite dtypes agree, e.g. f64→f32).

    Float → int truncates toward zero in both lax and TFLite CAST.
    """
    new = np.dtype(eqn.params["new_dtype"])
    if np.dtype(new) == np.float64 or np.dtype(x.dtype) == np.float64:
        em.note("float64 values are computed in float32 (TFLite has no float64 kernels)")
    if tfl_dtype(new) == tfl_dtype(x.dtype):
        return Val(x.shape, new, tensor=x.tensor, perm=x.perm, base=x.base) if not x.is_const \
            else Val(x.shape, new, const=x.const.astype(new))
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.cast(t, new))


@rule(lax.and_p, lax.or_p, lax.xor_p, lax.not_p)
def lower_logic(em: Emitter, eqn: Any, *xs: Val) -> Val:
    """Boolean and/or/xor/not → LOGICAL_AND/OR, NOT_EQUAL, LOGICAL_NOT; integer not → ``-x - 1``,
    integer and/or/xor → :func:`_bitwise`."""
    p = eqn.primitive
    if np.dtype(out_aval(eqn).dtype) != np.bool_:
        if p is lax.not_p:
            neg = elementwise(em, eqn, "NEG", [xs[0]])
            one = Val((), xs[0].dtype, const=np.ones((), xs[0].dtype))
            return elementwise(em, eqn, "SUB", [neg, one])
        return _bitwise(em, eqn, xs[0], xs[1])
    code = {lax.and_p: "LOGICAL_AND", lax.or_p: "LOGICAL_OR", lax.xor_p: "NOT_EQUAL", lax.not_p: "LOGICAL_NOT"}[p]
    return elementwise(em, eqn, code, list(xs))


_I32 = np.dtype(np.int32)


def _bitwise(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """Integer and/or/xor, exact for every integer width, computed on int32 words.

    TFLite has BITWISE_XOR and RIGHT_SHIFT (8/16/32-bit) but no bitwise AND/OR, so with
    ``h = x >> 1`` and ``l = x - 2h`` (the low bit): ``a & b = h_a + h_b - (h_a ^ h_b) + l_a·l_b``
    (from ``x + y = (x ^ y) + 2(x & y)``; no intermediate overflows) and ``a | b = (a & b) + (a ^ b)``
    (disjoint bits). 8/16-bit values are CAST to int32 and back; 32-bit unsigned and 64-bit values
    are BITCAST to int32 (64-bit as pairs of words, a trailing dim of 2) and back.
    """
    aval = out_aval(eqn)
    dtype = tfl_dtype(aval.dtype)
    shape, rank = tuple(aval.shape), len(aval.shape)
    perm = em.choose_perm([a, b], rank)
    base = tuple(shape[i] if any(v.rank == rank and v.base[i] != 1 for v in (a, b)) else 1 for i in range(rank))
    wide = dtype.itemsize == 8
    dims = [base[i] for i in perm] + ([2] if wide else [])
    ta, tb = (_words(em, v, perm if v.rank == rank else None, dtype) for v in (a, b))
    if eqn.primitive is lax.xor_p:
        out = em.emit("BITWISE_XOR", [ta, tb], dims, _I32)
    else:
        (ha, la), (hb, lb) = (_low_bit(em, v, perm if v.rank == rank else None, dtype) for v in (a, b))
        high = em.emit("SUB", [em.emit("ADD", [ha, hb], dims, _I32), em.emit("BITWISE_XOR", [ha, hb], dims, _I32)],
                       dims, _I32)
        out = em.emit("ADD", [high, em.emit("MUL", [la, lb], dims, _I32)], dims, _I32)
        if eqn.primitive is lax.or_p:
            out = em.emit("ADD", [out, em.emit("BITWISE_XOR", [ta, tb], dims, _I32)], dims, _I32)
    if wide:
        out = em.emit("BITCAST", [out], dims[:-1], dtype)
    elif dtype.itemsize == 4 and dtype != _I32:
        out = em.emit("BITCAST", [out], dims, dtype)
    elif dtype != _I32:
        out = em.cast(out, dtype)
    return Val(shape, aval.dtype, tensor=out, perm=perm, base=base)


def _words(em: Emitter, v: Val, perm: Any, dtype: np.dtype) -> Any:
    """:func:`_to_words` of ``v`` in layout ``perm``, once per value."""
    key = ("int32_words", perm)
    if key not in v.cache:
        v.cache[key] = _to_words(em, em.tensor_of(v, perm), dtype)
    return v.cache[key]


def _low_bit(em: Emitter, v: Val, perm: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """``(w >> 1, w - 2 * (w >> 1))`` of ``v``'s int32 words ``w``, once per value (now for a constant)."""
    key = ("int32_low_bit", perm)
    if key not in v.cache:
        v.cache[key] = _split_low_bit(em, _words(em, v, perm, dtype))
    return v.cache[key]


def _split_low_bit(em: Emitter, t: Any) -> tuple[Any, Any]:
    """``(t >> 1, t - 2 * (t >> 1))`` of an int32 tensor (computed now for a constant)."""
    if t.is_const:
        return em.const(t.data >> 1), em.const(t.data & 1)
    h = em.emit_like("RIGHT_SHIFT", [t, em.const(np.asarray(1, np.int32))], t)
    return h, em.emit_like("SUB", [t, em.emit_like("ADD", [h, h], h)], t)


def _to_words(em: Emitter, t: Any, dtype: np.dtype) -> Any:
    """``t`` as int32 words: CAST for 8/16-bit, BITCAST for uint32 and (as pairs) 64-bit."""
    if np.dtype(t.dtype) == _I32:
        return t
    if dtype.itemsize < 4:
        return em.cast(t, np.int32)
    if t.is_const:  # reinterpret now (little-endian words, as BITCAST does at run time)
        data = np.ascontiguousarray(t.data)
        return em.const(data.view(np.int32).reshape(data.shape + ((2,) if dtype.itemsize == 8 else ())))
    out = em.like(t, np.int32, "words")
    if dtype.itemsize == 8:
        out.shape, out.signature = tuple(t.shape) + (2,), tuple(t.signature) + (2,)
    em.op("BITCAST", [t], [out])
    return out


@rule(lax.integer_pow_p)
def lower_integer_pow(em: Emitter, eqn: Any, x: Val) -> Val:
    """integer_pow → MUL chain (SQUARE-free, XNNPACK friendly); negative powers divide."""
    y = int(eqn.params["y"])
    if y == 0:
        return elementwise(em, eqn, "ADD", [Val(x.shape, x.dtype, const=np.zeros((), x.dtype)),
                                            Val((), x.dtype, const=np.ones((), x.dtype))])
    t = em.tensor_of(x, x.perm)
    acc, power, base, n = None, 1, t, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else em.emit_like("MUL", [acc, base], t)
        n >>= 1
        if n:
            base = em.emit_like("MUL", [base, base], t)
            power *= 2
    if y < 0:
        acc = em.emit_like("DIV", [scalar(em, 1, x.dtype), acc], t)
    return like(em, eqn, x, acc)


@rule(lax.exp2_p)
def lower_exp2(em: Emitter, eqn: Any, x: Val) -> Val:
    """exp2(x) → EXP(x * ln 2)."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, unary_tensor(em, "EXP", em.emit_like("MUL", [t, scalar(em, math.log(2), x.dtype)], t)))


@rule(lax.log1p_p)
def lower_log1p(em: Emitter, eqn: Any, x: Val) -> Val:
    """log1p(x) → LOG(1 + x)."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, unary_tensor(em, "LOG", em.emit_like("ADD", [t, scalar(em, 1, x.dtype)], t)))


@rule(lax.expm1_p)
def lower_expm1(em: Emitter, eqn: Any, x: Val) -> Val:
    """expm1(x) → EXP(x) - 1."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.emit_like("SUB", [unary_tensor(em, "EXP", t), scalar(em, 1, x.dtype)], t))


@rule(lax.tan_p)
def lower_tan(em: Emitter, eqn: Any, x: Val) -> Val:
    """tan → SIN / COS."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.emit_like("DIV", [unary_tensor(em, "SIN", t), unary_tensor(em, "COS", t)], t))


@rule(lax.round_p)
def lower_round(em: Emitter, eqn: Any, x: Val) -> Val:
    """round → ROUND (half to even); away-from-zero rounding → ``sign(x) * floor(|x| + 0.5)``."""
    if eqn.params.get("rounding_method") == jax.lax.RoundingMethod.TO_NEAREST_EVEN:
        return elementwise(em, eqn, "ROUND", [x])
    t = em.tensor_of(x, x.perm)
    fl = unary_tensor(em, "FLOOR", em.emit_like("ADD", [unary_tensor(em, "ABS", t), scalar(em, 0.5, x.dtype)], t))
    return like(em, eqn, x, em.emit_like("MUL", [unary_tensor(em, "SIGN", t), fl], t))


@rule(lax.is_finite_p)
def lower_is_finite(em: Emitter, eqn: Any, x: Val) -> Val:
    """is_finite(x) → ``x - x == 0`` (NaN and ±inf give NaN)."""
    t = em.tensor_of(x, x.perm)
    d = em.emit_like("SUB", [t, t], t)
    return like(em, eqn, x, em.emit_like("EQUAL", [d, scalar(em, 0, x.dtype)], t, np.bool_))


# Rational approximation of erf used by XLA/Eigen for float32 (|error| < 2e-7 on [-4, 4]).
_ERF_ALPHA = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06, -5.69250639462346e-05,
              -7.34990630326855e-04, -2.95459980854025e-03, -1.60960333262415e-02)
_ERF_BETA = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03, -7.37332916720468e-03,
             -1.42647390514189e-02)


def erf_tensor(em: Emitter, t: Any, dtype: Any) -> Any:
    """Emit erf(t) as a clamp and two polynomials (TFLite has no ERF builtin)."""
    c = em.emit_like("MAXIMUM", [em.emit_like("MINIMUM", [t, scalar(em, 4.0, dtype)], t),
                                 scalar(em, -4.0, dtype)], t)
    x2 = em.emit_like("MUL", [c, c], t)

    def poly(coeffs: tuple) -> Any:
        acc = None
        for k in coeffs:
            acc = scalar(em, k, dtype) if acc is None else em.emit_like(
                "ADD", [em.emit_like("MUL", [acc, x2], t), scalar(em, k, dtype)], t)
        return acc

    p = em.emit_like("MUL", [c, poly(_ERF_ALPHA)], t)
    return em.emit_like("DIV", [p, poly(_ERF_BETA)], t)


@rule(lax.erf_p)
def lower_erf(em: Emitter, eqn: Any, x: Val) -> Val:
    """erf → rational approximation (see :func:`erf_tensor`)."""
    em.note("erf outside GELU is computed with XLA's float32 rational approximation (no TFLite ERF builtin)")
    return like(em, eqn, x, erf_tensor(em, em.tensor_of(x, x.perm), x.dtype))


@rule(lax.erfc_p)
def lower_erfc(em: Emitter, eqn: Any, x: Val) -> Val:
    """erfc → 1 - erf."""
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.emit_like("SUB", [scalar(em, 1.0, x.dtype), erf_tensor(em, t, x.dtype)], t))


@rule(lax.bitcast_convert_type_p)
def lower_bitcast(em: Emitter, eqn: Any, x: Val) -> Val:
    """bitcast_convert_type between same-width types → BITCAST."""
    new = np.dtype(eqn.params["new_dtype"])
    if new.itemsize != np.dtype(x.dtype).itemsize or tfl_dtype(new) != new or tfl_dtype(x.dtype) != x.dtype:
        raise Unsupported(f"bitcast {x.dtype.name} → {new.name}")
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.emit_like("BITCAST", [t], t, new))
