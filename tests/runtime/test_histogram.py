"""torch.histogram / torch.histogramdd on the tpu device (rows with no meta kernel in torch), against CPU."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime

_G = torch.Generator().manual_seed(2)
_X = torch.randn(5, 7, generator=_G)
_W = torch.rand(5, 7, generator=_G)
_EDGES = torch.tensor([-1.0, 0.0, 0.3, 2.0])

CASES = {
    "data_range": lambda x, w: torch.histogram(x, 6),
    "range": lambda x, w: torch.histogram(x, 4, range=(-1.0, 1.0)),
    "weight_density": lambda x, w: torch.histogram(x, 5, weight=w, density=True),
    "edges": lambda x, w: torch.histogram(x, _EDGES.to(x.device), weight=w),
    "flat": lambda x, w: torch.histogram(torch.ones_like(x), 3),
    "empty": lambda x, w: torch.histogram(x[:0], 3),
    "dd": lambda x, w: torch.histogramdd(x.reshape(-1, 5)[:, :2], [3, 4]),
    "dd_range_weight": lambda x, w: torch.histogramdd(x.reshape(-1, 5)[:, :2], [3, 4], range=[-1.0, 1.0, -2.0, 2.0],
                                                      weight=w.reshape(-1, 5)[:, 0], density=True),
    "dd_edges": lambda x, w: torch.histogramdd(x.reshape(-1, 5)[:, :2], [_EDGES.to(x.device), _EDGES.to(x.device)]),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_histogram_matches_cpu(case, mode):
    fn = CASES[case]
    with tpu_runtime.set_eager_mode(mode):
        for x in (_X, _X * 3 + 1):  # the second call reuses the plan; its data range (the edges) differs
            want = fn(x, _W)
            got = fn(x.to("tpu"), _W.to("tpu"))
            for g, w in zip(torch.utils._pytree.tree_leaves(tuple(got)), torch.utils._pytree.tree_leaves(tuple(want))):
                assert g.device.type == "tpu" and g.dtype == w.dtype
                torch.testing.assert_close(g.cpu(), w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.float16, torch.bfloat16])
def test_linspace_and_histogram_edges_are_the_cpus_to_the_bit(dtype):
    # torch's CPU kernel steps from both ends with one rounding per value (a fused multiply-add): the
    # decomposition differed by 1-3 ulp, and a point lying on an edge fell into the next bin
    # (float16/bfloat16: every operation rounded to the dtype, as the CPU's half types compute; -2 to 0 in 50
    # steps differed from a float32 computation at 12 of them)
    for start, end, steps in ((-1.3, 2.9, 8), (0.1, 1.7, 9), (3.0, -2.5, 6), (-97.04, 6.07, 18), (3.0, 7.0, 1),
                              (-2.0, 0.0, 50), (-40.5, 33.0, 1000)):
        want = torch.linspace(start, end, steps, dtype=dtype)
        assert torch.equal(torch.linspace(start, end, steps, dtype=dtype, device="tpu").cpu(), want)
    out = torch.empty(4, dtype=torch.float64, device="tpu")
    torch.linspace(0, 1, 4, out=out)  # linspace.out: the out's dtype
    assert torch.equal(out.cpu(), torch.linspace(0, 1, 4, dtype=torch.float64))
    if dtype.is_floating_point and dtype.itemsize >= 4:
        x = torch.linspace(-1.3, 2.9, 43, dtype=dtype)
        want = torch.histogram(x, bins=7, range=(-1.3, 2.9))
        got = torch.histogram(x.to("tpu"), bins=7, range=(-1.3, 2.9))
        assert torch.equal(got.bin_edges.cpu(), want.bin_edges) and torch.equal(got.hist.cpu(), want.hist)
