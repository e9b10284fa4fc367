"""``nn.EmbeddingBag`` on the tpu device: forward and weight / per-sample-weight gradients against CPU; ``nn.Embedding(max_norm=...)``."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime

_IDX = torch.tensor([1, 2, 4, 5, 4, 3, 7])
_OFFSETS = torch.tensor([0, 3, 3, 5])  # the second bag is empty


def _run(bag: torch.nn.EmbeddingBag, device: str, psw: torch.Tensor | None, last: bool):
    offsets = torch.cat([_OFFSETS, torch.tensor([len(_IDX)])]) if last else _OFFSETS
    w = None if psw is None else psw.detach().to(device).requires_grad_(True)
    out = bag(_IDX.to(device), offsets.to(device), per_sample_weights=w)
    (out.square().sum() + out.sum()).backward()
    return out.detach().cpu(), bag.weight.grad.cpu(), None if w is None else w.grad.cpu()


@pytest.mark.parametrize("mode,psw,padding_idx,last,eager", [
    ("sum", False, None, False, "strict"),
    ("sum", True, 4, True, "fused"),
    ("mean", False, 4, False, "strict"),
    ("mean", False, None, True, "fused"),
    ("max", False, None, False, "strict"),
    ("max", False, 4, True, "fused"),
])
def test_embedding_bag_forward_and_gradients_match_cpu(mode, psw, padding_idx, last, eager):
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 4, mode=mode, padding_idx=padding_idx, include_last_offset=last)
    ref = copy.deepcopy(bag)
    weights = torch.rand(len(_IDX)) if psw else None
    with tpu_runtime.set_eager_mode(eager):
        got = _run(bag.to("tpu"), "tpu", weights, last)
    want = _run(ref, "cpu", weights, last)
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_scale_grad_by_freq_divides_by_each_rows_count(mode):
    # Documented semantics (and nn.Embedding's): a row's gradient is divided by how often it
    # occurs in the batch. (torch's CPU EmbeddingBag kernel gives 0.5 to row 5 here, which
    # occurs once: it is not used as the reference.)
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 4, mode=mode, scale_grad_by_freq=True)
    plain = copy.deepcopy(bag)
    plain.scale_grad_by_freq = False
    got = _run(bag.to("tpu"), "tpu", None, False)[1]
    unscaled = _run(plain, "cpu", None, False)[1]
    counts = torch.bincount(_IDX, minlength=10).clamp(min=1).unsqueeze(1)
    torch.testing.assert_close(got, unscaled / counts, rtol=1e-5, atol=1e-6)


def test_embedding_bag_sparse_gradient_is_refused_clearly():
    bag = torch.nn.EmbeddingBag(10, 4, mode="sum", sparse=True).to("tpu")
    out = bag(_IDX.to("tpu"), _OFFSETS.to("tpu"))
    with pytest.raises(Exception, match="sparse=True"):
        out.sum().backward()


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_embedding_max_norm_renormalizes_the_looked_up_rows_in_place(mode):
    # nn.Embedding(max_norm=...) calls embedding_renorm_ on its weight before the lookup: rows named
    # (once or twice) are scaled to the norm, other rows keep their values, as on the CPU
    torch.manual_seed(0)
    emb = torch.nn.Embedding(10, 4, max_norm=1.0, norm_type=1.5)
    with torch.no_grad():
        emb.weight.mul_(3.0)
    idx = torch.tensor([[0, 1, 2], [2, 7, 0]])
    ref = torch.nn.Embedding(10, 4, max_norm=1.0, norm_type=1.5)
    ref.load_state_dict(emb.state_dict())
    want = ref(idx)
    with tpu_runtime.set_eager_mode(mode):
        got = emb.to("tpu")(idx.to("tpu"))
        torch.testing.assert_close(got.detach().cpu(), want.detach())
        torch.testing.assert_close(emb.weight.detach().cpu(), ref.weight.detach())


@pytest.mark.parametrize("mode,padding_idx", [("sum", None), ("mean", None), ("max", None), ("sum", 3),
                                              ("mean", 3)])
def test_include_last_offset_short_of_the_indices_follows_the_cpu_kernel(mode, padding_idx):
    # a last offset before the end of the indices: without a padding_idx torch's CPU kernel sums the
    # last bag only up to it (the mean still divides by the count to the end); with one, and in max
    # mode, the bag runs to the end
    torch.manual_seed(0)
    w = torch.randn(10, 4)
    idx, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 4, 6])
    want = torch.nn.functional.embedding_bag(idx, w, offsets, mode=mode, include_last_offset=True,
                                             padding_idx=padding_idx)
    got = torch.nn.functional.embedding_bag(idx.to("tpu"), w.to("tpu"), offsets.to("tpu"), mode=mode,
                                            include_last_offset=True, padding_idx=padding_idx)
    torch.testing.assert_close(got.cpu(), want)


@pytest.mark.parametrize("weighted", [False, True])
def test_include_last_offset_indices_past_the_last_offset_get_no_weight_gradient(weighted):
    # the sum skips them, so they take no part in the gradient (it gave them the last bag's; the CPU
    # kernel reads past the end of the gradient for them): the same as a bag of the indices up to the offset
    torch.manual_seed(0)
    w = torch.randn(10, 3)
    idx, offsets = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 3, 3, 6])
    psw = torch.rand(8) if weighted else None

    def weight_grad(dev, n):
        wd = w.to(dev).requires_grad_()
        out = torch.nn.functional.embedding_bag(idx[:n].to(dev), wd, offsets.to(dev), mode="sum",
                                                include_last_offset=True,
                                                per_sample_weights=None if psw is None else psw[:n].to(dev))
        (out * torch.arange(1.0, 10.0).view(3, 3).to(dev)).sum().backward()
        return wd.grad.cpu()

    torch.testing.assert_close(weight_grad("tpu", 8), weight_grad("cpu", 6))


@pytest.mark.parametrize("device", ["cpu", "tpu"])
@pytest.mark.parametrize("mode,last", [("sum", True), ("mean", False), ("max", True)])
def test_compiled_embedding_bag_trains_as_on_the_cpu(mode, last, device):
    # torch.compile had no lowering of _embedding_bag_backward (a runtime kernel of eager only), and with
    # CPU inputs include_last_offset's bag_size came back one entry longer than the CPU kernel's
    torch._dynamo.reset()
    torch.manual_seed(0)
    bag = torch.nn.EmbeddingBag(10, 4, mode=mode, include_last_offset=last)
    ref = copy.deepcopy(bag)
    want = _run(ref, "cpu", None, last)
    compiled = torch.compile(bag.to(device), backend="tpu")
    got = _run(compiled, device, None, last)
    for g, w in zip(got, want):
        if w is not None:
            torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)
