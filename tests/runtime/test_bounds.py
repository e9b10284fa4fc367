"""Out-of-range indices on the tpu device raise the CPU's error (XLA would clamp the read or drop the write)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime

_X = torch.arange(10.0).view(5, 2)

#: name → fn(index device, tensor device), run to a sync point (``.cpu()``).
_CASES = {
    "getitem": lambda i, d: _X.to(d)[torch.tensor([7], device=i)].cpu(),
    "getitem second index": lambda i, d: _X.to(d)[torch.tensor([1], device=i), torch.tensor([-3], device=i)].cpu(),
    "setitem": lambda i, d: _X.to(d).index_put_((torch.tensor([9], device=i),), torch.tensor(1.0, device=d)).cpu(),
    "index_select": lambda i, d: _X.to(d).index_select(0, torch.tensor([5], device=i)).cpu(),
    "gather": lambda i, d: _X.to(d).gather(1, torch.tensor([[2]], device=i)).cpu(),
    "scatter_": lambda i, d: torch.zeros(5, device=d).scatter_(0, torch.tensor([-1], device=i), 1.0).cpu(),
    "scatter_add": lambda i, d: torch.zeros(5, device=d).scatter_add(0, torch.tensor([6], device=i),
                                                                      torch.ones(1, device=d)).cpu(),
    "embedding": lambda i, d: F.embedding(torch.tensor([[0, 5]], device=i), _X.to(d)).cpu(),
    "one_hot": lambda i, d: F.one_hot(torch.tensor([1, 3], device=i), 3).cpu(),
    "one_hot negative": lambda i, d: F.one_hot(torch.tensor([1, -1], device=i), 3).cpu(),
    "after a 2-d mask": lambda i, d: torch.zeros(4, 6, 5, device=d)[torch.ones(4, 6, dtype=torch.bool, device=d),
                                                                     torch.tensor([5], device=i)].cpu(),
    "index_select off dim 0": lambda i, d: _X.to(d).index_select(1, torch.tensor([-1], device=i)).cpu(),
    "gather of a 0-d": lambda i, d: torch.tensor(3.0, device=d).gather(0, torch.tensor(1, device=i)).cpu(),
    "take": lambda i, d: _X.to(d).take(torch.tensor([-11], device=i)).cpu(),
    "index_add": lambda i, d: _X.to(d).index_add(1, torch.tensor([2], device=i), torch.ones(5, 1, device=d)).cpu(),
    "index_add of 1-d": lambda i, d: torch.zeros(3, device=d).index_add(0, torch.tensor([-1], device=i),
                                                                        torch.ones(1, device=d)).cpu(),
    "index_copy": lambda i, d: _X.to(d).index_copy(0, torch.tensor([-1], device=i), torch.ones(1, 2, device=d)).cpu(),
    "index_fill": lambda i, d: _X.to(d).index_fill(1, torch.tensor([-3], device=i), 0.0).cpu(),
    "a dimension of size 0": lambda i, d: torch.zeros(0, 3, device=d)[torch.tensor([0], device=i)].cpu(),
    "cross_entropy": lambda i, d: F.cross_entropy(_X.to(d), torch.tensor([0, 1, 2, 1, 4], device=i)).cpu(),
    "embedding_bag": lambda i, d: _bag(i, d, [1, 7, 3], [0, 2]),
    "embedding_bag max, training": lambda i, d: _bag(i, d, [1, -1, 3], [0, 2], mode="max", grad=True),
    "embedding_bag offsets[0]": lambda i, d: _bag(i, d, [1, 2, 3], [1, 2]),
    "embedding_bag offsets[-1]": lambda i, d: _bag(i, d, [1, 2, 3], [0, 4], grad=True),
    "max_unpool1d": lambda i, d: F.max_unpool1d(_X.to(d).view(1, 2, 5)[..., :2], torch.tensor([[[0, 4], [1, 3]]],
                                                                                             device=i), 2).cpu(),
    "max_unpool3d": lambda i, d: F.max_unpool3d(torch.ones(1, 1, 1, 1, 2, device=d),
                                                torch.tensor([[[[[0, -1]]]]], device=i), 2).cpu(),
    "multi_margin_loss": lambda i, d: F.multi_margin_loss(_X.to(d), torch.tensor([0, 1, 2, 1, 0], device=i)).cpu(),
    "multilabel_margin_loss": lambda i, d: F.multilabel_margin_loss(_X.to(d), torch.tensor(
        [[0, -1]] * 4 + [[1, -2]], device=i)).cpu(),
    "searchsorted sorter": lambda i, d: torch.searchsorted(_X.to(d)[:, 0], _X.to(d)[0], sorter=torch.tensor(
        [0, 1, 2, 3, 5], device=i)).cpu(),
    "masked_scatter": lambda i, d: _X.to(d).masked_scatter(torch.tensor([True, False], device=i),
                                                          torch.ones(4, device=d)).cpu(),
}
_CPU_INDEX_REFUSED = ("embedding", "cross_entropy", "scatter_add", "gather", "scatter_", "gather of a 0-d", "take",
                      "index_add", "index_add of 1-d", "index_copy", "index_fill", "embedding_bag",
                      "embedding_bag max, training", "embedding_bag offsets[0]", "embedding_bag offsets[-1]",
                      "max_unpool1d", "max_unpool3d", "multi_margin_loss", "multilabel_margin_loss",
                      "searchsorted sorter", "masked_scatter")


def _bag(i, d, indices, offsets, grad=False, **kwargs):
    weight = _X.to(d, copy=True).requires_grad_(grad)
    return F.embedding_bag(torch.tensor(indices, device=i), weight, torch.tensor(offsets, device=i), **kwargs).cpu()


def _cpu_error(name):
    with pytest.raises((IndexError, RuntimeError)) as info:
        _CASES[name]("cpu", "cpu")
    return info.type, str(info.value)


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("name", list(_CASES))
def test_an_index_out_of_range_raises_the_cpus_error(name, mode):
    kind, message = _cpu_error(name)
    with tpu_runtime.set_eager_mode(mode):
        for index_device in ("tpu", "cpu"):
            if index_device == "cpu" and name in _CPU_INDEX_REFUSED:
                continue  # (these take no CPU index next to tpu tensors: a device mix, as on CUDA)
            with pytest.raises(kind) as info:
                _CASES[name](index_device, "tpu")
            assert str(info.value) == message
            if mode != "debug" and index_device == "tpu" and "size 0" not in name:  # found at the sync point:
                assert "test_bounds.py" in " ".join(info.value.__notes__)  # the note names the call
        tpu_runtime.sync()  # nothing left pending


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_indices_in_range_negative_ones_and_ignored_targets_pass(mode):
    with tpu_runtime.set_eager_mode(mode):
        x = _X.to("tpu")
        torch.testing.assert_close(x[torch.tensor([-1, 0], device="tpu")].cpu(), _X[torch.tensor([-1, 0])])
        target = torch.tensor([0, -100, 1, 1, -100])
        got = F.cross_entropy(x, target.to("tpu"), ignore_index=-100)
        torch.testing.assert_close(got.cpu(), F.cross_entropy(_X, target, ignore_index=-100))
        mask = torch.tensor([True, False])  # (broadcast: 5 ones, as many as the source's elements)
        torch.testing.assert_close(x.masked_scatter(mask.to("tpu"), x[:, 0].clone()).cpu(),
                                   _X.masked_scatter(mask, _X[:, 0].clone()))
        labels = torch.tensor([[1, -1], [0, 1], [1, 0], [-1, 1], [0, -1]])  # (-1 ends a row's labels)
        torch.testing.assert_close(F.multilabel_margin_loss(x, labels.to("tpu")).cpu(),
                                   F.multilabel_margin_loss(_X, labels))
        for kwargs in ({"include_last_offset": True}, {"padding_idx": 4, "mode": "max"}):  # (offsets[-1] = length)
            torch.testing.assert_close(_bag("tpu", "tpu", [1, 4, 3, 0], [0, 2, 4], **kwargs),
                                       _bag("cpu", "cpu", [1, 4, 3, 0], [0, 2, 4], **kwargs))
        tpu_runtime.sync()


def test_the_first_bad_call_raises_once_and_later_syncs_pass():
    with tpu_runtime.set_eager_mode("strict"):
        x = _X.to("tpu")
        y = x[torch.tensor([8], device="tpu")]
        z = x[torch.tensor([9], device="tpu")]
        with pytest.raises(IndexError, match="index 8 is out of bounds"):
            z.cpu()
        torch.testing.assert_close(x.cpu(), _X)  # the later check was dropped with the first: no second raise
        del y


def test_a_call_that_fails_for_another_reason_leaves_no_pending_index_error():
    # the op's own error is the one raised; its index check is dropped (it surfaced at the next, unrelated sync)
    with tpu_runtime.set_eager_mode("strict"):
        z = torch.zeros(5, device="tpu")
        with pytest.raises(RuntimeError, match="Expected self.dtype to be equal to src.dtype"):
            z.scatter_(0, torch.tensor([9], device="tpu"), torch.ones(1, dtype=torch.float64, device="tpu"))
        torch.testing.assert_close((z + 1).cpu(), torch.ones(5))


#: ``out=`` variants run the checks of their op: name → fn(device), run to a sync point.
_OUT_CASES = {
    "index_select": lambda d: torch.index_select(_X.to(d), 0, torch.tensor([5], device=d),
                                                 out=torch.empty(1, 2, device=d)).cpu(),
    "gather": lambda d: torch.gather(_X.to(d), 1, torch.tensor([[2]], device=d), out=torch.empty(1, 1, device=d)).cpu(),
    "take": lambda d: torch.take(_X.to(d), torch.tensor([10], device=d), out=torch.empty(1, device=d)).cpu(),
    "index_add": lambda d: torch.index_add(_X.to(d), 0, torch.tensor([7], device=d), torch.ones(1, 2, device=d),
                                           out=torch.empty(5, 2, device=d)).cpu(),
    "floor_divide": lambda d: torch.floor_divide(torch.tensor([3], device=d), torch.tensor([0], device=d),
                                                 out=torch.empty(1, dtype=torch.long, device=d)).cpu(),
    "multinomial": lambda d: torch.multinomial(torch.tensor([[0.5, -1.0]], device=d), 1,
                                               out=torch.empty(1, 1, dtype=torch.long, device=d)).cpu(),
}


@pytest.mark.parametrize("name", list(_OUT_CASES))
def test_out_variants_are_checked_as_their_op(name):
    with pytest.raises((IndexError, RuntimeError)) as cpu:
        _OUT_CASES[name]("cpu")
    with pytest.raises(cpu.type) as info:
        _OUT_CASES[name]("tpu")
    assert str(info.value) == str(cpu.value)
    tpu_runtime.sync()


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_indices_uploaded_in_range_are_not_checked_again_on_the_device(mode):
    # token ids and targets uploaded from the host: their range is read there, so no check runs on the device
    # (nothing pending); once written, or read as another dtype, they are checked on the device again
    from tpu_runtime import bounds

    with tpu_runtime.set_eager_mode(mode):
        weight, cpu_ids, cpu_targets = _X.to("tpu"), torch.tensor([[0, 4], [3, 1]]), torch.tensor([[0, 1, 1, 0, 1]])
        ids, targets = cpu_ids.to("tpu"), cpu_targets.to("tpu")
        got = [F.embedding(ids, weight), F.embedding(ids.view(-1)[1:], weight),
               F.cross_entropy(weight, targets.view(-1))]
        assert bounds._PENDING == []
        want = [F.embedding(cpu_ids, _X), F.embedding(cpu_ids.view(-1)[1:], _X), F.cross_entropy(_X, cpu_targets.view(-1))]
        for g, w in zip(got, want):
            torch.testing.assert_close(g.cpu(), w)
        ids.add_(1)  # (now 5: out of range)
        with pytest.raises(IndexError, match="index out of range in self"):
            F.embedding(ids, weight).cpu()
        halves = torch.tensor([4, 1], dtype=torch.int32).to("tpu")  # (in range as int32; as one int64: 4 + 2**32)
        with pytest.raises(IndexError, match="index out of range in self"):
            F.embedding(halves.view(torch.int64), weight).cpu()
        tpu_runtime.sync()
        positions = torch.arange(1, 5, 2, device="tpu")  # (1, 3: a factory's known range, as an upload's)
        torch.testing.assert_close(F.embedding(positions, weight).cpu(), _X[[1, 3]])
        assert bounds._PENDING == []
        with pytest.raises(IndexError, match="index out of range in self"):
            F.embedding(torch.arange(2, 6, device="tpu"), weight).cpu()
