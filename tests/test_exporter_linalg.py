"""Linear algebra through ONNX and LiteRT (``exporters/linalg_expansions.py``: LU with partial pivoting, triangular
solves and Cholesky unrolled up to 16 rows, a loop over the rows beyond; a per-platform ``cond`` taken on its CPU branch,
any other ``cond`` as both branches and a select): inverses, determinants, solves, factorizations and their
pivots, batched and not, a singular matrix; and grouped expert products (``ragged_dot``), against PyTorch."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from converter.api import build
from tests.targets import one_capture

TARGETS = ["onnx", "litert"]
#: one worker: each model's capture serves both targets
pytestmark = pytest.mark.xdist_group("exporter-linalg")


class _Factorizations(nn.Module):
    """Inverse, determinants, solves, LU and its pivots, triangular solves, Cholesky and its solve."""

    def forward(self, a, spd):
        lu, pivots = torch.linalg.lu_factor(a)
        upper = a.triu() + 3 * torch.eye(a.shape[-1])
        chol = torch.linalg.cholesky(spd)
        return (torch.linalg.inv(a), torch.linalg.det(a), torch.linalg.slogdet(a)[1],
                torch.linalg.solve(a, a[..., :2] + 1), lu, pivots,
                torch.linalg.solve_triangular(upper, a, upper=True, left=False),
                torch.linalg.solve_triangular(upper.mT, a, upper=False, unitriangular=True),
                chol, torch.cholesky_solve(a[..., :1], chol))


class _Linalg(_Factorizations):
    """The factorizations of 4-row matrices, a failed Cholesky's info, a 3-row inverse, a singular determinant."""

    def forward(self, a, spd, single):
        return (*super().forward(a, spd), torch.linalg.cholesky_ex(spd - 9 * torch.eye(4))[1],
                torch.linalg.inv(single), torch.linalg.det(torch.tensor([[1.0, 2.0], [2.0, 4.0]]) * single[0, 0]))


def _inputs():
    g = torch.Generator().manual_seed(0)
    a = torch.randn(3, 4, 4, generator=g)
    b = torch.randn(3, 4, 4, generator=g)
    return a, b @ b.mT + torch.eye(4), torch.randn(3, 3, generator=g) + 2 * torch.eye(3)


@one_capture
def _linalg():
    return _Linalg().eval(), _inputs()


@pytest.mark.parametrize("target", TARGETS)
def test_small_matrix_linear_algebra_matches_pytorch(target):
    args = _inputs()
    got, want = build(_linalg(), target=target)(*args), _Linalg()(*args)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = torch.as_tensor(np.asarray(g))
        assert g.shape == w.shape and g.dtype == w.dtype, f"output {i}"
        if w.is_floating_point():
            assert (g - w).abs().max() <= 1e-5 * max(w.abs().max().item(), 1.0), f"output {i}: {g} vs {w}"
        else:
            assert torch.equal(g, w), f"output {i}: {g} vs {w}"


@one_capture
def _empty():
    return _Factorizations().eval(), (torch.zeros(2, 0, 0), torch.zeros(2, 0, 0))


@pytest.mark.parametrize("target", TARGETS)
def test_empty_matrices_factor_and_solve(target):
    # 0 x 0 matrices (a batch of them too): the unrolled LU, substitution and Cholesky stacked no rows and failed
    a, spd = torch.zeros(2, 0, 0), torch.zeros(2, 0, 0)
    got, want = build(_empty(), target=target)(a, spd), _Factorizations()(a, spd)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = torch.as_tensor(np.asarray(g))
        assert g.shape == w.shape and g.dtype == w.dtype and torch.equal(g, w), f"output {i}: {g} vs {w}"


def _large_inputs():
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(2, 24, 24, generator=g) + 4 * torch.eye(24), torch.randn(2, 24, 24, generator=g)
    return a, b @ b.mT + torch.eye(24)


@one_capture
def _large():
    return _Factorizations().eval(), _large_inputs()


