"""Lazy modules moved to the tpu device stay lazy until their first forward (as on CUDA)."""

from __future__ import annotations

import copy

import pytest
import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, is_lazy

import tpu_runtime  # noqa: F401  (registers the device)
from tpu_runtime.lazy import TpuUninitializedBuffer, TpuUninitializedParameter


def _lazy_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.LazyConv2d(4, 3), torch.nn.LazyBatchNorm2d(), torch.nn.ReLU(),
                               torch.nn.Flatten(), torch.nn.LazyLinear(3))


@pytest.fixture(scope="module")
def moved() -> torch.nn.Module:
    return _lazy_net().to("tpu")


def test_move_keeps_parameters_and_buffers_uninitialized(moved):
    params, buffers = list(moved.parameters()), [b for b in moved.buffers() if is_lazy(b)]
    assert len(params) == 6 and all(type(p) is TpuUninitializedParameter for p in params)
    assert len(buffers) == 2 and all(type(b) is TpuUninitializedBuffer for b in buffers)
    # what lazy modules and user code check: torch's own classes, the device, and no shape yet
    assert all(isinstance(p, UninitializedParameter) and p.device.type == "tpu" for p in params)
    assert all(isinstance(b, UninitializedBuffer) for b in buffers)
    assert moved[4].has_uninitialized_params()
    with pytest.raises(RuntimeError, match="uninitialized parameter"):
        moved[4].weight.shape


def test_first_forward_materializes_on_the_device_and_matches_cpu():
    torch.manual_seed(0)
    net = _lazy_net().to("tpu")
    x = torch.randn(2, 3, 8, 8)
    out = net(x.to("tpu"))  # infers the shapes, materializes on tpu, initializes there
    params = dict(net.named_parameters())
    assert {k: tuple(p.shape) for k, p in params.items()} == {
        "0.weight": (4, 3, 3, 3), "0.bias": (4,), "1.weight": (4,), "1.bias": (4,), "4.weight": (3, 144),
        "4.bias": (3,)}
    assert all(type(p) is tpu_runtime.TpuTensor and isinstance(p, torch.nn.Parameter) and p.requires_grad
               for p in params.values())
    assert not any(is_lazy(t) for t in list(net.parameters()) + list(net.buffers()))
    assert out.shape == (2, 3) and out.device.type == "tpu"
    # the same weights on the CPU give the same result (batch norm's statistics: the initial ones)
    ref = _lazy_net()
    ref(x)
    with torch.no_grad():
        ref.load_state_dict({k: v.cpu() for k, v in net.state_dict().items()})
        net.load_state_dict(ref.state_dict())
    torch.testing.assert_close(net(x.to("tpu")).cpu(), ref(x), rtol=1e-4, atol=1e-5)
    assert int(net[1].num_batches_tracked.cpu()) == int(ref[1].num_batches_tracked)


def test_materialized_lazy_module_trains():
    torch.manual_seed(0)
    net = _lazy_net().to("tpu")
    x, y = torch.randn(4, 3, 8, 8).to("tpu"), torch.randn(4, 3).to("tpu")
    net(x)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    losses = []
    for _ in range(3):
        loss = torch.nn.functional.mse_loss(net(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < losses[0]


def test_dtype_change_and_deepcopy_keep_it_uninitialized(moved):
    half = copy.deepcopy(moved).to(torch.float64)
    assert all(type(p) is TpuUninitializedParameter and p.dtype == torch.float64 for p in half.parameters())
    out = half(torch.randn(2, 3, 8, 8, dtype=torch.float64).to("tpu"))
    assert out.dtype == torch.float64 and half[4].weight.shape == (3, 144)
    assert all(type(p) is TpuUninitializedParameter for p in moved.parameters())  # the original is untouched


def test_ordinary_empty_tensors_are_not_made_lazy():
    e = torch.empty(0, 3).to("tpu")
    assert type(e) is tpu_runtime.TpuTensor and e.shape == (0, 3)
    p = torch.nn.Parameter(torch.empty(0)).to("tpu")
    assert type(p) is tpu_runtime.TpuTensor and not is_lazy(p)


def test_pickle_keeps_it_uninitialized(moved):
    import pickle

    again = pickle.loads(pickle.dumps(moved))
    assert all(type(p) is TpuUninitializedParameter and p.requires_grad for p in again.parameters())
    assert again(torch.randn(2, 3, 8, 8).to("tpu")).shape == (2, 3)


def test_moving_an_unmaterialized_one_off_the_device_is_one_clear_error(moved):
    with pytest.raises(RuntimeError, match=r"uninitialized lazy parameter on the tpu device cannot be moved to "
                                           r"cpu \(at .*test_lazy_modules.py:\d+ .*\).*first forward"):
        copy.deepcopy(moved).cpu()
    net = copy.deepcopy(moved)
    net(torch.randn(2, 3, 8, 8).to("tpu"))
    assert net.cpu()[4].weight.shape == (3, 144)  # materialized: moves as any module
