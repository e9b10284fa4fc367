"""LU factorization and triangular solves for both exporters (:mod:`exporters.expansions` registers them).

Neither ONNX nor TFLite has a factorization or a triangular solve. For a matrix of at most :data:`MAX_UNROLLED`
rows (the 3×3 and 4×4 poses, homographies and covariances models invert) each step is written out with
elementwise ops, row selects and sums; a larger one runs the same steps as one ``while`` loop over the row
(:func:`_rows`: an ONNX ``Loop`` / LiteRT ``WHILE``, :mod:`exporters.loops`), the row a run-time index:

* ``lu``: Gaussian elimination with partial pivoting, as LAPACK's ``getrf`` (the pivot is the first entry of
  largest magnitude; a zero column leaves its multipliers zero), giving the packed factors, the pivot rows and
  the permutation (what ``torch.linalg.inv``/``solve``/``det``/``slogdet``/``lu_factor`` lower to);
* ``lu_pivots_to_permutation``: the pivots' row swaps applied to ``arange``;
* ``triangular_solve``: forward or back substitution (either side, transposed, unit diagonal);
* ``cholesky``: the lower factor, column by column.

Also here, as the other matrix product neither format has: ``ragged_dot``
(mixture-of-experts layers' grouped products), every row times every group with a mask.
"""

from __future__ import annotations

from typing import Any

import jax.numpy as jnp
from jax import lax as jlax
from jax._src.lax import lax as jax_lax
from jax._src.lax import linalg as lax_linalg
from jax.extend.core import primitives as lax

from exporters.rule_table import Unsupported

#: The most rows the factorization and solves are unrolled for (the op count grows as n² and n³).
MAX_UNROLLED = 16


def _at(x: Any, i: int, axis: int) -> Any:
    """``x``'s entry ``i`` (static) along ``axis``, by a slice: indexing a value with a dynamic batch dim
    became a gather, which LiteRT cannot take with symbolic dims."""
    return jlax.index_in_dim(x, i, axis % x.ndim, keepdims=False)


def _check(n: Any, what: str) -> int:
    if not isinstance(n, int):
        raise Unsupported(f"{what} of a matrix with a dynamic number of rows ({n})")
    return n


def _unrolled(n: int) -> bool:
    """Whether steps over ``n`` rows are written out (else: a loop)."""
    return n <= MAX_UNROLLED


def _rows(n: int, step: Any, state: Any, reverse: bool = False) -> Any:
    """``state`` after ``step(i, state)`` for ``i`` in ``range(n)`` (``reverse``: from ``n - 1`` down), as one
    ``while`` loop (a ``fori_loop`` of static bounds would be a ``scan``, unrolled by the exporters up to 64
    steps)."""
    def body(carry: tuple) -> tuple:
        k, st = carry
        return k + 1, step(n - 1 - k if reverse else k, st)

    return jlax.while_loop(lambda carry: carry[0] < n, body, (jnp.int32(0), state))[1]


def _row(x: Any, i: Any, axis: int) -> Any:
    """``x``'s entry ``i`` (a run-time index) along ``axis`` (a slice at a run-time start)."""
    return jlax.dynamic_index_in_dim(x, i, axis % x.ndim, keepdims=False)


def _swap_rows(x: Any, k: int, p: Any) -> Any:
    """``x`` with rows ``k`` (static) and ``p`` (per batch element) exchanged along axis -2 (or the last axis
    for a vector), by selects: exact for any values, inf and NaN included."""
    vector = x.ndim == p.ndim + 1
    rows = jnp.arange(x.shape[-1] if vector else x.shape[-2])
    at_p = rows == p[..., None]
    if not vector:
        at_p = at_p[..., None]
    row_k = (_at if isinstance(k, int) else _row)(x, k, -1 if vector else -2)
    row_p = jnp.sum(jnp.where(at_p, x, jnp.zeros_like(x)), axis=-1 if vector else -2, dtype=x.dtype)
    at_k = rows == k if vector else (rows == k)[:, None]
    picked_k = row_p[..., None] if vector else row_p[..., None, :]
    picked_p = row_k[..., None] if vector else row_k[..., None, :]
    return jnp.where(at_k, picked_k, jnp.where(at_p, picked_p, x)).astype(x.dtype)


