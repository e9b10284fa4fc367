"""dot_general → FULLY_CONNECTED (constant right-hand side, no batch dims) or BATCH_MATMUL."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from jax.extend.core import primitives as lax

from exporters.litert.emitter import Emitter, Val, is_static, tfl_dtype, unit_only_move
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.shape import i32, reshape_to


def _prod(dims: Sequence) -> Any:
    out: Any = 1
    for d in dims:
        out = out * d
    return out


def fully_connected(em: Emitter, x: Val, weight: np.ndarray | Val, bias: np.ndarray | None,
                    out_shape: Sequence, dtype: Any) -> Val:
    """FULLY_CONNECTED of ``x`` (contracting its last dim) with ``weight`` (out, in), fused bias.

    ``out_shape`` is ``x.shape[:-1] + (out,)``; rank-1 inputs are handled with a RESHAPE.
    """
    out_shape = tuple(out_shape)
    t = em.tensor_of(x, None, expand=True)
    w = em.const(weight, dtype) if isinstance(weight, np.ndarray) else em.tensor_of(weight)
    b = em.const(bias, dtype) if bias is not None else None
    n = int(w.shape[0])
    if x.rank == 1:
        t = em.emit("RESHAPE", [t, em.const(i32([1, -1]))], [1, x.shape[0]], dtype)
        out = em.emit("FULLY_CONNECTED", [t, w, b], [1, n], dtype, keepNumDims=True)
        out = em.emit("RESHAPE", [out, em.const(i32([n]))], [n], dtype)
    else:
        out = em.emit("FULLY_CONNECTED", [t, w, b], out_shape, dtype, keepNumDims=True)
    return Val(out_shape, dtype, tensor=out)


def _order(val: Val, first: list[int], a: list[int], b: list[int]) -> tuple[tuple, bool]:
    """Pick the operand layout ``first+a+b`` or ``first+b+a`` that is cheaper from its current layout.

    Returns (perm, swapped) where swapped means ``first+b+a`` was chosen.
    """
    p1, p2 = tuple(first + a + b), tuple(first + b + a)
    if unit_only_move(val.perm, p1, val.base) or val.is_const:
        return p1, False
    if unit_only_move(val.perm, p2, val.base):
        return p2, True
    return p1, False


@rule(lax.dot_general_p)
def lower_dot_general(em: Emitter, eqn: Any, lhs: Val, rhs: Val) -> Val:
    """dot_general → FULLY_CONNECTED or BATCH_MATMUL (adj_x/adj_y instead of transposes)."""
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lc, rc, lb, rb = list(lc), list(rc), list(lb), list(rb)
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    if tfl_dtype(dtype).kind != "f":
        raise Unsupported(f"integer matmul ({dtype.name}) has no TFLite float kernel here")
    lf = [d for d in range(lhs.rank) if d not in lc and d not in lb]
    rf = [d for d in range(rhs.rank) if d not in rc and d not in rb]
    if not lb and rhs.is_const and rhs.static:
        # FULLY_CONNECTED: weight (N, K) with N = prod(rhs free), K = prod(contracting).
        k = [int(rhs.shape[d]) for d in rc]
        nf = [int(rhs.shape[d]) for d in rf]
        w = np.transpose(rhs.full(), rf + rc).reshape(int(np.prod(nf)), int(np.prod(k)))
        xin = lhs
        if lf + lc != list(range(lhs.rank)) or len(lc) != 1:
            xin = _permuted(lhs, lf + lc)
            xin = reshape_to(em, xin, [lhs.shape[d] for d in lf] + [int(np.prod(k))])
        y = fully_connected(em, xin, w, None, [lhs.shape[d] for d in lf] + [int(np.prod(nf))], dtype)
        if len(nf) != 1:
            y = reshape_to(em, y, aval.shape)
        return y
    return _batch_matmul(em, eqn, lhs, rhs, lc, rc, lb, rb, lf, rf)


def _permuted(x: Val, order: list[int]) -> Val:
    """``x`` transposed logically by ``order`` (no op emitted)."""
    if order == list(range(x.rank)):
        return x
    if x.is_const:
        return Val([x.shape[i] for i in order], x.dtype, const=np.transpose(x.const, order))
    qinv = [order.index(i) for i in range(x.rank)]
    return Val([x.shape[i] for i in order], x.dtype, tensor=x.tensor,
               perm=tuple(qinv[p] for p in x.perm), base=[x.base[i] for i in order])


def _batch_matmul(em: Emitter, eqn: Any, lhs: Val, rhs: Val, lc: list, rc: list, lb: list, rb: list,
                  lf: list, rf: list) -> Val:
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    lperm, adj_x = _order(lhs, lb, lf, lc)
    rperm, adj_y = _order(rhs, rb, rc, rf)
    bshape = [lhs.shape[d] for d in lb]
    m = _prod([lhs.shape[d] for d in lf])
    k = _prod([lhs.shape[d] for d in lc])
    n = _prod([rhs.shape[d] for d in rf])
    lmat = [k, m] if adj_x else [m, k]
    rmat = [n, k] if adj_y else [k, n]
    lv = reshape_to(em, _permuted(lhs, list(lperm)), bshape + lmat)
    rv = reshape_to(em, _permuted(rhs, list(rperm)), [rhs.shape[d] for d in rb] + rmat)
    lt = em.tensor_of(lv, None, expand=True)
    rt = em.tensor_of(rv, None, expand=True)
    out_dims = bshape + [m, n]
    out = em.emit("BATCH_MATMUL", [lt, rt], out_dims, dtype, adjX=adj_x, adjY=adj_y)
    y = Val(out_dims, dtype, tensor=out)
    if len(out_dims) != len(aval.shape) or not all(is_static(a) and is_static(b) and a == b
                                                   for a, b in zip(out_dims, aval.shape)):
        y = reshape_to(em, y, aval.shape)
    return y
