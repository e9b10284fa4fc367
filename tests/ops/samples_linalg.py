"""Matrix decompositions and solves (``converter/lowering/ops/linalg_decomp.py``).

Singular/eigen vectors are compared through sign-invariant values (``|U|``, ``Q @ R``),
as they are unique only up to sign.
"""

from __future__ import annotations

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
F32 = torch.float32
TOL = {F32: (1e-4, 1e-4)}


def _spd(n: int, batch: tuple = (), seed: int = 0) -> torch.Tensor:
    m = make(batch + (n, n), seed=seed)
    return m @ m.mT + n * torch.eye(n)


def _lu_solve(a, b, left=True, adjoint=False):
    lu, piv, _ = aten.linalg_lu_factor_ex(a)
    return aten.linalg_lu_solve(lu, piv, b, left=left, adjoint=adjoint)


def _qr(a, mode="reduced"):
    q, r = aten.linalg_qr(a, mode)
    return r.abs() if mode == "r" else (q @ r, r.abs())


def _svd(a, full_matrices=False, compute_uv=True):
    u, s, vh = aten._linalg_svd(a, full_matrices, compute_uv)
    return (u.abs(), s, vh.abs()) if compute_uv else s


def _eigh(a, uplo="L"):
    w, v = aten._linalg_eigh(a, uplo)
    return w, v.abs()


def _eig(a):
    w, v = aten.linalg_eig(a)
    return w, v.abs()  # each eigenvector is unique up to a complex phase, which LAPACK builds may choose apart


def _cholesky(a, upper=False, info_only=False):
    out, info = aten.linalg_cholesky_ex(a, upper=upper)
    return info if info_only else (out, info)


def _symmetric(n: int, batch: tuple = (), seed: int = 0, small_diagonal: bool = False) -> torch.Tensor:
    m = make(batch + (n, n), torch.float64, seed=seed)
    m = m + m.mT
    if small_diagonal:  # Bunch-Kaufman then takes 2x2 blocks and interchanges
        m.diagonal(dim1=-2, dim2=-1).mul_(0.01)
    return m


def _ldl_solve(a, b):
    ld, piv, _ = aten.linalg_ldl_factor_ex(a)
    return aten.linalg_ldl_solve(ld, piv, b)


