"""Matrix decompositions and solves: LU (factor, solve, det, slogdet), Cholesky, QR, SVD,
symmetric and general eigendecomposition (``linalg_eig``: CPU backend only, as in JAX), compact QR
(``geqrf``), inverse, pseudo-inverse, triangular solve, matrix exponential, and the
Cholesky-factor ops (cholesky, cholesky_solve, cholesky_inverse), LU unpacking (lu_unpack, linalg_lu) and
the deprecated triangular_solve, Householder products (linalg_householder_product, ormqr).

These are the ops ``torch.linalg`` reaches after torch's own dispatch (``linalg.solve`` →
``_linalg_solve_ex``, ``linalg.det`` → ``_linalg_det``, …), batched over leading dims.
They lower to JAX's ``lax.linalg`` (LAPACK on CPU, XLA's own on TPU/GPU); LU pivots follow
LAPACK's 1-based ``int32`` convention, as torch's do, so torch's backward formulas (which
reuse the saved LU and pivots) run on them. The ``_ex`` variants' ``info`` is zero (a data-
dependent error check cannot stop a compiled program: torch checks ``info`` outside the
op, with ``_linalg_check_errors``) except where LAPACK's is cheap to give: a zero pivot
(singular matrix) for inverse and solve, a failed order for Cholesky. Eigenvectors and singular vectors are unique only up to sign (or rotation
within repeated values), as in torch.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.registry import lowering

aten = torch.ops.aten
lax_linalg = jax.lax.linalg


def _empty(dtype):
    return jnp.zeros((0,), dtype)


def _batched(a, b):
    """``a`` and ``b`` (stacks of matrices) broadcast to their common batch dims, ``b`` in ``a``'s dtype."""
    batch = jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return jnp.broadcast_to(a, batch + a.shape[-2:]), jnp.broadcast_to(b, batch + b.shape[-2:]).astype(a.dtype)


def _lu(a):
    """``(LU, 0-based pivots)`` of square or rectangular matrices (partial pivoting)."""
    lu, piv, _ = lax_linalg.lu(a)
    return lu, piv


def _lu_solve(lu, piv0, b, left=True, adjoint=False):
    """``A X = B`` (``left``) or ``X A = B`` from ``A``'s LU; ``adjoint`` solves with ``A^H``."""
    batch = jnp.broadcast_shapes(lu.shape[:-2], b.shape[:-2])
    lu = jnp.broadcast_to(lu, batch + lu.shape[-2:])
    piv0 = jnp.broadcast_to(piv0, batch + piv0.shape[-1:])
    b = jnp.broadcast_to(b, batch + b.shape[-2:])
    solve = jax.scipy.linalg.lu_solve
    if left:
        return solve((lu, piv0), b, trans=2 if adjoint else 0)
    # X A = B  <=>  A^T X^T = B^T;  X A^H = B  <=>  A conj(X)^T = conj(B)^T
    bt = jnp.swapaxes(b, -1, -2)
    if adjoint:
        return jnp.conj(jnp.swapaxes(solve((lu, piv0), jnp.conj(bt), trans=0), -1, -2))
    return jnp.swapaxes(solve((lu, piv0), bt, trans=1), -1, -2)


def _singular_info(lu):
    """LAPACK's getrf ``info``: the 1-based index of the first zero on U's diagonal, else 0."""
    if lu.shape[-1] == 0 or lu.shape[-2] == 0:  # empty matrices: nothing is singular
        return jnp.zeros(lu.shape[:-2], jnp.int32)
    zero = jnp.diagonal(lu, axis1=-2, axis2=-1) == 0
    return jnp.where(jnp.any(zero, axis=-1), jnp.argmax(zero, axis=-1) + 1, 0).astype(jnp.int32)


def _parity(piv0):
    """``(-1)^(number of row swaps)`` of 0-based LAPACK pivots."""
    swaps = jnp.sum(piv0 != jnp.arange(piv0.shape[-1], dtype=piv0.dtype), axis=-1)
    return jnp.where(swaps % 2 == 0, 1, -1)