@pytest.mark.parametrize("target", TARGETS)
def test_a_matrix_too_large_to_unroll_runs_as_a_loop(target):
    # the same ops on 24-row matrices, over the 16 rows that are unrolled: one loop over the rows each (refused by
    # name before ("LU factorization of a 17-row matrix (unrolled up to 16 ...)")
    args = _large_inputs()
    art = build(_large(), target=target)
    for i, (got, want) in enumerate(zip(art(*args), _Factorizations()(*args), strict=True)):
        got = torch.as_tensor(np.asarray(got))
        if want.is_floating_point():
            assert (got - want).abs().max() <= 2e-5 * max(want.abs().max().item(), 1.0), f"output {i}"
        else:
            assert torch.equal(got, want), f"output {i}"
    assert art.ops["Loop" if target == "onnx" else "WHILE"] >= 6
    assert len(art.op_list) < 2000  # (unrolled, these 24-row ops took over 10 minutes to convert)


class _Dynamic(nn.Module):
    def forward(self, a):
        return torch.linalg.det(a), torch.linalg.cholesky(a @ a.mT + torch.eye(a.shape[-1]))


@one_capture
def _dynamic(rows):
    return _Dynamic().eval(), (torch.randn(2, rows, rows),), ({0: torch.export.Dim("batch")},)


@pytest.mark.parametrize("rows", [3, 20])
@pytest.mark.parametrize("target", TARGETS)
def test_factorizations_with_a_dynamic_batch(target, rows):
    """Entries are picked by slices, not indexing (a gather, which LiteRT refuses over symbolic dims); over 16 rows
    by slices at a run-time start inside a loop (ONNX refused those with a dynamic batch)."""
    model = _Dynamic().eval()
    art = build(_dynamic(rows), target=target)
    for n in (1, 5):
        a = torch.randn(n, rows, rows, generator=torch.Generator().manual_seed(n)) + rows * torch.eye(rows)
        for g, w in zip(art(a), model(a), strict=True):
            g = torch.as_tensor(np.asarray(g))
            assert g.shape == w.shape and (g - w).abs().max() <= 1e-5 * max(w.abs().max().item(), 1.0)


class _Experts(nn.Module):
    """transformers' grouped-matmul op (a mixture-of-experts layer traced in float32) on fixed group ends: an empty
    group, rows past the last group (zero)."""

    def __init__(self):
        super().__init__()
        import transformers.integrations.moe  # noqa: F401  (defines torch.ops.transformers.grouped_mm_fallback)

        self.weight = nn.Parameter(torch.randn(3, 8, 5, generator=torch.Generator().manual_seed(1)))
        self.register_buffer("offs", torch.tensor([2, 2, 5], dtype=torch.int32))

    def forward(self, x):
        return torch.ops.transformers.grouped_mm_fallback(x, self.weight, self.offs)


@one_capture
def _experts():
    return _Experts().eval(), (torch.randn(7, 8, generator=torch.Generator().manual_seed(2)),)


@pytest.mark.parametrize("target", TARGETS)
def test_grouped_expert_products_export(target):
    """``lax.ragged_dot_general`` (no operator in either format) as every row times every group, masked."""
    model, x = _Experts().eval(), torch.randn(7, 8, generator=torch.Generator().manual_seed(2))
    got, want = torch.as_tensor(np.asarray(build(_experts(), target=target)(x))), model(x)
    assert want[5:].eq(0).all() and got.shape == want.shape
    assert (got - want).abs().max() <= 1e-5 * want.abs().max().item()


class _ExpAndHistogram(nn.Module):
    """matrix_exp (its Padé solve is jnp.linalg.solve: custom_linear_solve), histogram and bucketize (the
    bisection halves uint32 indices and compares in total order)."""

    def forward(self, a, x):
        hist, edges = torch.histogram(x, bins=5)
        return torch.linalg.matrix_exp(a), hist, edges, torch.bucketize(x, torch.linspace(-2, 2, 9))


def _exp_inputs():
    g = torch.Generator().manual_seed(3)
    return torch.randn(2, 4, 4, generator=g), torch.randn(50, generator=g)


@one_capture
def _exp_and_histogram():
    return _ExpAndHistogram().eval(), _exp_inputs()


@pytest.mark.parametrize("target", TARGETS)
def test_matrix_exp_histogram_and_bucketize_export(target):
    args = _exp_inputs()
    got, want = build(_exp_and_histogram(), target=target)(*args), _ExpAndHistogram()(*args)
    for i, (gv, w) in enumerate(zip(got, want, strict=True)):
        gv = torch.as_tensor(np.asarray(gv))
        assert gv.shape == w.shape and gv.dtype == w.dtype, f"output {i}"
        assert (gv - w).abs().max() <= 1e-5 * max(w.abs().max().item(), 1.0), f"output {i}: {gv} vs {w}"
