"""Integer shifts → ONNX BitShift on unsigned words, exact for every integer width and shift amount.

BitShift takes unsigned integers only and leaves a shift by the width or more to C++ (undefined); lax
gives 0 there (the sign's fill for an arithmetic right shift). So each value is cast to the unsigned word
of its width (32 bits for 8/16-bit values: ONNX Runtime has no 16-bit BitShift), the amount is made safe
(0 where it is out of range) and the result of an out-of-range amount is chosen after the shift.
``jnp.signbit`` (``copysign``, a float floor division's zero sign, ``frexp``) is an arithmetic shift of a
float's bits by 31.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.onnx.graph import OnnxGraph, Val
from exporters.onnx.rules import Unsupported, out_aval, rule
from exporters.onnx.rules.elementwise import is_one, scalar


def _word(bits: int, signed: bool) -> np.dtype:
    size = 32 if bits <= 32 else 64
    return np.dtype(f"{'int' if signed else 'uint'}{size}")


@rule(lax.shift_left_p, lax.shift_right_logical_p, lax.shift_right_arithmetic_p)
def lower_shift(g: OnnxGraph, eqn: Any, x: Val, s: Val) -> Val:
    """shift_left / shift_right_logical → BitShift LEFT / RIGHT on the value's unsigned word (a logical right
    shift of a signed value reads its bits as the unsigned type of its width first); shift_right_arithmetic of a
    signed value → ``~((~x) >> s)`` for negative ``x``, ``x >> s`` otherwise, on its sign-extended word. An
    amount outside ``[0, width)`` gives 0 (an arithmetic shift: ``-1`` for negative ``x``)."""
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    if dtype.kind not in "iu":
        raise Unsupported(f"{eqn.primitive.name} of {dtype}")
    p, bits, signed = eqn.primitive, dtype.itemsize * 8, dtype.kind == "i"
    if p is lax.shift_right_arithmetic_p and not signed:
        raise Unsupported(f"shift_right_arithmetic of unsigned {dtype}")
    shape, rank = tuple(aval.shape), len(aval.shape)
    base = tuple(1 if all(is_one(v.base[i]) for v in (x, s) if v.rank == rank) else shape[i] for i in range(rank))
    xt, st = g.tensor(x, expand=False), g.tensor(s, expand=False)
    sdt = np.dtype(s.dtype)
    valid = g.op("Less", [st, scalar(g, bits, sdt)])
    if sdt.kind == "i":
        valid = g.op("And", [valid, g.op("GreaterOrEqual", [st, scalar(g, 0, sdt)])])
    # (ONNX Runtime's Where has no 8/16-bit or unsigned kernels: the unsigned words are masked by multiplying)
    unsigned = _word(bits, False)
    keep = g.cast(valid, np.bool_, unsigned)
    amount = g.op("Mul", [g.cast(st, sdt, unsigned), keep])
    if p is lax.shift_right_arithmetic_p:
        wide = _word(bits, True)
        n = g.cast(xt, dtype, wide)
        neg = g.op("Less", [n, scalar(g, 0, wide)])
        m = g.cast(g.where(neg, g.op("BitwiseNot", [n]), n, wide), wide, unsigned)
        r = g.cast(g.op("BitShift", [m, amount], direction="RIGHT"), unsigned, wide)
        r = g.where(neg, g.op("BitwiseNot", [r]), r, wide)
        fill = g.where(neg, scalar(g, -1, wide), scalar(g, 0, wide), wide)
        out = g.cast(g.where(valid, r, fill, wide), wide, dtype)
        return g.val(out, shape, dtype, base)
    word = xt if dtype == unsigned else (
        g.cast(g.cast(xt, dtype, np.dtype(f"uint{bits}")), np.dtype(f"uint{bits}"), unsigned)
        if p is lax.shift_right_logical_p and signed else g.cast(xt, dtype, unsigned))
    r = g.op("BitShift", [word, amount], direction="LEFT" if p is lax.shift_left_p else "RIGHT")
    out = g.cast(g.op("Mul", [r, keep]), unsigned, dtype)
    return g.val(out, shape, dtype, base)