@lowering(aten.linalg_lu_factor_ex.default)
def lower_linalg_lu_factor_ex_default(ctx, A, *, pivot=True, check_errors=False):
    """linalg_lu_factor_ex(Tensor A, *, bool pivot=True, bool check_errors=False) -> (Tensor LU, Tensor pivots, Tensor info)

    ``lax.linalg.lu`` (partial pivoting); pivots 1-based ``int32`` as LAPACK's.
    """
    lu, piv = _lu(A)
    return lu, (piv + 1).astype(jnp.int32), _singular_info(lu)


@lowering(aten.linalg_lu_solve.default)
def lower_linalg_lu_solve_default(ctx, LU, pivots, B, *, left=True, adjoint=False):
    """linalg_lu_solve(Tensor LU, Tensor pivots, Tensor B, *, bool left=True, bool adjoint=False) -> Tensor

    Row permutation from the pivots, then two triangular solves (``lax.linalg.lu_solve``).
    """
    return _lu_solve(LU, pivots.astype(jnp.int32) - 1, B.astype(LU.dtype), left, adjoint)


@lowering(aten._linalg_solve_ex.default)
def lower__linalg_solve_ex_default(ctx, A, B, *, left=True, check_errors=False):
    """_linalg_solve_ex(Tensor A, Tensor B, *, bool left=True, bool check_errors=False) -> (Tensor result, Tensor LU, Tensor pivots, Tensor info)

    LU factorization, then the solve; ``B`` of one dim fewer than ``A`` (matching its batch)
    is a batch of vectors, as in torch. Returns the LU and pivots for the backward.
    """
    lu, piv = _lu(A)
    vector = B.ndim == 1 or (B.ndim == A.ndim - 1 and B.shape == A.shape[:-1])
    b = B[..., None] if vector else B
    x = _lu_solve(lu, piv, b.astype(A.dtype), left)
    return (x[..., 0] if vector else x), lu, (piv + 1).astype(jnp.int32), _singular_info(lu)


def _factored(ctx, A):
    """The matrix whose LU ``_linalg_det``/``_linalg_slogdet`` return (their backward solves with it):
    PyTorch factors ``A^T`` when ``A`` is real and contiguous (row-major: ``A^T`` is LAPACK's
    column-major layout) and ``A`` itself otherwise (complex, or a strided view such as ``W.mT``).
    A traced graph tells from its input's recorded strides; the eager device passes a real
    non-contiguous input as its transpose made contiguous (``tpu_runtime.adjusted``), so ``A^T``."""
    if jnp.iscomplexobj(A):
        return A
    node = ctx.node
    val = node.args[0].meta.get("val") if node is not None and node.args and hasattr(node.args[0], "meta") else None
    if isinstance(val, torch.Tensor) and not val.is_contiguous():
        return A
    return jnp.swapaxes(A, -1, -2)


@lowering(aten._linalg_det.default)
def lower__linalg_det_default(ctx, A):
    """_linalg_det(Tensor A) -> (Tensor result, Tensor LU, Tensor pivots)

    Product of the LU diagonal times the pivots' permutation sign. The LU returned is the one
    torch's backward expects (:func:`_factored`): of ``A^T`` for a real row-major ``A``, else of ``A``.
    """
    lu, piv = _lu(_factored(ctx, A))
    det = jnp.prod(jnp.diagonal(lu, axis1=-2, axis2=-1), axis=-1) * _parity(piv).astype(A.dtype)
    return det, lu, (piv + 1).astype(jnp.int32)


@lowering(aten._linalg_slogdet.default)
def lower__linalg_slogdet_default(ctx, A):
    """_linalg_slogdet(Tensor A) -> (Tensor sign, Tensor logabsdet, Tensor LU, Tensor pivots)

    From the LU diagonal: sign = permutation sign × signs of the diagonal, logabsdet = Σ log|dᵢ|;
    the LU is the one torch's backward expects (:func:`_factored`).
    """
    lu, piv = _lu(_factored(ctx, A))
    d = jnp.diagonal(lu, axis1=-2, axis2=-1)
    sign = _parity(piv).astype(A.dtype) * jnp.prod(jnp.sign(d), axis=-1)
    return sign, jnp.sum(jnp.log(jnp.abs(d)), axis=-1), lu, (piv + 1).astype(jnp.int32)


