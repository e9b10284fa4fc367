"""Ops with a data-dependent output shape on the tpu device (nonzero, masks, unique, …), against CPU."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime
from tpu_runtime.eager.lazy import LazyRef
from tpu_runtime.values import read

_X = torch.tensor([[0.5, -1.0, 2.0, 0.0], [3.0, 0.5, -2.0, 0.5], [0.0, 1.0, 0.5, -0.5]])
_MASK = _X > 0.2


def _setitem(t: torch.Tensor) -> torch.Tensor:
    c = t.clone()
    m = c > 0.2
    c[m] = torch.arange(int(_MASK.sum()), dtype=c.dtype, device=c.device)
    return c


def _put_accumulate(t: torch.Tensor) -> torch.Tensor:
    return t.clone().index_put_((t < 0,), torch.full((int((_X < 0).sum()),), 10.0, device=t.device),
                                accumulate=True)


def _put_one(t: torch.Tensor, indices: tuple, accumulate: bool) -> torch.Tensor:
    return t.clone().index_put_(indices, torch.tensor(7.5, device=t.device), accumulate=accumulate)


CASES = {
    "nonzero": lambda t: torch.nonzero(t > 0.2),
    "argwhere": lambda t: torch.argwhere(t),
    "where_cond": lambda t: torch.where(t < 0),
    "nonzero_none": lambda t: torch.nonzero(t > 10),
    "masked_select": lambda t: torch.masked_select(t, t > 0.2),
    "masked_select_broadcast": lambda t: torch.masked_select(t, t[0] > 0.2),
    "masked_select_0d": lambda t: torch.masked_select(t[0, 1], t[0, 1] > -10),
    "mask_index": lambda t: t[t > 0.2],
    "row_mask": lambda t: t[t[:, 0] > 0.1],
    "col_mask_after_slice": lambda t: t[1:, t[0] != 0],
    "mask_then_int_index": lambda t: t[t[:, 1] > 0, 2],
    "mask_setitem_values": _setitem,
    "mask_setitem_scalar": lambda t: t.clone().masked_fill_(t > 0.2, 7.0),
    "index_put_accumulate": _put_accumulate,
    # one value written through a mask next to an index tensor (the table's row takes a mask alone only)
    "mask_and_index_setitem_scalar": lambda t: _put_one(t, (torch.tensor([0, 2], device=t.device), t[0] > 0.2), False),
    "mask_and_index_put_accumulate": lambda t: _put_one(t, (torch.tensor([1]), t[1] > 0), True),
    "unique": lambda t: torch.unique(t),
    "unique_inverse_counts": lambda t: torch.unique(t, return_inverse=True, return_counts=True),
    "unique_nan": lambda t: torch.unique(torch.where(t < 0, float("nan"), t)),
    "unique_dim": lambda t: torch.unique(torch.cat([t, t[:1]]), dim=0, return_inverse=True, return_counts=True),
    "unique_consecutive": lambda t: torch.unique_consecutive((t > 0).reshape(-1).long(), return_inverse=True,
                                                             return_counts=True),
    "unique_consecutive_dim": lambda t: torch.unique_consecutive(torch.cat([t[:1], t]), dim=0),
    "bincount": lambda t: torch.bincount((t.abs() * 2).long().reshape(-1)),
    "bincount_weights_minlength": lambda t: torch.bincount((t.abs() * 2).long().reshape(-1), weights=t.reshape(-1),
                                                           minlength=9),
    "repeat_interleave": lambda t: torch.repeat_interleave((t[0].abs() * 2).long()),
    "repeat_interleave_self": lambda t: t[:, 0].repeat_interleave((t[1].abs() * 2).long()[:3]),
}


def _assert_same(got, want) -> None:
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want)
        for g, w in zip(got, want):
            _assert_same(g, w)
        return
    assert got.device.type == "tpu"
    torch.testing.assert_close(got.cpu(), want, equal_nan=True)


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_cpu(case, mode):
    fn = CASES[case]
    with tpu_runtime.set_eager_mode(mode):
        got = fn(_X.to("tpu"))
        _assert_same(got, fn(_X))


def test_mask_on_cpu_indexes_a_tpu_tensor():
    x = _X.to("tpu")
    torch.testing.assert_close(x[_MASK].cpu(), _X[_MASK])


def test_fused_mode_runs_the_pending_graph_to_count():
    want = (_X * 2.0 - 1.0)[(_X * 2.0 - 1.0) > 0]
    with tpu_runtime.set_eager_mode("fused"):
        x = _X.to("tpu") * 2.0 - 1.0
        pending = read(x)
        assert isinstance(pending, LazyRef) and pending.concrete is None
        got = x[x > 0]
        assert pending.concrete is not None  # the length was read back: the graph ran
        assert tuple(got.shape) == tuple(want.shape)
        torch.testing.assert_close(got.cpu(), want)


def test_same_length_hits_the_cache():
    x = _X.to("tpu")
    torch.nonzero(x > 0.2)
    with tpu_runtime.cache_only():
        torch.testing.assert_close(torch.nonzero(x > 0.2).cpu(), torch.nonzero(_MASK))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_gradients_through_masks_match_cpu(mode):
    def loss(t):
        return (t[t > 0.2] ** 2).sum() + torch.masked_select(t, t < 0).sum() * 3.0

    ref = _X.clone().requires_grad_(True)
    loss(ref).backward()
    with tpu_runtime.set_eager_mode(mode):
        x = _X.to("tpu").requires_grad_(True)
        loss(x).backward()
        torch.testing.assert_close(x.grad.cpu(), ref.grad)


def test_errors_match_torch():
    x = _X.to("tpu")
    with pytest.raises(IndexError, match="shape of the mask"):
        x[torch.ones(4, dtype=torch.bool, device="tpu")]
    with pytest.raises(RuntimeError, match="non-negative"):
        torch.bincount(torch.tensor([1, -1], device="tpu"))
    with pytest.raises(RuntimeError, match="negative"):
        torch.repeat_interleave(torch.tensor([1, -1], device="tpu"))


@pytest.mark.parametrize("dtype,values", [(torch.uint8, [0, 3, 1, 3]), (torch.uint8, [255, 0]),
                                          (torch.int8, [127, 1]), (torch.int16, [1, 300])])
def test_bincount_of_small_integer_types_matches_cpu(dtype, values):
    # the length max + 1 is counted in int64: uint8's initial -1 and int8's 127 + 1 wrapped (an empty result)
    x = torch.tensor(values, dtype=dtype)
    torch.testing.assert_close(torch.bincount(x.to("tpu")).cpu(), torch.bincount(x))
