"""Channels-last layouts on the tpu device: converted tensors and modules report the CPU's strides."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime

_CL = torch.channels_last
_CONVERSIONS = {
    "to": lambda t: t.to(memory_format=_CL),
    "contiguous": lambda t: t.contiguous(memory_format=_CL),
    "clone": lambda t: t.clone(memory_format=_CL),
    "clone preserves": lambda t: t.to(memory_format=_CL).clone(),
    "detach": lambda t: t.to(memory_format=_CL).detach(),
    "Parameter": lambda t: torch.nn.Parameter(t.to(memory_format=_CL)),
    "dtype copy": lambda t: t.to(memory_format=_CL).double(),
    "in place": lambda t: t.to(memory_format=_CL).mul_(2),
    "zeros_like": lambda t: torch.zeros_like(t.to(memory_format=_CL)),
    "empty": lambda t: torch.empty(2, 3, 4, 5, memory_format=_CL, device=t.device).zero_(),
    "back to contiguous": lambda t: t.to(memory_format=_CL).contiguous(),
    "3d": lambda t: t.unsqueeze(2).to(memory_format=torch.channels_last_3d),
    "to the cpu": lambda t: t.to(memory_format=_CL).cpu(),
}


@pytest.mark.parametrize("name", list(_CONVERSIONS))
def test_channels_last_conversions_report_the_cpu_strides(name):
    x = torch.randn(2, 3, 4, 5)
    want, got = _CONVERSIONS[name](x), _CONVERSIONS[name](x.to("tpu"))
    assert got.stride() == want.stride()
    assert got.is_contiguous(memory_format=_CL) == want.is_contiguous(memory_format=_CL)
    torch.testing.assert_close(got.detach().cpu(), want.detach())


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_channels_last_model_trains_as_on_the_cpu(mode):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.BatchNorm2d(4), torch.nn.ReLU(), torch.nn.Flatten(),
                                torch.nn.Linear(24, 2))
    ref = copy.deepcopy(model).to(memory_format=_CL)
    model = model.to("tpu").to(memory_format=_CL)
    assert model[0].weight.stride() == ref[0].weight.stride() == (27, 1, 9, 3)
    x = torch.randn(2, 3, 4, 5)
    opts = torch.optim.SGD(ref.parameters(), lr=0.1), torch.optim.SGD(model.parameters(), lr=0.1)
    with tpu_runtime.set_eager_mode(mode):
        for _ in range(2):
            losses = []
            for m, opt, data in ((ref, opts[0], x), (model, opts[1], x.to("tpu"))):
                loss = m(data.to(memory_format=_CL)).sum()
                loss.backward()
                opt.step()
                opt.zero_grad()
                losses.append(loss.item())
            assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    assert model[0].weight.stride() == (27, 1, 9, 3)


#: Views of a channels-last tensor, each written through.
_VIEWS = {
    "as_strided": lambda t: t.as_strided((3,), (1,), 0),  # the first pixel's channels (storage order)
    "as_strided offset": lambda t: t.as_strided((2, 2), (2, 6), 5),
    "slice": lambda t: t[:, :, 1:],
    "select then as_strided": lambda t: t[1].as_strided((4,), (3,)),  # from the view's own storage offset
    "permute slice": lambda t: t.permute(0, 2, 3, 1)[:, 1:, :, :2],
    "3d slice": lambda t: t[..., 1:],
    "3d as_strided": lambda t: t.as_strided((2, 3), (1, 3), 4),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(_VIEWS))
def test_views_of_a_channels_last_tensor_report_its_layout_and_write_through(name, mode):
    if name.startswith("3d"):
        x = torch.arange(240.0).reshape(2, 3, 2, 4, 5).contiguous(memory_format=torch.channels_last_3d)
    else:
        x = torch.arange(120.0).reshape(2, 3, 4, 5).contiguous(memory_format=_CL)
    want, got = x.clone(), x.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        wv, gv = _VIEWS[name](want), _VIEWS[name](got)
        assert (gv.stride(), gv.storage_offset()) == (wv.stride(), wv.storage_offset())
        torch.testing.assert_close(gv.cpu(), wv, rtol=0, atol=0)
        for v in (wv, gv):
            v.mul_(-1)  # the write reaches the base, at the elements the CPU's does
        torch.testing.assert_close(got.cpu(), want, rtol=0, atol=0)
        torch.testing.assert_close(gv.cpu(), wv, rtol=0, atol=0)


_PRESERVING = {
    "to_tpu": lambda cpu, tpu: cpu.permute(0, 3, 1, 2).to(tpu.device),
    "cpu": lambda cpu, tpu: tpu.permute(0, 3, 1, 2).cpu(),
    "clone": lambda cpu, tpu: tpu.transpose(1, 2).clone(),
    "empty_like": lambda cpu, tpu: torch.empty_like(tpu.permute(3, 2, 1, 0)).fill_(1.5),
    "zeros_like": lambda cpu, tpu: torch.zeros_like(tpu.transpose(0, 3)),
    "to_dtype": lambda cpu, tpu: tpu.permute(0, 2, 3, 1).double(),
}


@pytest.mark.parametrize("name", list(_PRESERVING))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_preserve_format_keeps_any_dense_layout_as_on_the_cpu(name, mode):
    # a copy of a permuted tensor reports the permuted strides (it was dense), so permuting it back gives a tensor
    # .view() takes, as on the CPU (the dense copy refused that view)
    fn = _PRESERVING[name]
    base = torch.arange(120.0).view(2, 3, 4, 5)
    want = fn(base, base.clone())
    with tpu_runtime.set_eager_mode(mode):
        got = fn(base, base.to("tpu"))
        assert got.stride() == want.stride() and got.dtype == want.dtype
        torch.testing.assert_close(got.cpu(), want)
        order = sorted(range(4), key=lambda d: -want.stride(d))  # the permutation that makes it contiguous again
        torch.testing.assert_close(got.permute(order).view(-1).cpu(), want.permute(order).view(-1))


#: Ops on laid-out tensors whose results torch lays out as their inputs.
_FOLLOWING = {
    "mul of a transpose": lambda t: t.transpose(0, 3) * 2,
    "add of two permutes": lambda t: t.permute(0, 2, 3, 1) + t.permute(0, 2, 3, 1),
    "gelu of a permute": lambda t: torch.nn.functional.gelu(t.permute(3, 1, 2, 0)),
    # (by a dense tensor: torch's floor-division meta lays the result out dense, the CPU's kernel as the first input)
    "floor division of a transpose": lambda t: t.transpose(0, 3) // torch.full((5, 3, 4, 2), 0.7, device=t.device),
    "div floor of a permute": lambda t: torch.div(t.permute(0, 2, 3, 1), torch.full((2, 4, 5, 3), 0.3, device=t.device),
                                                  rounding_mode="floor"),
    "where of a channels-last": lambda t: torch.where(t.contiguous(memory_format=_CL) > 0, t, 0.0),
    "conv2d of a channels-last": lambda t: torch.nn.functional.conv2d(t.contiguous(memory_format=_CL),
                                                                      torch.ones(2, 3, 2, 2, device=t.device)),
    # decompositions traced into one plan, and foreach ops
    "bilinear of a channels-last": lambda t: torch.nn.functional.interpolate(
        t.contiguous(memory_format=_CL), scale_factor=2, mode="bilinear"),
    "pixel_unshuffle of a channels-last": lambda t: torch.nn.functional.pixel_unshuffle(
        t[:, :, :, :4].contiguous(memory_format=_CL), 2),
    "batch_norm of a channels-last": lambda t: torch.nn.functional.batch_norm(
        t.contiguous(memory_format=_CL), None, None, training=True),
    "foreach of a channels-last": lambda t: torch._foreach_mul([t.contiguous(memory_format=_CL)], 2.0)[0],
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(_FOLLOWING))
def test_results_of_ops_on_laid_out_tensors_are_laid_out_as_on_the_cpu(name, mode):
    # (x.t() * 2).t().view(-1) works on the CPU: the product is laid out as x.t(); it raised when results were dense
    x = torch.randn(2, 3, 4, 5)
    want = _FOLLOWING[name](x)
    with tpu_runtime.set_eager_mode(mode):
        got = _FOLLOWING[name](x.to("tpu"))
        assert got.stride() == want.stride()
        order = sorted(range(4), key=lambda d: -want.stride(d))  # the permutation that makes it contiguous
        torch.testing.assert_close(got.permute(order).view(-1).cpu(), want.permute(order).view(-1))


def test_gradients_take_the_layout_of_their_leaf():
    # AccumulateGrad lays a gradient out as its leaf (new_empty_strided with the leaf's strides), as on the CPU
    x = torch.randn(2, 3, 4, 5).permute(0, 2, 3, 1)
    for leaf in (x.clone().requires_grad_(), x.to("tpu").requires_grad_()):
        leaf.to(torch.float64).sum().backward()
        assert leaf.grad.stride() == x.stride()


def test_an_out_tensor_resized_by_the_op_takes_the_results_layout():
    # torch lays a resized out= tensor out as the result (an out of the right shape keeps its own layout)
    x = torch.randn(2, 3, 4, 5).contiguous(memory_format=_CL)
    for device in ("cpu", "tpu"):
        b, out, same = x.to(device), torch.empty(0, device=device), torch.empty(2, 3, 4, 5, device=device)
        torch.add(b, 1, out=out)
        torch.add(b, 1, out=same)
        assert out.stride() == (60, 1, 15, 3) and same.stride() == (60, 20, 5, 1)
        out.as_strided((3,), (1,), 0).fill_(-7.0)  # the first pixel's channels, in storage order
        assert (out.cpu() == -7.0).nonzero().tolist() == [[0, c, 0, 0] for c in range(3)]


@pytest.mark.parametrize("dtype", [torch.int16, torch.float64])
def test_a_dtype_view_of_another_size_refuses_a_layout_the_cpu_refuses(dtype):
    # the CPU needs stride(-1) 1 to view as another element size; the dense value would have given a silent reshape
    x = torch.randn(2, 3, 4, 4)
    for laid_out in (lambda t: t.to(memory_format=_CL), lambda t: t.transpose(-1, -2)):
        for device in ("cpu", "tpu"):
            with pytest.raises(RuntimeError, match="stride\\(-1\\) must be 1 to view Float as"):
                laid_out(x.to(device)).view(dtype)
    got = x.to("tpu")[..., :2].view(dtype)  # stride(-1) 1: allowed
    assert torch.equal(got.cpu(), x[..., :2].view(dtype))


@pytest.mark.parametrize("grad", [False, True])
def test_compiled_convolutions_of_a_channels_last_input_are_laid_out_as_on_the_cpu(grad):
    # the fake convolution of this device answers the contiguous format, and traced results reported dense
    # strides: a compiled Conv2d of a channels-last input returned NCHW strides (its .view(n, -1) worked where the
    # CPU's raises), and a second convolution after it then saw a contiguous input
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3, padding=1), torch.nn.BatchNorm2d(4), torch.nn.ReLU(),
                                torch.nn.ConvTranspose2d(4, 2, 2, stride=2), torch.nn.Upsample(scale_factor=2))
    x = torch.randn(2, 3, 4, 4).to(memory_format=_CL)
    want = model(x.clone().requires_grad_(grad))
    got = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")(x.to("tpu").requires_grad_(grad))
    assert got.stride() == want.stride() == (512, 1, 32, 2)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-4, atol=1e-5)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        got.view(2, -1)