@lowering(aten.linalg_inv_ex.default)
def lower_linalg_inv_ex_default(ctx, A, *, check_errors=False):
    """linalg_inv_ex(Tensor A, *, bool check_errors=False) -> (Tensor inverse, Tensor info)

    LU factorization, then a solve against the identity; ``info`` flags a singular matrix
    as LAPACK's (torch's ``linalg.inv`` then raises).
    """
    lu, piv = _lu(A)
    eye = jnp.broadcast_to(jnp.eye(A.shape[-1], dtype=A.dtype), A.shape)
    return _lu_solve(lu, piv, eye), _singular_info(lu)


@lowering(aten.linalg_cholesky_ex.default)
def lower_linalg_cholesky_ex_default(ctx, self, *, upper=False, check_errors=False):
    """linalg_cholesky_ex(Tensor self, *, bool upper=False, bool check_errors=False) -> (Tensor L, Tensor info)

    ``lax.linalg.cholesky`` (lower); ``upper`` gives its conjugate transpose. A matrix that is
    not positive definite gives NaNs and ``info`` = the first failing order (torch: the same
    order, with an undefined factor).
    """
    if self.shape[-1] == 0:  # empty matrices factor trivially
        return self, jnp.zeros(self.shape[:-2], jnp.int32)
    L = lax_linalg.cholesky(self, symmetrize_input=False)
    failed = ~jnp.all(jnp.isfinite(L), axis=(-2, -1))
    flat = self.reshape((-1,) + self.shape[-2:])
    info = jax.lax.cond(jnp.any(failed), lambda m: jax.vmap(_cholesky_info)(m),
                        lambda m: jnp.zeros(m.shape[:1], jnp.int32), flat).reshape(self.shape[:-2])
    return (jnp.conj(jnp.swapaxes(L, -1, -2)) if upper else L), info


def _cholesky_info(a):
    """LAPACK potrf's ``info`` for one matrix: the order of the first leading minor that is not
    positive definite, else 0 (a column-by-column Cholesky of the lower triangle; run only
    when the factorization failed)."""
    n = a.shape[-1]
    pos = jnp.arange(n)

    def step(j, carry):  # (rows and columns picked by masks, not indexed: no gather or scatter to export)
        L, info = carry
        at_j = pos == j
        row = jnp.where(pos < j, jnp.sum(jnp.where(at_j[:, None], L, 0), axis=0), 0)
        a_col = jnp.sum(jnp.where(at_j[None, :], a, 0), axis=1)
        d = jnp.sum(jnp.where(at_j, a_col, 0)) - jnp.sum(row * row)
        bad = ~(d > 0)
        info = jnp.where((info == 0) & bad, j + 1, info)
        ljj = jnp.sqrt(jnp.where(bad, 1, d))
        col = jnp.where(pos > j, (a_col - jnp.sum(L * row, axis=1)) / ljj, jnp.where(at_j, ljj, 0))
        return jnp.where(at_j[None, :], col[:, None], L), info

    return jax.lax.fori_loop(0, n, step, (jnp.zeros_like(a), jnp.int32(0)))[1]


@lowering(aten.linalg_solve_triangular.default)
def lower_linalg_solve_triangular_default(ctx, self, B, *, upper, left=True, unitriangular=False):
    """linalg_solve_triangular(Tensor self, Tensor B, *, bool upper, bool left=True, bool unitriangular=False) -> Tensor

    ``lax.linalg.triangular_solve`` (``A X = B``, or ``X A = B`` with ``left=False``).
    """
    a, b = _batched(self, B)
    return lax_linalg.triangular_solve(a, b, left_side=left, lower=not upper, unit_diagonal=unitriangular)


