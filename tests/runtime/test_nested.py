"""Nested (jagged) tensors whose components are tpu tensors, against the same on the CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime


def _parts(seed: int = 0, width: int = 4) -> list:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, width, generator=g), torch.randn(3, width, generator=g), torch.randn(1, width, generator=g)]


def _close(got, want) -> None:
    assert got.is_nested and got.device.type == "tpu"
    for u, v in zip(got.unbind(), want.unbind(), strict=True):
        torch.testing.assert_close(u.detach().cpu(), v.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_jagged_tensor_built_on_the_device_or_moved_there_computes_as_on_cpu(mode):
    parts = _parts()
    want = F.softmax((torch.nested.nested_tensor(parts, layout=torch.jagged) * 2 + 1).sin(), dim=-1)
    with tpu_runtime.set_eager_mode(mode):
        # built from tpu components, _nested_view_from_jagged meets tpu values: it is the nested tensor's op
        built = torch.nested.nested_tensor([p.to("tpu") for p in parts], layout=torch.jagged, device="tpu")
        moved = torch.nested.nested_tensor(parts, layout=torch.jagged).to("tpu")
        for nt in (built, moved):
            _close(F.softmax((nt * 2 + 1).sin(), dim=-1), want)


def test_a_linear_layer_on_jagged_tpu_tensors_trains_as_on_cpu():
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    dev = torch.nn.Linear(4, 3).to("tpu")
    dev.load_state_dict(ref.state_dict())
    outs = []
    for layer, x in ((ref, torch.nested.nested_tensor(_parts(1), layout=torch.jagged)),
                     (dev, torch.nested.nested_tensor(_parts(1), layout=torch.jagged).to("tpu"))):
        out = F.gelu(layer(x))
        out.values().square().sum().backward()
        outs.append(out)
    _close(outs[1], outs[0])
    torch.testing.assert_close(dev.weight.grad.cpu(), ref.weight.grad, rtol=1e-4, atol=1e-5)


def test_a_strided_nested_tensor_names_the_layout_that_works():
    # (as does attention on jagged tensors: torch's math path converts them to the strided layout)
    with pytest.raises(Exception, match="layout=torch.jagged"):
        torch.nested.nested_tensor([p.to("tpu") for p in _parts()], device="tpu")


def test_to_padded_tensor_and_its_gradient_match_cpu():
    # _jagged_to_padded_dense_forward and its backward _padded_dense_to_jagged_forward had no rows
    parts = _parts(2)
    ref = torch.nested.nested_tensor(parts, layout=torch.jagged).requires_grad_()
    dev = torch.nested.nested_tensor(parts, layout=torch.jagged).to("tpu").requires_grad_()
    weight = torch.arange(12.0).view(3, 1, 4)
    outs = []
    for nt, w in ((ref, weight), (dev, weight.to("tpu"))):
        padded = nt.to_padded_tensor(-1.0)
        (padded * w).sum().backward()
        outs.append(padded)
    torch.testing.assert_close(outs[1].detach().cpu(), outs[0].detach())
    _close(dev.grad, ref.grad)
