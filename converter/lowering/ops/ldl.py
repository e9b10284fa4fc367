"""Symmetric indefinite factorization: ``linalg_ldl_factor_ex`` and ``linalg_ldl_solve``.

``torch.linalg.ldl_factor`` is LAPACK's ``sytrf`` with ``uplo='L'``: Bunch-Kaufman diagonal
pivoting, ``A = P L D Lᵀ Pᵀ`` with ``D`` made of 1x1 and 2x2 blocks. The result keeps LAPACK's
compact form, as torch's does: ``LD`` holds ``D``'s blocks on and below the diagonal and the
multipliers of ``L`` below them (the upper triangle is zero), and ``pivots`` are LAPACK's 1-based
``int32`` ``ipiv`` (``k`` for a 1x1 block whose row ``k`` was swapped in, ``-k`` on both rows of a
2x2 block). The factorization here is the unblocked ``sytf2`` algorithm step by step (a
``while`` loop: a step takes one or two columns), so the pivots are LAPACK's for the same
input; ``ldl_solve`` replays ``sytrs`` on them. Real matrices only (``hermitian`` changes
nothing for them); ``info`` is the first exactly zero pivot (1-based), else 0.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.ops.linalg_decomp import _batched
from converter.lowering.registry import lowering

aten = torch.ops.aten
_ALPHA = (1 + math.sqrt(17)) / 8  # Bunch-Kaufman's growth bound


def _real(op, ctx, x) -> None:
    if jnp.iscomplexobj(x):
        raise UnsupportedOpError(str(op), "tpu", ctx.location, reason="complex LDL factorizations are not supported")


def _factor(a):
    """``(LD, ipiv, info)`` of one symmetric matrix (its lower triangle is read)."""
    n = a.shape[-1]
    a = jnp.tril(a) + jnp.swapaxes(jnp.tril(a, -1), -1, -2)  # work on the full symmetric matrix
    idx = jnp.arange(n)

    def step(state):
        a, ipiv, info, k = state
        below = idx > k
        col = jnp.where(below, jnp.abs(a[:, k]), -1.0)
        imax = jnp.argmax(col)
        colmax = jnp.where(k < n - 1, col[imax], 0.0)
        absakk = jnp.abs(a[k, k])
        row = jnp.where((idx >= k) & (idx != imax), jnp.abs(a[imax]), -1.0)
        rowmax = jnp.max(row)
        one_no_swap = (absakk >= _ALPHA * colmax) | (absakk * rowmax >= _ALPHA * colmax * colmax)
        one_swap = jnp.abs(a[imax, imax]) >= _ALPHA * rowmax
        singular = jnp.maximum(absakk, colmax) == 0
        two = ~singular & ~one_no_swap & ~one_swap
        kp = jnp.where(singular | one_no_swap, k, imax)
        kstep = jnp.where(two, 2, 1)
        kk = k + kstep - 1
        # swap rows and columns kk and kp of the trailing block (earlier columns of L stay)
        perm = jnp.where(idx == kk, kp, jnp.where(idx == kp, kk, idx))
        trailing = (idx[:, None] >= k) & (idx[None, :] >= k)
        a = jnp.where(trailing, a[perm][:, perm], a)
        # eliminate column k (1x1) or columns k, k+1 (2x2) from the trailing block
        d = a[k, k]
        x1 = jnp.where(below, a[:, k], 0.0)
        d1 = jnp.where(singular, 1.0, d)
        upd1 = jnp.outer(x1, x1) / d1
        w1 = x1 / d1
        below2 = idx > k + 1
        b, c = a[jnp.minimum(k + 1, n - 1), k], a[jnp.minimum(k + 1, n - 1), jnp.minimum(k + 1, n - 1)]
        det = jnp.where(two, d * c - b * b, 1.0)
        xa = jnp.where(below2, a[:, k], 0.0)
        xb = jnp.where(below2, a[:, jnp.minimum(k + 1, n - 1)], 0.0)
        wa = (c * xa - b * xb) / det  # X D⁻¹, D = [[d, b], [b, c]]
        wb = (d * xb - b * xa) / det
        upd2 = jnp.outer(wa, xa) + jnp.outer(wb, xb)
        rest1 = below[:, None] & below[None, :]
        rest2 = below2[:, None] & below2[None, :]
        one = ~two & ~singular
        a = jnp.where(one & rest1, a - upd1, jnp.where(two & rest2, a - upd2, a))
        a = a.at[:, k].set(jnp.where(one & below, w1, jnp.where(two & below2, wa, a[:, k])))
        k1 = jnp.minimum(k + 1, n - 1)
        a = a.at[:, k1].set(jnp.where(two & below2, wb, a[:, k1]))
        piv = (kp + 1).astype(jnp.int32)
        ipiv = ipiv.at[k].set(jnp.where(two, -piv, piv))
        ipiv = ipiv.at[k1].set(jnp.where(two, -piv, ipiv[k1]))
        info = jnp.where((info == 0) & singular, (k + 1).astype(jnp.int32), info)
        return a, ipiv, info, k + kstep

    init = (a, jnp.zeros(n, jnp.int32), jnp.zeros((), jnp.int32), jnp.zeros((), jnp.int32))
    a, ipiv, info, _ = jax.lax.while_loop(lambda s: s[3] < n, step, init)
    return jnp.tril(a), ipiv, info


def _swap_rows(b, i, j):
    ri, rj = b[i], b[j]
    return b.at[i].set(rj).at[j].set(ri)


def _solve(ld, ipiv, b):
    """``sytrs`` (lower): ``X`` with ``A X = B`` for one factorization and one right-hand side block."""
    n = ld.shape[-1]
    idx = jnp.arange(n)

    def forward(state):  # L D X = B, with the interchanges
        b, k = state
        two = ipiv[k] < 0
        k1 = jnp.minimum(k + 1, n - 1)
        kp = jnp.abs(ipiv[k]) - 1
        b = _swap_rows(b, jnp.where(two, k1, k), kp)
        below = jnp.where(two, idx > k + 1, idx > k)[:, None]
        b = b - jnp.where(below, jnp.outer(ld[:, k], b[k]), 0.0)
        b = b - jnp.where(two & below, jnp.outer(ld[:, k1], b[k1]), 0.0)
        d, off, c = ld[k, k], ld[k1, k], ld[k1, k1]
        det = d * c - off * off
        bk, bk1 = b[k], b[k1]
        b = jnp.where(two, b.at[k].set((c * bk - off * bk1) / det).at[k1].set((d * bk1 - off * bk) / det),
                      b.at[k].set(bk / d))
        return b, k + jnp.where(two, 2, 1)

    def backward(state):  # Lᵀ X = B, undoing the interchanges
        b, k = state
        two = ipiv[k] < 0
        k0 = jnp.maximum(k - 1, 0)
        below = (idx > k)[:, None]
        b = b.at[k].add(-jnp.sum(jnp.where(below, ld[:, k][:, None] * b, 0.0), axis=0))
        b = b.at[k0].add(jnp.where(two, -jnp.sum(jnp.where(below, ld[:, k0][:, None] * b, 0.0), axis=0), 0.0))
        b = _swap_rows(b, k, jnp.abs(ipiv[k]) - 1)
        return b, k - jnp.where(two, 2, 1)

    b, _ = jax.lax.while_loop(lambda s: s[1] < n, forward, (b, jnp.zeros((), jnp.int32)))
    b, _ = jax.lax.while_loop(lambda s: s[1] >= 0, backward, (b, jnp.asarray(n - 1, jnp.int32)))
    return b


def _over_batch(fn, *args):
    """``fn`` on each matrix of the leading (batch) dims of ``args``."""
    for _ in range(args[0].ndim - 2):
        fn = jax.vmap(fn)
    return fn(*args)


@lowering(aten.linalg_ldl_factor_ex.default)
def lower_linalg_ldl_factor_ex_default(ctx, self, *, hermitian=False, check_errors=False):
    """linalg_ldl_factor_ex(Tensor self, *, bool hermitian=False, bool check_errors=False) -> (Tensor LD, Tensor pivots, Tensor info)

    See the module docstring. Emits a ``while`` loop of masked rank-1/rank-2 updates per matrix.

    Raises:
        UnsupportedOpError: a complex matrix.
    """  # noqa: E501 (the first line is the exact schema)
    _real(aten.linalg_ldl_factor_ex.default, ctx, self)
    if self.shape[-1] == 0:
        return self, jnp.zeros(self.shape[:-1], jnp.int32), jnp.zeros(self.shape[:-2], jnp.int32)
    return _over_batch(_factor, self)


@lowering(aten.linalg_ldl_solve.default)
def lower_linalg_ldl_solve_default(ctx, LD, pivots, B, *, hermitian=False):
    """linalg_ldl_solve(Tensor LD, Tensor pivots, Tensor B, *, bool hermitian=False) -> Tensor

    LAPACK's ``sytrs`` on ``ldl_factor``'s compact result: the interchanges and the block
    solves forward, then ``Lᵀ`` backward (two ``while`` loops), batched over leading dims.

    Raises:
        UnsupportedOpError: complex operands.
    """
    _real(aten.linalg_ldl_solve.default, ctx, LD)
    ld, b = _batched(LD, B)
    piv = jnp.broadcast_to(pivots.astype(jnp.int32), ld.shape[:-1])
    if LD.shape[-1] == 0:
        return b
    return _over_batch(_solve, ld, piv, b)