@lowering(aten.linalg_qr.default)
def lower_linalg_qr_default(ctx, A, mode="reduced"):
    """linalg_qr(Tensor A, str mode='reduced') -> (Tensor Q, Tensor R)

    Householder QR (``lax.linalg.qr``); ``mode='r'`` returns an empty Q, as torch.
    """
    if mode == "r":
        return _empty(A.dtype), lax_linalg.qr(A, full_matrices=False)[1]
    return lax_linalg.qr(A, full_matrices=mode == "complete")


@lowering(aten._linalg_svd.default)
def lower__linalg_svd_default(ctx, A, full_matrices=False, compute_uv=True, *, driver=None):
    """_linalg_svd(Tensor A, bool full_matrices=False, bool compute_uv=True, *, str? driver=None) -> (Tensor U, Tensor S, Tensor Vh)

    ``lax.linalg.svd``; without ``compute_uv``, U and Vh are empty, as torch's.
    """
    if not compute_uv:
        return _empty(A.dtype), lax_linalg.svd(A, full_matrices=False, compute_uv=False), _empty(A.dtype)
    u, s, vh = lax_linalg.svd(A, full_matrices=full_matrices, compute_uv=True)
    return u, s, vh


@lowering(aten._linalg_eigh.default)
def lower__linalg_eigh_default(ctx, A, UPLO="L", compute_v=True):
    """_linalg_eigh(Tensor A, str UPLO="L", bool compute_v=True) -> (Tensor eigenvalues, Tensor eigenvectors)

    ``lax.linalg.eigh`` of the ``UPLO`` triangle; eigenvalues ascending; without
    ``compute_v`` the eigenvectors are empty, as torch's.
    """
    v, w = lax_linalg.eigh(A, lower=UPLO == "L", symmetrize_input=False)
    return w, (v if compute_v else _empty(A.dtype))


@lowering(aten.linalg_pinv.atol_rtol_tensor)
def lower_linalg_pinv_atol_rtol_tensor(ctx, self, *, atol=None, rtol=None, hermitian=False):
    """linalg_pinv.atol_rtol_tensor(Tensor self, *, Tensor? atol=None, Tensor? rtol=None, bool hermitian=False) -> Tensor

    Moore-Penrose inverse from the SVD (``eigh`` when ``hermitian``): singular values at or
    below ``max(atol, rtol * σ_max)`` are dropped. Without tolerances ``rtol = eps * max(m, n)``;
    with only ``atol > 0``, ``rtol = 0`` (torch's rule).
    """
    m, n = self.shape[-2:]
    if m == 0 or n == 0:  # the pseudo-inverse of an empty matrix is empty, transposed
        return jnp.zeros(self.shape[:-2] + (n, m), self.dtype)
    eps = jnp.finfo(self.dtype).eps
    if rtol is None:
        default = jnp.asarray(eps * max(m, n), self.dtype)
        rtol = default if atol is None else jnp.where(atol > 0, jnp.zeros((), self.dtype), default)
    atol = jnp.zeros((), self.dtype) if atol is None else atol
    if hermitian:
        w, u = lax_linalg.eigh(self, lower=True, symmetrize_input=False)[::-1]
        mag = jnp.abs(w)
        tol = jnp.maximum(atol, rtol * jnp.max(mag, axis=-1))[..., None]
        inv = jnp.where(mag > tol, 1 / jnp.where(mag > tol, w, 1), 0)
        return (u * inv[..., None, :]) @ jnp.conj(jnp.swapaxes(u, -1, -2))
    u, s, vh = lax_linalg.svd(self, full_matrices=False, compute_uv=True)
    tol = jnp.maximum(atol, rtol * s[..., 0])[..., None]
    inv = jnp.where(s > tol, 1 / jnp.where(s > tol, s, 1), 0)
    return (jnp.conj(jnp.swapaxes(vh, -1, -2)) * inv[..., None, :]) @ jnp.conj(jnp.swapaxes(u, -1, -2))


