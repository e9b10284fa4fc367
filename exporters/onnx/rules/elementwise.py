"""Elementwise lax primitives → ONNX arithmetic, comparison, logic and math ops.

Binary ops keep pending broadcasts (ONNX binary ops broadcast like NumPy), so a
``broadcast_in_dim`` feeding an ``add`` costs a Reshape at most, never an Expand.
"""

from __future__ import annotations

from typing import Any

import ml_dtypes
import numpy as np
from jax.extend.core import primitives as lax
from onnx import TensorProto

from exporters.onnx.graph import OnnxGraph, Val, elem_type, is_static, onnx_dtype
from exporters.onnx.rules import Unsupported, out_aval, rule


def is_one(d: Any) -> bool:
    """True for a static dim equal to 1."""
    return is_static(d) and int(d) == 1


def nary(g: OnnxGraph, eqn: Any, op: str, vals: list[Val], **attrs: Any) -> Val:
    """Emit ``op`` on ``vals`` with ONNX broadcasting; the result keeps a pending broadcast
    on every axis where all inputs are pending."""
    aval = out_aval(eqn)
    shape = tuple(aval.shape)
    names = [g.tensor(v, expand=False) for v in vals]
    base = tuple(1 if all(is_one(v.base[i]) for v in vals if v.rank == len(shape)) else shape[i]
                 for i in range(len(shape)))
    out = g.where(*names, aval.dtype) if op == "Where" else g.op(op, names, **attrs)
    return g.val(out, shape, aval.dtype, base)


def unary(g: OnnxGraph, eqn: Any, x: Val, name: str) -> Val:
    """Wrap tensor ``name`` computed elementwise from ``x`` (same pending broadcast)."""
    aval = out_aval(eqn)
    return g.val(name, aval.shape, aval.dtype, x.base)


def scalar(g: OnnxGraph, value: Any, dtype: Any) -> str:
    """A rank-0 constant of ``dtype``."""
    return g.const(np.asarray(value, dtype=onnx_dtype(dtype)))


_BINARY = {lax.add_p: "Add", lax.sub_p: "Sub", lax.mul_p: "Mul", lax.div_p: "Div", lax.max_p: "Max",
           lax.min_p: "Min", lax.pow_p: "Pow", lax.eq_p: "Equal", lax.lt_p: "Less", lax.le_p: "LessOrEqual",
           lax.gt_p: "Greater", lax.ge_p: "GreaterOrEqual", lax.add_jaxvals_p: "Add",
           # total-order comparisons (``jnp.searchsorted``'s bisection: histogram, bucketize): the same except for
           # NaN and -0.0, as the LiteRT rules take them (torch's own comparisons there are IEEE's)
           lax.eq_to_p: "Equal", lax.lt_to_p: "Less", lax.le_to_p: "LessOrEqual"}


def _binary(g: OnnxGraph, eqn: Any, a: Val, b: Val) -> Val:
    """add / sub / mul / div / max / min / pow and the comparisons → the ONNX op of the same
    name (Add, Sub, Mul, Div, Max, Min, Pow, Equal, Less, LessOrEqual, Greater, GreaterOrEqual).
    Integer div truncates toward zero in both lax and ONNX Runtime. Bool add / mul are Or / And."""
    op = _BINARY[eqn.primitive]
    if a.dtype == np.bool_ and op in ("Add", "Mul", "Max", "Min"):
        op = {"Add": "Or", "Max": "Or", "Mul": "And", "Min": "And"}[op]
    return nary(g, eqn, op, [a, b])


for _p in _BINARY:
    rule(_p)(_binary)


@rule(lax.ne_p)
def lower_ne(g: OnnxGraph, eqn: Any, a: Val, b: Val) -> Val:
    """ne → Not(Equal)."""
    eq = nary(g, eqn, "Equal", [a, b])
    return unary(g, eqn, eq, g.op("Not", [eq.name]))


@rule(lax.rem_p)
def lower_rem(g: OnnxGraph, eqn: Any, a: Val, b: Val) -> Val:
    """rem (C fmod: the sign of the dividend) → Mod(fmod=1)."""
    return nary(g, eqn, "Mod", [a, b], fmod=1)