def lu(a: Any, **_: Any) -> list:
    """``lu(a) -> (lu, pivots, permutation)`` for ``a`` of shape ``[..., m, n]``."""
    m, n = _check(a.shape[-2], "an LU factorization"), a.shape[-1]
    batch = a.shape[:-2]
    rows, cols = jnp.arange(m)[:, None], jnp.arange(n)[None, :]
    perm = jnp.broadcast_to(jnp.arange(m, dtype=jnp.int32), (*batch, m))

    def step(k: Any, a: Any, perm: Any, at: Any) -> tuple:
        column = jnp.where(jnp.arange(m) >= k, jnp.abs(at(a, k, -1)), -1)  # (rows above k are done)
        p = jnp.argmax(column, axis=-1).astype(jnp.int32)
        a, perm = _swap_rows(a, k, p), _swap_rows(perm, k, p)
        pivot = at(at(a, k, -1), k, -1)
        safe = jnp.where(pivot == 0, jnp.ones_like(pivot), pivot)
        factor = jnp.where((jnp.arange(m) > k) & (pivot[..., None] != 0), at(a, k, -1) / safe[..., None], 0)
        right = jnp.where(jnp.arange(n) > k, at(a, k, -2), 0)
        a = a - factor[..., :, None] * right[..., None, :]
        return jnp.where((rows > k) & (cols == k), factor[..., :, None], a), perm, p

    steps = min(m, n)
    if _unrolled(m):
        pivots = []
        for k in range(steps):
            a, perm, p = step(k, a, perm, _at)
            pivots.append(p)
        return [a, jnp.stack(pivots, axis=-1) if pivots else jnp.zeros((*batch, 0), jnp.int32), perm]

    def looped(k: Any, state: tuple) -> tuple:
        a, perm, pivots = state
        a, perm, p = step(k, a, perm, _row)
        return a, perm, jnp.where(jnp.arange(steps) == k, p[..., None], pivots)

    a, perm, pivots = _rows(steps, looped, (a, perm, jnp.zeros((*batch, steps), jnp.int32)))
    return [a, pivots, perm]


def lu_pivots_to_permutation(pivots: Any, *, permutation_size: int, **_: Any) -> Any:
    """The permutation of ``arange(permutation_size)`` the pivots' row swaps make."""
    perm = jnp.broadcast_to(jnp.arange(permutation_size, dtype=pivots.dtype), (*pivots.shape[:-1], permutation_size))
    n = _check(pivots.shape[-1], "a pivot permutation")
    if not _unrolled(n):
        return _rows(n, lambda k, perm: _swap_rows(perm, k, _row(pivots, k, -1)), perm)
    for k in range(n):
        perm = _swap_rows(perm, k, _at(pivots, k, -1))
    return perm


def triangular_solve(a: Any, b: Any, *, left_side: bool, lower: bool, transpose_a: bool, conjugate_a: bool,
                     unit_diagonal: bool, **_: Any) -> Any:
    """``x`` with ``op(a) x = b`` (``left_side``) or ``x op(a) = b``, ``a`` triangular, by substitution."""
    if conjugate_a and jnp.iscomplexobj(a):
        a = jnp.conj(a)
    if transpose_a:
        a, lower = jnp.swapaxes(a, -1, -2), not lower
    if not left_side:  # x a = b  ⇔  aᵀ xᵀ = bᵀ
        a, lower, b = jnp.swapaxes(a, -1, -2), not lower, jnp.swapaxes(b, -1, -2)
    n = _check(a.shape[-1], "a triangular solve")
    if not _unrolled(n):
        x = _rows(n, lambda i, x: _substitute(a, b, x, i, lower, unit_diagonal), jnp.zeros_like(b), reverse=not lower)
        return x if left_side else jnp.swapaxes(x, -1, -2)
    xs: list = [None] * n
    for i in (range(n) if lower else range(n - 1, -1, -1)):
        acc = _at(b, i, -2)
        for j in (range(i) if lower else range(i + 1, n)):
            acc = acc - _at(_at(a, i, -2), j, -1)[..., None] * xs[j]
        xs[i] = acc if unit_diagonal else acc / _at(_at(a, i, -2), i, -1)[..., None]
    x = jnp.stack(xs, axis=-2) if n else jnp.zeros_like(b)  # (an empty system: an empty solution)
    return x if left_side else jnp.swapaxes(x, -1, -2)


def _substitute(a: Any, b: Any, x: Any, i: Any, lower: bool, unit_diagonal: bool) -> Any:
    """``x`` with its row ``i`` solved from ``a``'s row ``i`` and the rows already solved (zeros elsewhere)."""
    row = _row(a, i, -2)
    idx = jnp.arange(a.shape[-1])
    done = jnp.where((idx < i) if lower else (idx > i), row, jnp.zeros_like(row))
    acc = _row(b, i, -2) - jnp.sum(done[..., :, None] * x, axis=-2)
    if not unit_diagonal:
        acc = acc / _row(row, i, -1)[..., None]
    return jnp.where((idx == i)[:, None], acc[..., None, :], x)