@lowering(aten.linalg_matrix_exp.default)
def lower_linalg_matrix_exp_default(ctx, self):
    """linalg_matrix_exp(Tensor self) -> Tensor

    ``jax.scipy.linalg.expm`` (Padé approximant with scaling and squaring), batched over the
    leading dims. torch's backward (``linalg_matrix_exp_differential``) is the exponential of
    a block matrix, so gradients reuse this row. Half-precision inputs (which ``expm`` refuses) are
    computed in float32 and rounded once, as torch's CPU kernel accepts them.
    """
    if self.dtype in (jnp.bfloat16, jnp.float16):
        return jax.scipy.linalg.expm(self.astype(jnp.float32)).astype(self.dtype)
    return jax.scipy.linalg.expm(self)


@lowering(aten.cholesky.default)
def lower_cholesky_default(ctx, self, upper=False):
    """cholesky(Tensor self, bool upper=False) -> Tensor

    The deprecated ``torch.cholesky``: ``lax.linalg.cholesky`` (lower), or its conjugate
    transpose with ``upper``: :func:`lower_linalg_cholesky_ex_default`'s factor without its ``info``
    (NaNs where the matrix is not positive definite).
    """
    return lower_linalg_cholesky_ex_default(ctx, self, upper=upper)[0]


def _cholesky_solve(B, factor, upper):
    """``X = A⁻¹ B`` for ``A = L Lᴴ`` (``factor`` = L) or ``A = Uᴴ U`` (``upper``): two triangular
    solves, batch dims broadcast."""
    f, b = _batched(factor, B)
    solve = functools.partial(lax_linalg.triangular_solve, left_side=True, lower=not upper)
    adjoint = functools.partial(solve, transpose_a=True, conjugate_a=True)
    if upper:
        return solve(f, adjoint(f, b))
    return adjoint(f, solve(f, b))


@lowering(aten.cholesky_solve.default)
def lower_cholesky_solve_default(ctx, self, input2, upper=False):
    """cholesky_solve(Tensor self, Tensor input2, bool upper=False) -> Tensor

    Solves ``A X = self`` from ``A``'s Cholesky factor ``input2`` (lower ``L``, or upper ``U``
    with ``upper``): ``L Y = B`` then ``Lᴴ X = Y`` (``Uᴴ Y = B`` then ``U X = Y``).
    """
    return _cholesky_solve(self, input2, upper)


@lowering(aten.cholesky_inverse.default)
def lower_cholesky_inverse_default(ctx, self, upper=False):
    """cholesky_inverse(Tensor self, bool upper=False) -> Tensor

    ``A⁻¹`` from ``A``'s Cholesky factor: :func:`cholesky_solve` of the identity.
    """
    eye = jnp.broadcast_to(jnp.eye(self.shape[-1], dtype=self.dtype), self.shape)
    return _cholesky_solve(eye, self, upper)


def _unpack(lu, piv0, m: int):
    """``(P, L, U)`` with ``A = P L U`` from an LU factorization and its 0-based pivots."""
    k = min(lu.shape[-2], lu.shape[-1])
    L = jnp.tril(lu[..., :, :k], -1) + jnp.eye(m, k, dtype=lu.dtype)
    U = jnp.triu(lu[..., :k, :])
    perm = lax_linalg.lu_pivots_to_permutation(piv0, m)  # A[perm] = L U
    P = jnp.swapaxes(jax.nn.one_hot(perm, m, dtype=lu.dtype), -1, -2)
    return P, L, U


@lowering(aten.lu_unpack.default)
def lower_lu_unpack_default(ctx, LU_data, LU_pivots, unpack_data=True, unpack_pivots=True):
    """lu_unpack(Tensor LU_data, Tensor LU_pivots, bool unpack_data=True, bool unpack_pivots=True) -> (Tensor P, Tensor L, Tensor U)

    ``L`` (unit lower, ``m × k``), ``U`` (upper, ``k × n``) and the permutation matrix ``P``
    of LAPACK's 1-based pivots, so that ``A = P L U``; what is not unpacked is empty, as torch.
    """
    P, L, U = _unpack(LU_data, LU_pivots.astype(jnp.int32) - 1, LU_data.shape[-2])
    empty = _empty(LU_data.dtype)
    return (P if unpack_pivots else empty), (L if unpack_data else empty), (U if unpack_data else empty)


