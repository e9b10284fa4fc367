"""Input sets (seeded, in range) and error metrics (histogram, SNR, top-1)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from converter.capture import capture
from validators.inputs import build_input_sets, index_bounds, structural_inputs
from validators.metrics import HISTOGRAM_EDGES, compare, histogram, snr_db, task_agreement, top1_agreement


class Tagger(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4)

    def forward(self, ids: torch.Tensor, positions: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.emb(ids).sum(-1) + positions.float() + x


SAMPLE = (torch.tensor([[1, 2, 3]]), torch.tensor([[100, 101, 102]]), torch.tensor([[5.0, 6.0, 7.0]]))


@pytest.fixture(scope="module")
def tagger_ep():
    return capture(Tagger().eval(), SAMPLE)


def _sets(ep, seed: int = 0):
    return build_input_sets(ep, SAMPLE, {}, inputs=[SAMPLE], num_random_inputs=3, seed=seed)


def test_input_sets_keep_shapes_dtypes_and_integer_ranges(tagger_ep):
    ep, sets = tagger_ep, _sets(tagger_ep)
    assert index_bounds(ep) == {"ids": 10}
    assert [s.origin for s in sets] == ["sample", "given", "random", "random", "random"]
    for s in sets[2:]:
        ids, positions, x = s.args
        assert ids.shape == (1, 3) and ids.dtype == torch.int64 and positions.dtype == torch.int64
        assert int(ids.min()) >= 0 and int(ids.max()) < 10  # embedding size, not the sample's [1, 3]
        assert 100 <= int(positions.min()) and int(positions.max()) <= 102  # the sample's range
        assert x.dtype == torch.float32 and not torch.equal(x, sets[0].args[2])
    assert "ids: integers in [0, 9] (index into a dim of size 10)" in sets[2].notes


class Bags(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bag = nn.EmbeddingBag(12, 4, mode="sum")

    def forward(self, values: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        return self.bag(values, offsets)


def test_embedding_bag_offsets_are_reused_and_its_indices_stay_in_range():
    sample = (torch.tensor([1, 2, 3, 4, 5, 6]), torch.tensor([0, 2, 5]))
    model = Bags().eval()
    ep = capture(model, sample)
    assert index_bounds(ep) == {"values": 12}
    assert structural_inputs(ep) == {"offsets": "offsets of embedding_bag (they define the bags)"}
    for s in build_input_sets(ep, sample, {}, num_random_inputs=3, seed=0)[1:]:
        values, offsets = s.args
        assert torch.equal(offsets, sample[1])  # random offsets would not start at 0 or would decrease
        assert int(values.min()) >= 0 and int(values.max()) < 12
        model(values, offsets)  # PyTorch takes every random set
    assert "offsets: sample reused: offsets of embedding_bag (they define the bags)" in s.notes


class Scatter(nn.Module):
    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        return torch.zeros(2, 8).scatter(1, idx, x)


def test_scatter_indices_are_reused_so_random_sets_have_no_duplicates():
    sample = (torch.randn(2, 3), torch.tensor([[0, 5, 7], [2, 1, 6]]))
    ep = capture(Scatter().eval(), sample)
    assert structural_inputs(ep) == {"idx": "indices of scatter (duplicates would leave PyTorch's result undefined)"}
    for s in build_input_sets(ep, sample, {}, num_random_inputs=2, seed=0)[1:]:
        assert torch.equal(s.args[1], sample[1]) and not torch.equal(s.args[0], sample[0])


def test_random_input_sets_are_seeded(tagger_ep):
    a, b, c = _sets(tagger_ep, seed=3), _sets(tagger_ep, seed=3), _sets(tagger_ep, seed=4)
    assert all(torch.equal(x, y) for x, y in zip(a[2].flat, b[2].flat))
    assert not torch.equal(a[2].flat[2], c[2].flat[2])


class Masked(nn.Module):
    def forward(self, x, y, mask=None):
        out = x + y.sum(-1, keepdim=True)
        return out if mask is None else out * mask


def test_random_sets_take_other_sizes_of_the_dynamic_dims_within_their_range():
    batch, seq = torch.export.Dim("batch", max=5), torch.export.Dim("seq", min=3, max=4)
    x, y = torch.randn(2, 3), torch.randn(2, 7)
    ep = capture(Masked(), (x, y), None, ({0: batch, 1: seq}, {0: batch}))
    sets = build_input_sets(ep, (x, y), {}, num_random_inputs=4)
    for s in sets[1:]:
        (b, n), (b2, m) = s.args[0].shape, s.args[1].shape
        assert b == b2 and 2 <= b <= 5 and b != 2 and n == 4 and m == 7, (s.args[0].shape, s.args[1].shape)
    # a mask is reused as given, so a set whose mask has a dynamic size keeps the sample's sizes
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 1.0]])
    ep = capture(Masked(), (x, y, mask), None, ({0: batch}, {0: batch}, {0: batch}))
    assert all(s.args[0].shape == x.shape for s in build_input_sets(ep, (x, y, mask), {}, num_random_inputs=2))


def test_histogram_counts_every_element_by_decade():
    diff = np.array([0.0, 0.0, 1e-11, 5e-7, 3.0, 1e5, np.inf])
    counts = histogram(diff)
    assert len(counts) == len(HISTOGRAM_EDGES) + 1 and sum(counts) == diff.size
    assert counts[0] == 2 and counts[1] == 1 and counts[-1] == 2


def test_compare_metrics_and_exact_integers():
    ref = torch.tensor([1.0, -2.0, 4.0])
    e = compare("y", ref, ref + torch.tensor([0.0, 0.0, 0.4]))
    assert abs(e.max_abs - 0.4) < 1e-6 and abs(e.max_rel - 0.1) < 1e-6 and not e.passed and e.mode == "tolerance"
    assert compare("i", torch.tensor([1, 2]), torch.tensor([1, 3])).mode == "exact"


def test_compare_counts_matching_infinities_and_nans_as_equal():
    # an output with inf where PyTorch has the same inf failed (inf - inf is NaN), as did its cosine
    inf, nan = float("inf"), float("nan")
    ref = torch.tensor([1.0, inf, -inf, nan, 2.0])
    e = compare("y", ref, ref.clone())
    assert e.passed and e.max_abs == 0 and abs(e.cosine - 1) < 1e-12
    for other in (torch.tensor([1.0, -inf, -inf, nan, 2.0]), torch.tensor([1.0, 5.0, -inf, nan, 2.0]),
                  torch.tensor([1.0, inf, -inf, 0.0, 2.0])):
        assert not compare("y", ref, other).passed
    e = compare("q", torch.tensor([448.0, -3.0]).to(torch.float8_e4m3fn), torch.tensor([448.0, -3.0]))  # float8
    assert e.passed and e.dtype == "float8_e4m3fn"


def test_compare_judges_both_parts_of_complex_outputs():
    # a real cast dropped the imaginary part: a wrong one passed; and complex64 had no tolerance (exact)
    ref = torch.tensor([1 + 2j, -3 + 0.5j], dtype=torch.complex64)
    assert compare("z", ref, ref + 1e-7).passed
    e = compare("z", ref, torch.tensor([1 - 2j, -3 + 0.5j], dtype=torch.complex64))
    assert not e.passed and abs(e.max_abs - 4) < 1e-6


def test_task_level_metrics():
    ref = torch.tensor([[0.1, 0.9], [0.8, 0.2]])
    assert top1_agreement(ref, torch.tensor([[0.2, 0.7], [0.1, 0.3]])) == 0.5
    assert snr_db(ref, ref) == float("inf")
    assert abs(snr_db(torch.ones(4), torch.full((4,), 1.1)) - 20.0) < 1e-4
    e = task_agreement("logits", ref, ref + 0.05, "bf16")
    assert e.mode == "top1" and e.top1_agreement == 1.0 and e.passed and not compare("logits", ref, ref + 0.05).passed
    regression = task_agreement("logits", ref, ref + 0.05, "bf16", task="regression")
    assert regression.mode == "snr" and regression.passed == (regression.snr_db >= 20.0)