def cholesky(a: Any, **_: Any) -> Any:
    """The lower Cholesky factor ``l`` of ``a = l lᵀ`` (reading ``a``'s lower triangle), column by column
    (Cholesky–Banachiewicz); NaN from the first non-positive pivot on, as LAPACK's ``potrf`` leaves it for jax,
    whose callers mask it. Zeros above the diagonal."""
    n = _check(a.shape[-1], "a Cholesky factorization")
    rows = jnp.arange(n)
    if not _unrolled(n):
        def column(j: Any, factor: Any) -> Any:  # (columns j and on of ``factor`` are still zero)
            col = _row(a, j, -1) - jnp.sum(factor * _row(factor, j, -2)[..., None, :], axis=-1)
            new = jnp.where(rows >= j, col / jnp.sqrt(_row(col, j, -1))[..., None], jnp.zeros_like(col))
            return jnp.where(rows[None, :] == j, new[..., :, None], factor)

        return _rows(n, column, jnp.zeros_like(a))
    columns: list = []
    for j in range(n):
        col = _at(a, j, -1)
        for k, done in enumerate(columns):
            col = col - done * _at(done, j, -1)[..., None]  # l[:, k]·l[j, k]
        pivot = jnp.sqrt(_at(col, j, -1))[..., None]
        columns.append(jnp.where(rows >= j, col / pivot, jnp.zeros_like(col)))
    return jnp.stack(columns, axis=-1) if n else jnp.zeros_like(a)


def ragged_dot(lhs: Any, rhs: Any, group_sizes: Any, *, ragged_dot_dimension_numbers: Any,
               preferred_element_type: Any = None, group_offset: Any = None, **_: Any) -> Any:
    """``lax.ragged_dot_general`` in the form mixture-of-experts layers take (``F.grouped_mm``, transformers'
    grouped-matmul fallback): ``lhs`` (M, K) whose consecutive row groups of ``group_sizes`` go to experts
    ``rhs`` (G, K, N). Every row times every expert (M, G, N), each row's own expert kept by a mask of the
    group bounds (a cumulative sum), summed over G: G times the work of the grouped product, as JAX's own
    expansion off TPU. Rows past the last group are zero.

    Raises:
        Unsupported: another layout (ragged contracted or batch dimensions, a group offset)."""
    dims = ragged_dot_dimension_numbers
    (contract, batch) = dims.dot_dimension_numbers
    if (group_offset is not None or lhs.ndim != 2 or rhs.ndim != 3 or tuple(dims.lhs_ragged_dimensions) != (0,)
            or tuple(dims.rhs_group_dimensions) != (0,) or contract != ((1,), (1,)) or batch != ((), ())):
        raise Unsupported(f"ragged_dot_general with dimension numbers {dims} (exported: rows of a 2-D operand "
                          "grouped over a 3-D one's leading dimension, as F.grouped_mm's 2-D x 3-D case)")
    out_type = preferred_element_type or jnp.result_type(lhs.dtype, rhs.dtype)
    ends = jnp.cumsum(group_sizes.astype(jnp.int32))
    starts = ends - group_sizes.astype(jnp.int32)
    rows = jnp.arange(lhs.shape[0], dtype=jnp.int32)[:, None]
    mine = (rows >= starts[None, :]) & (rows < ends[None, :])  # (M, G)
    every = jlax.dot_general(lhs, rhs, (((1,), (1,)), ((), ())), precision=jlax.Precision.HIGHEST,
                             preferred_element_type=out_type)  # (M, G, N)
    return jnp.sum(jnp.where(mine[:, :, None], every, jnp.zeros((), every.dtype)), axis=1)


#: Primitive → expansion (merged into :data:`exporters.expansions.EXPANSIONS`).
LINALG_EXPANSIONS = {
    lax.lu_p: lu,
    lax_linalg.lu_pivots_to_permutation_p: lu_pivots_to_permutation,
    lax.triangular_solve_p: triangular_solve,
    lax.cholesky_p: cholesky,
    jax_lax.ragged_dot_general_p: ragged_dot,
}

__all__ = ["LINALG_EXPANSIONS", "MAX_UNROLLED", "cholesky", "lu", "lu_pivots_to_permutation", "ragged_dot",
           "triangular_solve"]