@lowering(aten.linalg_lu.default)
def lower_linalg_lu_default(ctx, A, *, pivot=True):
    """linalg_lu(Tensor A, *, bool pivot=True) -> (Tensor P, Tensor L, Tensor U)

    Partial-pivoting LU unpacked into ``A = P L U``.

    Raises:
        UnsupportedOpError: ``pivot=False`` (torch's CPU kernel refuses it too).
    """
    if not pivot:
        raise UnsupportedOpError(str(aten.linalg_lu.default), ctx.target, ctx.location,
                                 reason="LU without pivoting is not implemented (as on torch's CPU)")
    lu, piv = _lu(A)
    return _unpack(lu, piv, A.shape[-2])


@lowering(aten.triangular_solve.default)
def lower_triangular_solve_default(ctx, self, A, upper=True, transpose=False, unitriangular=False):
    """triangular_solve(Tensor self, Tensor A, bool upper=True, bool transpose=False, bool unitriangular=False) -> (Tensor solution, Tensor cloned_coefficient)

    The deprecated ``torch.triangular_solve``: ``op(A) X = self`` (``op`` transposes with
    ``transpose``), batch dims broadcast; also returns ``A`` broadcast, as torch.
    """
    a, b = _batched(A, self)
    x = lax_linalg.triangular_solve(a, b, left_side=True, lower=not upper, transpose_a=transpose,
                                    unit_diagonal=unitriangular)
    return x, a


@lowering(aten.linalg_householder_product.default)
def lower_linalg_householder_product_default(ctx, input, tau):
    """linalg_householder_product(Tensor input, Tensor tau) -> Tensor

    The first ``n`` columns of ``H_1 ⋯ H_k`` from the reflectors below ``input``'s diagonal
    (``lax.linalg.householder_product``; ``nn.utils.parametrizations.orthogonal``'s
    ``"householder"`` map).
    """
    return lax_linalg.householder_product(input, tau.astype(input.dtype))


@lowering(aten.ormqr.default)
def lower_ormqr_default(ctx, self, input2, input3, left=True, transpose=False):
    """ormqr(Tensor self, Tensor input2, Tensor input3, bool left=True, bool transpose=False) -> Tensor

    ``op(Q) · input3`` (``left``) or ``input3 · op(Q)``, ``Q`` the full ``m × m`` product of the
    reflectors in ``self`` / ``input2`` (as ``geqrf`` leaves them; ``op`` is the conjugate
    transpose with ``transpose``): the reflectors padded to ``m`` columns, then one product.
    """
    m, n = self.shape[-2:]
    full = jnp.concatenate([self, jnp.zeros(self.shape[:-1] + (m - n,), self.dtype)], axis=-1) if n < m else self
    q = lax_linalg.householder_product(full[..., :, :m], input2.astype(self.dtype))
    if transpose:
        q = jnp.conj(jnp.swapaxes(q, -1, -2))
    c = input3.astype(self.dtype)
    return q @ c if left else c @ q


@lowering(aten.geqrf.default)
def lower_geqrf_default(ctx, self):
    """geqrf(Tensor self) -> (Tensor a, Tensor tau)

    LAPACK's compact QR: ``R`` on and above the diagonal, the Householder reflectors below
    it, and their scales ``tau`` (``lax.linalg.geqrf``; what ``householder_product`` and
    ``ormqr`` take). JAX keeps the primitive out of its public API (``jax._src.lax.linalg``;
    jax is pinned).
    """
    from jax._src.lax.linalg import geqrf

    return geqrf(self)


@lowering(aten.linalg_eig.default)
def lower_linalg_eig_default(ctx, self):
    """linalg_eig(Tensor self) -> (Tensor eigenvalues, Tensor eigenvectors)

    The general (non-symmetric) eigendecomposition, complex for real input
    (``lax.linalg.eig``: LAPACK ``geev`` on CPU, as torch's CPU kernel; each eigenvector of
    unit norm). JAX implements it for the CPU backend only.
    """
    return tuple(lax_linalg.eig(self, compute_left_eigenvectors=False))