NOT_PD = torch.tensor([[4.0, 2.0, 0.0], [2.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # leading minor of order 2 is 0

OPS = [
    OpInfo("linalg_ldl_factor_ex", aten.linalg_ldl_factor_ex, (aten.linalg_ldl_factor_ex.default,),
           lambda dt: [Sample((_symmetric(5),)), Sample((_symmetric(6, small_diagonal=True),), name="pivoting"),
                       Sample((_symmetric(4, (2,), seed=1, small_diagonal=True),), name="batched"),
                       Sample((torch.zeros(3, 3, dtype=torch.float64),), name="singular")],
           dtypes=(torch.float64,)),
    OpInfo("linalg_ldl_solve", _ldl_solve, (aten.linalg_ldl_factor_ex.default, aten.linalg_ldl_solve.default),
           lambda dt: [Sample((_symmetric(6, small_diagonal=True), make((6, 2), torch.float64, seed=2))),
                       Sample((_symmetric(4, (2,), seed=1, small_diagonal=True), make((2, 4, 3), torch.float64, seed=3)),
                              name="batched")], dtypes=(torch.float64,)),
    OpInfo("linalg_lu_factor_ex", aten.linalg_lu_factor_ex, (aten.linalg_lu_factor_ex.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt),), name="batched"),
                       Sample((make((3, 5), dt),), name="wide")], tol=TOL),
    OpInfo("linalg_lu_solve", _lu_solve, (aten.linalg_lu_factor_ex.default, aten.linalg_lu_solve.default),
           lambda dt: [Sample((make((4, 4), dt), make((4, 2), dt, seed=1))),
                       Sample((make((2, 3, 3), dt), make((2, 3, 2), dt, seed=1)), {"adjoint": True}, name="adjoint"),
                       Sample((make((3, 3), dt), make((2, 3), dt, seed=1)), {"left": False}, name="right"),
                       Sample((make((3, 3), dt), make((2, 3), dt, seed=1)), {"left": False, "adjoint": True},
                              name="right_adjoint")], tol=TOL),
    OpInfo("linalg_solve_ex", lambda a, b, left=True: aten._linalg_solve_ex(a, b, left=left),
           (aten._linalg_solve_ex.default,),
           lambda dt: [Sample((make((4, 4), dt), make((4, 2), dt, seed=1))),
                       Sample((make((2, 3, 3), dt), make((2, 3), dt, seed=1)), name="batched_vectors"),
                       Sample((make((3, 3), dt), make((2, 3), dt, seed=1)), {"left": False}, name="right"),
                       Sample((torch.tensor([[1.0, 2.0], [2.0, 4.0]]), torch.ones(2, 1)), name="singular_info")],
           tol=TOL),
    OpInfo("linalg_det", aten._linalg_det, (aten._linalg_det.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt, seed=2),), name="batched")], tol=TOL),
    OpInfo("linalg_slogdet", torch.linalg.slogdet, (aten._linalg_slogdet.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt, seed=2),), name="batched"),
                       Sample((-_spd(3),), name="negative_det")], tol=TOL),
    OpInfo("linalg_inv_ex", aten.linalg_inv_ex, (aten.linalg_inv_ex.default,),
           lambda dt: [Sample((_spd(4),)), Sample((make((2, 3, 3), dt),), name="batched"),
                       Sample((torch.tensor([[1.0, 2.0], [2.0, 4.0]]),), name="singular_info")], tol=TOL),
    OpInfo("linalg_cholesky_ex", _cholesky, (aten.linalg_cholesky_ex.default,),
           lambda dt: [Sample((_spd(4),)), Sample((_spd(3, (2,)),), {"upper": True}, name="upper_batched"),
                       Sample((NOT_PD,), {"info_only": True}, name="not_pd_info")], tol=TOL),
    OpInfo("linalg_solve_triangular", torch.linalg.solve_triangular, (aten.linalg_solve_triangular.default,),
           lambda dt: [Sample((torch.linalg.cholesky(_spd(4)), make((4, 2), dt, seed=1)), {"upper": False}),
                       Sample((torch.linalg.cholesky(_spd(3)).mT, make((2, 2, 3), dt, seed=1)),
                              {"upper": True, "left": False}, name="upper_right_broadcast"),
                       Sample((torch.linalg.cholesky(_spd(3)), make((3, 1), dt, seed=1)),
                              {"upper": False, "unitriangular": True}, name="unitriangular")], tol=TOL),
    OpInfo("linalg_qr", _qr, (aten.linalg_qr.default,),
           lambda dt: [Sample((make((5, 3), dt),)), Sample((make((2, 3, 4), dt),), name="wide_batched"),
                       Sample((make((4, 3), dt),), {"mode": "complete"}, name="complete"),
                       Sample((make((4, 3), dt),), {"mode": "r"}, name="r")], tol=TOL),
    OpInfo("linalg_svd", _svd, (aten._linalg_svd.default,),
           lambda dt: [Sample((make((5, 3), dt),)), Sample((make((2, 3, 4), dt),), name="wide_batched"),
                       Sample((make((3, 3), dt),), {"full_matrices": True}, name="full_square"),
                       Sample((make((4, 6), dt),), {"compute_uv": False}, name="values")], tol=TOL),
    OpInfo("linalg_pinv", torch.linalg.pinv, (aten.linalg_pinv.atol_rtol_tensor,),
           lambda dt: [Sample((make((5, 3), dt),)), Sample((make((2, 3, 4), dt),), name="wide_batched"),
                       Sample((torch.tensor([[1.0, 2.0], [2.0, 4.0]]),), name="rank_deficient"),
                       Sample((make((4, 3), dt),), {"atol": 2.0}, name="atol"),
                       Sample((make((4, 3), dt),), {"rtol": 0.5}, name="rtol"),
                       Sample((_spd(3) - 5 * torch.eye(3),), {"hermitian": True}, name="hermitian")], tol=TOL),
    OpInfo("cholesky", lambda a, upper=False: torch.cholesky(a, upper=upper), (aten.cholesky.default,),
           lambda dt: [Sample((_spd(4),)), Sample((_spd(3, (2,)),), {"upper": True}, name="upper_batched")], tol=TOL),
    OpInfo("cholesky_solve", torch.cholesky_solve, (aten.cholesky_solve.default,),
           lambda dt: [Sample((make((4, 2), dt, seed=1), torch.linalg.cholesky(_spd(4)))),
                       Sample((make((2, 3, 2), dt, seed=1), torch.linalg.cholesky(_spd(3, (2,))).mH, True),
                              name="upper_batched"),
                       Sample((make((2, 3, 1), dt, seed=1), torch.linalg.cholesky(_spd(3))), name="broadcast")],
           tol=TOL),
    OpInfo("cholesky_inverse", torch.cholesky_inverse, (aten.cholesky_inverse.default,),
           lambda dt: [Sample((torch.linalg.cholesky(_spd(4)),)),
                       Sample((torch.linalg.cholesky(_spd(3)).mH, True), name="upper")], tol=TOL),
    OpInfo("lu_unpack", lambda a, *flags: torch.lu_unpack(*aten.linalg_lu_factor_ex(a)[:2], *flags),
           (aten.lu_unpack.default, aten.linalg_lu_factor_ex.default),
           lambda dt: [Sample((make((4, 3), dt),)), Sample((make((2, 3, 5), dt, seed=1),), name="wide_batched"),
                       Sample((make((4, 4), dt, seed=2), False, True), name="pivots_only"),
                       Sample((make((4, 4), dt, seed=3), True, False), name="data_only")], tol=TOL),
    OpInfo("linalg_lu", torch.linalg.lu, (aten.linalg_lu.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 5), dt, seed=1),), name="wide_batched"),
                       Sample((make((5, 3), dt, seed=2),), name="tall")], tol=TOL),
    OpInfo("triangular_solve", torch.triangular_solve, (aten.triangular_solve.default,),
           lambda dt: [Sample((make((4, 2), dt, seed=1), torch.linalg.cholesky(_spd(4)).mT)),
                       Sample((make((3, 2), dt, seed=1), torch.linalg.cholesky(_spd(3, (2,))), False, True),
                              name="lower_transpose_broadcast"),
                       Sample((make((3, 1), dt, seed=1), torch.linalg.cholesky(_spd(3)).mT, True, False, True),
                              name="unitriangular")], tol=TOL),
    OpInfo("linalg_householder_product", torch.linalg.householder_product, (aten.linalg_householder_product.default,),
           lambda dt: [Sample(torch.geqrf(make((5, 3), dt))), Sample(torch.geqrf(make((2, 4, 4), dt, seed=1)),
                                                                    name="square_batched")], tol=TOL),
    OpInfo("ormqr", torch.ormqr, (aten.ormqr.default,),
           lambda dt: [Sample((*torch.geqrf(make((5, 3), dt)), make((5, 2), dt, seed=2))),
                       Sample((*torch.geqrf(make((2, 4, 4), dt, seed=1)), make((2, 3, 4), dt, seed=2), False, True),
                              name="right_transpose_batched")], tol=TOL),
    OpInfo("linalg_matrix_exp", torch.linalg.matrix_exp, (aten.linalg_matrix_exp.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt, seed=1) * 3,), name="batched_scaled"),
                       Sample((make((3, 3), dt, seed=2) - make((3, 3), dt, seed=2).mT,), name="skew")],
           dtypes=(torch.float32, torch.float64), tol=TOL),
    OpInfo("geqrf", torch.geqrf, (aten.geqrf.default,),
           lambda dt: [Sample((make((5, 3), dt),)), Sample((make((2, 3, 4), dt, seed=1),), name="wide_batched")],
           dtypes=(torch.float32, torch.float64), tol=TOL),
    OpInfo("linalg_eig", _eig, (aten.linalg_eig.default,),
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt, seed=1),), name="batched")],
           dtypes=(torch.float32, torch.float64), tol=TOL),
    OpInfo("linalg_eigvals", torch.linalg.eigvals, (aten.linalg_eig.default,),  # capture decomposes it into eig
           lambda dt: [Sample((make((4, 4), dt),)), Sample((make((2, 3, 3), dt, seed=1),), name="batched")],
           tol=TOL),
    OpInfo("linalg_eigh", _eigh, (aten._linalg_eigh.default,),
           lambda dt: [Sample((_spd(4),)), Sample((_spd(3, (2,), seed=3),), {"uplo": "U"}, name="upper_batched")],
           tol=TOL),
]
