"""Elementwise lax primitives → TFLite arithmetic, comparison, select and conversion ops.

All of these keep their inputs' layout (``Val.perm``) and pending broadcasts (TFLite binary ops
broadcast), so they never add a TRANSPOSE or BROADCAST_TO; ops go through :mod:`.kernels`, which
broadcasts for the one kernel that does not (ATAN2) and keeps each kernel to the dtypes it has.
Logical / bitwise ops are in :mod:`.bitwise`, math functions without a builtin in :mod:`.math_functions`.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.emitter import Emitter, Val, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.kernels import compute_dtype, emit, emit_like


def elementwise(em: Emitter, eqn: Any, code: str, vals: list[Val], dtype: Any = None,
                options_type: str | None = None, **options: Any) -> Val:
    """Emit ``code`` on ``vals`` (broadcasting, layout-preserving); return the result value.

    The op goes through :func:`.kernels.emit`: computed in a wider dtype when its kernel lacks the
    operands' (CAST back after), with operands broadcast first where its kernel does not broadcast.
    """
    aval = out_aval(eqn)
    shape, rank = tuple(aval.shape), len(aval.shape)
    perm = em.choose_perm(vals, rank)
    tensors = [em.tensor_of(v, perm if v.rank == rank else None) for v in vals]
    base = tuple(shape[i] if any(v.rank == rank and v.base[i] != 1 for v in vals) else 1 for i in range(rank))
    dtype = np.dtype(aval.dtype if dtype is None else dtype)
    dims = [base[p] for p in perm]
    out = emit(em, code, tensors, dims, dtype, options_type, **options)
    return Val(shape, dtype, tensor=out, perm=perm, base=base)


def like(em: Emitter, eqn: Any, x: Val, t: Any) -> Val:
    """Wrap tensor ``t`` computed elementwise from ``x`` (same layout and broadcast)."""
    aval = out_aval(eqn)
    return Val(aval.shape, aval.dtype, tensor=t, perm=x.perm, base=x.base)


def unary_tensor(em: Emitter, code: str, t: Any, **options: Any) -> Any:
    """Emit a unary op on a tensor."""
    return emit_like(em, code, [t], t, **options)


def scalar(em: Emitter, value: float, dtype: Any) -> Any:
    """A rank-0 constant tensor."""
    return em.const(np.asarray(value, dtype=tfl_dtype(dtype)))


_BINARY = {lax.add_p: "ADD", lax.add_jaxvals_p: "ADD", lax.sub_p: "SUB", lax.mul_p: "MUL", lax.pow_p: "POW",
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
    """neg/exp/log/sqrt/rsqrt/tanh/logistic/sin/cos/floor/ceil/sign/square (integer square → MUL;
    int64 sign, which SIGN lacks, → ``clamp(x, -1, 1)``: exact with int64 MAXIMUM / MINIMUM; float neg →
    ``MUL(x, -1)``: XNNPACK's ``NEG`` gives ``-(+0.0) = +0.0``, losing the zero's sign that ``1/x``,
    ``copysign`` and ``atan2`` read)."""
    if eqn.primitive is lax.neg_p and tfl_dtype(x.dtype).kind == "f":
        return elementwise(em, eqn, "MUL", [x, Val((), x.dtype, const=np.asarray(-1, x.dtype))])
    if eqn.primitive is lax.square_p and tfl_dtype(x.dtype).kind != "f":
        return elementwise(em, eqn, "MUL", [x, x])
    if eqn.primitive is lax.sign_p and tfl_dtype(x.dtype) == np.int64:
        lo = elementwise(em, eqn, "MAXIMUM", [x, Val((), x.dtype, const=np.asarray(-1, x.dtype))])
        return elementwise(em, eqn, "MINIMUM", [lo, Val((), x.dtype, const=np.ones((), x.dtype))])
    return elementwise(em, eqn, _UNARY[eqn.primitive], [x])


@rule(lax.abs_p)
def lower_abs(em: Emitter, eqn: Any, x: Val) -> Val:
    """abs → ABS; int64, which ABS lacks, → ``MAXIMUM(x, NEG(x))`` (exact; -2**63 stays itself, like torch)."""
    if tfl_dtype(x.dtype) == np.int64:
        return elementwise(em, eqn, "MAXIMUM", [x, elementwise(em, eqn, "NEG", [x])])
    return elementwise(em, eqn, "ABS", [x])


@rule(lax.div_p)
def lower_div(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """div → DIV; a constant divisor becomes MUL by its reciprocal (floats), or RIGHT_SHIFT when it is one power
    of two dividing unsigned integers (DIV has no uint32 kernel: ``jnp.searchsorted``'s bisection halves uint32
    indices, inside ``histogram`` and ``matrix_exp``).

    Integer DIV truncates toward zero like lax (int64 runs in int32, see :data:`.kernels.NO_INT64`).
    """
    dt = np.dtype(out_aval(eqn).dtype)
    if tfl_dtype(dt).kind == "f" and b.is_const and b.const.size and np.all(np.isfinite(b.const)) \
            and np.all(b.const != 0):
        recip = Val(b.shape, b.dtype, const=(1.0 / b.const.astype(np.float64)).astype(b.dtype))
        return elementwise(em, eqn, "MUL", [a, recip])
    if dt.kind == "u" and dt.itemsize <= 4 and b.is_const and b.const.size:
        divisor = np.unique(np.asarray(b.const))
        if divisor.size == 1 and divisor[0] > 0 and int(divisor[0]) & (int(divisor[0]) - 1) == 0:
            shift = Val((), dt, const=np.asarray(int(divisor[0]).bit_length() - 1, dt))  # (of the values' type)
            return elementwise(em, eqn, "RIGHT_SHIFT", [a, shift])
    return elementwise(em, eqn, "DIV", [a, b])


def _cmp(em: Emitter, eqn: Any, code: str, a: Val, b: Val) -> Val:
    """A comparison or logical op with a bool result inside a larger rule."""
    return elementwise(em, eqn, code, [a, b], dtype=np.bool_)


@rule(lax.rem_p)
def lower_rem(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """rem (C fmod: sign of the dividend) → ``FLOOR_MOD(|a|, |b|) * SIGN(a)`` for floats, FLOOR_MOD fix-up for ints.

    Exact: FLOOR_MOD computes ``std::fmod`` and only adjusts a result whose sign differs from the
    divisor's, which never happens for ``|a|, |b|`` (``a - b * trunc(a / b)`` was off by up to ``|b|``
    where ``a / b`` rounds to an integer). Only ``a = -0.0`` gives +0.0 instead of -0.0.
    """
    dt = np.dtype(out_aval(eqn).dtype)
    if tfl_dtype(dt).kind == "f":
        def magnitude(v: Val) -> Val:
            return Val(v.shape, v.dtype, const=np.abs(v.const)) if v.is_const else elementwise(em, eqn, "ABS", [v])

        r = elementwise(em, eqn, "FLOOR_MOD", [magnitude(a), magnitude(b)])
        return elementwise(em, eqn, "MUL", [r, elementwise(em, eqn, "SIGN", [a])])
    r = elementwise(em, eqn, "FLOOR_MOD", [a, b])
    zero = Val((), dt, const=np.zeros((), dt))
    nz = _cmp(em, eqn, "NOT_EQUAL", r, zero)
    diff = _cmp(em, eqn, "NOT_EQUAL", _cmp(em, eqn, "LESS", r, zero), _cmp(em, eqn, "LESS", a, zero))
    fix = _cmp(em, eqn, "LOGICAL_AND", nz, diff)
    return elementwise(em, eqn, "SELECT_V2", [fix, elementwise(em, eqn, "SUB", [r, b]), r])


@rule(lax.max_p)
def lower_max(em: Emitter, eqn: Any, a: Val, b: Val) -> Val:
    """max → MAXIMUM; ``max(x, 0)`` on floats → RELU (fused into a producing conv later)."""
    if tfl_dtype(out_aval(eqn).dtype).kind == "f":
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
    if bounds in fused and tfl_dtype(out_aval(eqn).dtype).kind == "f":
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
        if pred.is_const and not x.is_const and tfl_dtype(x.dtype).kind == "f" and value is not None \
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


@rule(lax.integer_pow_p)
def lower_integer_pow(em: Emitter, eqn: Any, x: Val) -> Val:
    """integer_pow → MUL chain (SQUARE-free, XNNPACK friendly); negative powers divide; ``x ** 0`` is a
    constant 1 (also for NaN, like lax). Integers without a MUL kernel (8/16-bit) run the whole chain
    in int32 between two CASTs, which wraps like torch."""
    aval = out_aval(eqn)
    y = int(eqn.params["y"])
    if y == 0:
        return Val(aval.shape, aval.dtype, const=np.ones((1,) * len(aval.shape), aval.dtype))
    t = em.tensor_of(x, x.perm)
    t = em.cast(t, compute_dtype(em, "MUL", t.dtype))
    acc, base, n = None, t, abs(y)
    while n:
        if n & 1:
            acc = base if acc is None else emit_like(em, "MUL", [acc, base], t)
        n >>= 1
        if n:
            base = emit_like(em, "MUL", [base, base], t)
    if y < 0:
        acc = emit_like(em, "DIV", [scalar(em, 1, acc.dtype), acc], t)
    return like(em, eqn, x, em.cast(acc, x.dtype))


@rule(lax.bitcast_convert_type_p)
def lower_bitcast(em: Emitter, eqn: Any, x: Val) -> Val:
    """bitcast_convert_type between same-width types → BITCAST; bfloat16 → int16 (``signbit``, topk's key of
    bfloat16 values, which compute as float32 here) → the high 16 bits of the float32 bits (exact for a bfloat16
    value): BITCAST, RIGHT_SHIFT by 16, CAST."""
    new = np.dtype(eqn.params["new_dtype"])
    if (np.dtype(x.dtype), new) == (np.dtype(ml_dtypes.bfloat16), np.dtype(np.int16)):
        t = em.tensor_of(x, x.perm)
        bits = em.emit_like("BITCAST", [t], t, np.int32)
        high = em.emit_like("RIGHT_SHIFT", [bits, em.const(np.asarray(16, np.int32))], bits)
        return like(em, eqn, x, em.emit_like("CAST", [high], high, np.int16))
    if new.itemsize != np.dtype(x.dtype).itemsize or tfl_dtype(new) != new or tfl_dtype(x.dtype) != x.dtype:
        raise Unsupported(f"bitcast {x.dtype.name} → {new.name}")
    t = em.tensor_of(x, x.perm)
    return like(em, eqn, x, em.emit_like("BITCAST", [t], t, new))