_LOGIC = {lax.and_p: ("And", "BitwiseAnd"), lax.or_p: ("Or", "BitwiseOr"), lax.xor_p: ("Xor", "BitwiseXor")}


def _logic(g: OnnxGraph, eqn: Any, a: Val, b: Val) -> Val:
    """and / or / xor → And / Or / Xor on bool, BitwiseAnd / BitwiseOr / BitwiseXor on integers."""
    logical, bitwise = _LOGIC[eqn.primitive]
    return nary(g, eqn, logical if a.dtype == np.bool_ else bitwise, [a, b])


for _p in _LOGIC:
    rule(_p)(_logic)


@rule(lax.not_p)
def lower_not(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """not → Not on bool, BitwiseNot on integers."""
    return unary(g, eqn, x, g.op("Not" if x.dtype == np.bool_ else "BitwiseNot", [g.tensor(x, expand=False)]))


_UNARY = {lax.neg_p: "Neg", lax.exp_p: "Exp", lax.log_p: "Log", lax.tanh_p: "Tanh", lax.logistic_p: "Sigmoid",
          lax.sqrt_p: "Sqrt", lax.abs_p: "Abs", lax.sign_p: "Sign", lax.erf_p: "Erf", lax.floor_p: "Floor",
          lax.ceil_p: "Ceil", lax.sin_p: "Sin", lax.cos_p: "Cos", lax.tan_p: "Tan", lax.asin_p: "Asin",
          lax.acos_p: "Acos", lax.atan_p: "Atan", lax.sinh_p: "Sinh", lax.cosh_p: "Cosh", lax.asinh_p: "Asinh",
          lax.acosh_p: "Acosh", lax.atanh_p: "Atanh"}


def _unary(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """neg / exp / log / tanh / logistic / sqrt / abs / sign / erf / floor / ceil and the
    trigonometric functions → Neg, Exp, Log, Tanh, Sigmoid, Sqrt, Abs, Sign, Erf, Floor, Ceil, Sin, …"""
    return unary(g, eqn, x, g.op(_UNARY[eqn.primitive], [g.tensor(x, expand=False)]))


for _p in _UNARY:
    rule(_p)(_unary)


@rule(lax.rsqrt_p)
def lower_rsqrt(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """rsqrt → Reciprocal(Sqrt)."""
    return unary(g, eqn, x, g.op("Reciprocal", [g.op("Sqrt", [g.tensor(x, expand=False)])]))


@rule(lax.square_p)
def lower_square(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """square → Mul(x, x)."""
    t = g.tensor(x, expand=False)
    return unary(g, eqn, x, g.op("Mul", [t, t]))


@rule(lax.exp2_p)
def lower_exp2(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """exp2 → Pow(2, x)."""
    return unary(g, eqn, x, g.op("Pow", [scalar(g, 2, x.dtype), g.tensor(x, expand=False)]))


@rule(lax.is_finite_p)
def lower_is_finite(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """is_finite → Not(IsNaN(x) or IsInf(x))."""
    t = g.tensor(x, expand=False)
    return unary(g, eqn, x, g.op("Not", [g.op("Or", [g.op("IsNaN", [t]), g.op("IsInf", [t])])]))


@rule(lax.integer_pow_p)
def lower_integer_pow(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """integer_pow(y=n) → repeated Mul (binary powering; Reciprocal for n < 0)."""
    n = int(eqn.params["y"])
    t = g.tensor(x, expand=False)
    if n == 0:
        return unary(g, eqn, x, g.op("Add", [g.op("Mul", [t, scalar(g, 0, x.dtype)]), scalar(g, 1, x.dtype)]))
    result, power, k = None, t, abs(n)
    while k:
        if k & 1:
            result = power if result is None else g.op("Mul", [result, power])
        k >>= 1
        if k:
            power = g.op("Mul", [power, power])
    if n < 0:
        result = g.op("Reciprocal", [result])
    return unary(g, eqn, x, result)


@rule(lax.round_p)
def lower_round(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """round → Round (half to even), or for half away from zero Sign(x) * (f + (|x| - f >= 0.5)) with
    f = Floor(|x|) (``|x| - f`` is exact; Floor(|x| + 0.5) is not: 0.49999997 + 0.5 rounds to 1)."""
    t = g.tensor(x, expand=False)
    if int(eqn.params.get("rounding_method", 0)) == 1:
        return unary(g, eqn, x, g.op("Round", [t]))
    a = g.op("Abs", [t])
    fl = g.op("Floor", [a])
    half = g.op("GreaterOrEqual", [g.op("Sub", [a, fl]), scalar(g, 0.5, x.dtype)])
    up = g.op("Add", [fl, g.cast(half, np.bool_, x.dtype)])
    return unary(g, eqn, x, g.op("Mul", [g.op("Sign", [t]), up]))


@rule(lax.convert_element_type_p)
def lower_convert_element_type(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """convert_element_type → Cast (float → int truncates toward zero, nonzero → True, like lax)."""
    new = np.dtype(eqn.params["new_dtype"])
    return unary(g, eqn, x, g.cast(g.tensor(x, expand=False), x.dtype, new))


@rule(lax.bitcast_convert_type_p)
def lower_bitcast(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """bitcast_convert_type float32 → int32 (torch's topk order key): ONNX has no bitcast, so the
    IEEE-754 fields are computed exactly in float64 — exponent from Floor(Log2) corrected by one
    Pow(2, e) comparison, mantissa = (|x| / 2^e - 1) * 2^23, subnormals |x| * 2^149, inf/NaN
    as 0x7F800000 / 0x7FC00000 (every NaN is the canonical quiet NaN) — then the sign bit.
    bfloat16 → int16 (``signbit``, topk's key of bfloat16 values, which compute as float32 here): the
    high 16 bits of those float32 bits, exact for a bfloat16 value."""
    new = np.dtype(eqn.params["new_dtype"])
    if new == x.dtype:
        return x
    half = (x.dtype, new) == (np.dtype(ml_dtypes.bfloat16), np.dtype(np.int16))
    if (x.dtype, new) != (np.dtype(np.float32), np.dtype(np.int32)) and not half:
        raise Unsupported(f"bitcast {x.dtype.name} → {new.name} (ONNX has no bitcast operator; "
                          "only float32 → int32 and bfloat16 → int16 are computed arithmetically)")
    double = TensorProto.DOUBLE

    def c(v: float) -> str:
        return g.const(np.asarray(v, np.float64), narrow=False)

    xt = g.tensor(x, expand=False)
    a = g.op("Abs", [g.op("Cast", [xt], to=double)])
    e = g.op("Floor", [g.op("Div", [g.op("Log", [a]), c(np.log(2.0))])])
    p = g.op("Pow", [c(2.0), e])
    e = g.op("Sub", [e, g.op("Cast", [g.op("Less", [a, p])], to=double)])
    p = g.op("Pow", [c(2.0), e])
    e = g.op("Add", [e, g.op("Cast", [g.op("GreaterOrEqual", [a, g.op("Mul", [p, c(2.0)])])], to=double)])
    p = g.op("Pow", [c(2.0), e])
    normal = g.op("Add", [g.op("Mul", [g.op("Add", [e, c(127.0)]), c(2.0 ** 23)]),
                          g.op("Mul", [g.op("Sub", [g.op("Div", [a, p]), c(1.0)]), c(2.0 ** 23)])])
    m = g.op("Where", [g.op("Less", [a, c(2.0 ** -126)]), g.op("Mul", [a, c(2.0 ** 149)]), normal])
    m = g.op("Where", [g.op("IsInf", [a]), c(float(0x7F800000)), m])
    m = g.op("Where", [g.op("IsNaN", [a]), c(float(0x7FC00000)), m])
    neg = g.op("Or", [g.op("Less", [xt, scalar(g, 0, x.dtype)]),
                      g.op("Less", [g.op("Reciprocal", [xt]), scalar(g, 0, x.dtype)])])
    bits = g.op("Where", [neg, g.op("Sub", [m, c(2.0 ** 31)]), m])  # (exact in float64)
    if half:
        bits = g.op("Floor", [g.op("Div", [bits, c(2.0 ** 16)])])
    bits = g.op("Cast", [bits], to=elem_type(np.int64))
    g.note("float32 → int32 bitcasts (torch.topk's order key) are computed arithmetically; NaNs become the "
           "canonical quiet NaN")
    return unary(g, eqn, x, g.op("Cast", [bits], to=elem_type(new)))


@rule(lax.select_n_p)
def lower_select_n(g: OnnxGraph, eqn: Any, pred: Val, *cases: Val) -> Val:
    """select_n(pred, *cases) → Where(pred, cases[1], cases[0]); an integer predicate with more
    cases chains Where(Equal(pred, i), …)."""
    if len(cases) == 1:
        return cases[0]
    if pred.dtype == np.bool_ and len(cases) == 2:
        return nary(g, eqn, "Where", [pred, cases[1], cases[0]])
    out = cases[0]
    aval = out_aval(eqn)
    for i, case in enumerate(cases[1:], start=1):
        p = g.op("Equal", [g.tensor(pred, expand=False), scalar(g, i, pred.dtype)])
        pv = g.val(p, pred.shape, np.bool_, pred.base)
        out = nary(g, eqn, "Where", [pv, case, out])
        out = Val(aval.shape, aval.dtype, name=out.name, base=out.base)
    return out


@rule(lax.clamp_p)
def lower_clamp(g: OnnxGraph, eqn: Any, lo: Val, x: Val, hi: Val) -> Val:
    """clamp(lo, x, hi) → Clip with scalar bounds, else Max(Min(x, hi), lo)."""
    if lo.rank == 0 and hi.rank == 0:
        t = g.op("Clip", [g.tensor(x, expand=False), g.tensor(lo), g.tensor(hi)])
        return unary(g, eqn, x, t)
    inner = nary(g, eqn, "Min", [x, hi])
    return nary(g, eqn, "Max", [inner, lo])


@rule(lax.atan2_p)
def lower_atan2(g: OnnxGraph, eqn: Any, y: Val, x: Val) -> Val:
    """atan2(y, x) → Atan(y / x) plus the quadrant: +π (y ≥ +0) or -π (y ≤ -0) where x ≤ -0, and ±π/2
    by the sign of y where x = ±0; where both are zero, ±π by y's sign for x = -0 and y itself for x = +0
    (a zero's sign is read as the sign of its reciprocal, ±inf)."""
    if onnx_dtype(x.dtype).kind != "f":
        raise Unsupported(f"atan2 of {x.dtype.name}")
    aval = out_aval(eqn)
    base = nary(g, eqn, "Div", [y, x])
    yt, xt = g.tensor(y, expand=False), g.tensor(x, expand=False)
    zero = scalar(g, 0, x.dtype)

    def negative(t: str) -> str:  # t < 0, or t = -0
        return g.op("Or", [g.op("Less", [t, zero]), g.op("Less", [g.op("Reciprocal", [t]), zero])])

    neg_x = negative(xt)
    pi = g.op("Where", [negative(yt), scalar(g, -np.pi, x.dtype), scalar(g, np.pi, x.dtype)])
    t = g.op("Atan", [base.name])
    t = g.op("Where", [neg_x, g.op("Add", [t, pi]), t])
    half = g.op("Mul", [g.op("Sign", [yt]), scalar(g, np.pi / 2, x.dtype)])
    x_zero = g.op("Equal", [xt, zero])
    t = g.op("Where", [x_zero, half, t])
    both = g.op("And", [x_zero, g.op("Equal", [yt, zero])])
    t = g.op("Where", [both, g.op("Where", [neg_x, pi, yt]), t])
    return g.val(t, aval.shape, aval.dtype, base.base)


@rule(lax.nextafter_p)
def lower_no_onnx_op(g: OnnxGraph, eqn: Any, *vals: Val) -> Val:
    """Primitives without an ONNX operator."""
    raise Unsupported(f"ONNX has no operator for lax.{eqn.primitive.name}")
