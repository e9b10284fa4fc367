"""Logical and bitwise lax primitives → LOGICAL_AND / LOGICAL_OR / LOGICAL_NOT for bools, and for
integers BITWISE_XOR and RIGHT_SHIFT, with AND / OR (which TFLite lacks) built exactly from
BITWISE_XOR, RIGHT_SHIFT and int32 arithmetic on the values' int32 words."""

from __future__ import annotations

from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.emitter import Emitter, Val, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.elementwise import elementwise
from exporters.litert.rules.kernels import KERNEL_DTYPES


@rule(lax.and_p, lax.or_p, lax.xor_p, lax.not_p)
def lower_logic(em: Emitter, eqn: Any, *xs: Val) -> Val:
    """Boolean and/or/xor/not → LOGICAL_AND/OR, NOT_EQUAL, LOGICAL_NOT; integer not → BITWISE_XOR with
    all ones (8/16/32-bit) or ``-x - 1`` (64-bit, which BITWISE_XOR lacks); integer and/or/xor →
    :func:`_bitwise`."""
    p = eqn.primitive
    if np.dtype(out_aval(eqn).dtype) != np.bool_:
        if p is lax.not_p:
            x = xs[0]
            if tfl_dtype(x.dtype) in KERNEL_DTYPES["BITWISE_XOR"]:
                ones = Val((), x.dtype, const=np.invert(np.zeros((), x.dtype)))
                return elementwise(em, eqn, "BITWISE_XOR", [x, ones])
            neg = elementwise(em, eqn, "NEG", [x])
            return elementwise(em, eqn, "SUB", [neg, Val((), x.dtype, const=np.ones((), x.dtype))])
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


@rule(lax.shift_right_arithmetic_p)
def lower_shift_right_arithmetic(em: Emitter, eqn: Any, x: Val, s: Val) -> Val:
    """shift_right_arithmetic → RIGHT_SHIFT on signed 8/16/32-bit integers (e.g. ``signbit`` inside
    ``copysign`` of float floor division). TFLite shifts signed values arithmetically and, like lax,
    fills with the sign bit for shifts of the width or more; only negative shifts differ (lax: sign
    fill, TFLite: no shift), so a negative shift becomes one of the width - 1 (a constant's now, else
    LESS + SELECT_V2). int64 has no RIGHT_SHIFT kernel and is refused at export."""
    if tfl_dtype(x.dtype).kind != "i":
        raise Unsupported(f"arithmetic right shift of {x.dtype.name} (RIGHT_SHIFT shifts unsigned values logically)")
    widest = np.asarray(np.dtype(s.dtype).itemsize * 8 - 1, s.dtype)
    if s.is_const:
        s = Val(s.shape, s.dtype, const=np.where(np.asarray(s.const) < 0, widest, s.const))
    elif np.dtype(s.dtype).kind == "i":
        t = em.tensor_of(s, None, expand=True)
        neg = em.emit_like("LESS", [t, em.const(np.zeros((), s.dtype))], t, np.bool_)
        s = Val(s.shape, s.dtype, tensor=em.emit_like("SELECT_V2", [neg, em.const(widest), t], t))
    return elementwise(em, eqn, "RIGHT_SHIFT", [x, s])


@rule(lax.shift_left_p)
def lower_shift_left(em: Emitter, eqn: Any, x: Val, s: Val) -> Val:
    """shift_left → STABLEHLO_SHIFT_LEFT (8/16/32-bit integers; uint8 computes in int32, whose low bits are the
    narrow shift's), a shift below 0 or of the width or more giving 0 as lax and torch do (the kernel shifts by
    the amount modulo 32, C's undefined shift: LESS / GREATER_EQUAL + SELECT_V2, or nothing for constant amounts in
    range). int64 by a constant amount → MUL by ``2**s`` (wrapping as the shift does); int64 by a tensor amount has
    no kernel and is refused."""
    width = np.dtype(x.dtype).itemsize * 8
    if tfl_dtype(x.dtype) == np.int64:
        if not s.is_const:
            raise Unsupported("left shift of int64 by a tensor amount (TFLite has no int64 shift kernel)")
        amount = np.asarray(s.const, np.int64)
        inside = (amount >= 0) & (amount < 64)
        factor = np.where(inside, np.left_shift(np.int64(1), np.where(inside, amount, 0)), 0).astype(x.dtype)
        return elementwise(em, eqn, "MUL", [x, Val(factor.shape, factor.dtype, const=factor)])
    shifted = elementwise(em, eqn, "STABLEHLO_SHIFT_LEFT", [x, s])
    if s.is_const and ((np.asarray(s.const) >= 0) & (np.asarray(s.const) < width)).all():
        return shifted
    zero = Val((), s.dtype, const=np.zeros((), s.dtype))
    inside = elementwise(em, eqn, "LOGICAL_AND", [
        elementwise(em, eqn, "GREATER_EQUAL", [s, zero], dtype=np.bool_),
        elementwise(em, eqn, "LESS", [s, Val((), s.dtype, const=np.asarray(width, s.dtype))], dtype=np.bool_)],
        dtype=np.bool_)
    return elementwise(em, eqn, "SELECT_V2", [inside, shifted, Val((), x.dtype, const=np.zeros((), x.dtype))])
