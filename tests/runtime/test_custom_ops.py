"""Custom ops (``torch.library``) on tpu tensors: their device-agnostic or tpu kernel runs on the device."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime
from converter.errors import UnsupportedOpError


@torch.library.custom_op("tpu_export_test::scale_add", mutates_args=())
def scale_add(x: torch.Tensor, y: torch.Tensor, alpha: float) -> torch.Tensor:
    return x * alpha + y


@scale_add.register_fake
def _(x, y, alpha):
    return torch.empty_like(x)


def _scale_add_backward(ctx, grad):
    return grad * ctx.alpha, grad, None


def _scale_add_context(ctx, inputs, output):
    ctx.alpha = inputs[2]


scale_add.register_autograd(_scale_add_backward, setup_context=_scale_add_context)


@torch.library.custom_op("tpu_export_test::round_ste", mutates_args=())
def round_ste(x: torch.Tensor) -> torch.Tensor:
    return torch.round(x)


@round_ste.register_fake
def _(x):
    return torch.empty_like(x)


# a straight-through estimator: the gradient is not round's (zero) but the identity's, times 10
round_ste.register_autograd(lambda ctx, grad: grad * 10)


@torch.library.custom_op("tpu_export_test::cpu_only", mutates_args=(), device_types="cpu")
def cpu_only(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@torch.library.custom_op("tpu_export_test::per_device", mutates_args=(), device_types="cpu")
def per_device(x: torch.Tensor) -> torch.Tensor:
    return x + 1


@per_device.register_kernel("tpu")
def _(x):
    return x + 2  # a kernel of the tpu device's own


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_device_agnostic_custom_op_and_its_autograd_run_on_the_device(mode):
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    xt, yt = x.to("tpu").requires_grad_(), y.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        out = scale_add(xt, yt, 0.5)
        (out * 2).sum().backward()
        torch.testing.assert_close(out.detach().cpu(), x * 0.5 + y)
        torch.testing.assert_close(xt.grad.cpu(), torch.ones(3, 4))
    assert torch.ops.tpu_export_test.per_device(torch.zeros(2).to("tpu")).cpu().tolist() == [2.0, 2.0]


def test_a_custom_op_for_other_devices_only_names_what_to_register():
    with pytest.raises(UnsupportedOpError, match=r"tpu_export_test.cpu_only.*register_kernel\(op, 'tpu', fn\)"):
        cpu_only(torch.zeros(2).to("tpu"))


def test_chunked_linear_cross_entropy_runs_its_custom_op_on_the_device():
    # torch's chunked path is a torch_nn:: custom op (it raised 'unsupported op')
    g = torch.Generator().manual_seed(0)
    x, w, t = torch.randn(6, 5, generator=g), torch.randn(7, 5, generator=g), torch.randint(0, 7, (6,), generator=g)
    opts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2)
    xr, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want = F.linear_cross_entropy(xr, w, t, options=opts)
    got = F.linear_cross_entropy(xt, w.to("tpu"), t.to("tpu"), options=opts)
    want.backward()
    got.backward()
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("where", ["cpu", "tpu"])
def test_torch_compile_decomposes_a_custom_op_into_its_kernel(where):
    # the graph's custom op had no row: the backend refused it; its registered autograd formula still applies
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    xt, yt = x.clone().to(where).requires_grad_(), y.clone().to(where)
    step = torch.compile(lambda a, b: (scale_add(a, b, 0.5) * 3).sum(), backend="tpu", fullgraph=True)
    out = step(xt, yt)
    out.backward()
    torch.testing.assert_close(out.detach().cpu(), ((x * 0.5 + y) * 3).sum())
    torch.testing.assert_close(xt.grad.cpu(), torch.full((3, 4), 1.5))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compile"])
def test_a_custom_ops_own_gradient_formula_is_kept(compiled):
    x = torch.tensor([0.2, 1.7, -2.4]).to("tpu").requires_grad_()
    fn = (lambda a: round_ste(a).sum())
    if compiled:
        fn = torch.compile(fn, backend="tpu", fullgraph=True)
    out = fn(x)
    out.backward()
    assert out.item() == 0.0 and x.grad.cpu().tolist() == [10.0, 10.0, 10.0]


@torch.library.custom_op("tpu_export_test::fill_twice", mutates_args=())
def fill_twice(x: torch.Tensor) -> torch.Tensor:
    out = torch.empty_like(x)
    out[:1].copy_(x[:1] * 2)  # writes into a slice of its own buffer: not a functional body
    out[1:].copy_(x[1:] * 2)
    return out


@fill_twice.register_fake
def _(x):
    return torch.empty_like(x)


fill_twice.register_autograd(lambda ctx, grad: grad * 2)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_custom_op_whose_body_writes_in_place_runs_eagerly_between_compiled_pieces(mode):
    # its body cannot be traced into AOTAutograd's functional graph: the graph is split around it (it raised)
    x = torch.arange(4.0)
    with tpu_runtime.set_eager_mode(mode):
        assert fill_twice(x.to("tpu")).cpu().tolist() == [0.0, 2.0, 4.0, 6.0]
        step = torch.compile(lambda a, b: (fill_twice(a.sin() * b) + 1).exp().sum(), backend="tpu", fullgraph=True)
        for scale in (1.0, 2.0):  # (the pieces compile once per input signature)
            xt = x.to("tpu").requires_grad_()
            out = step(xt, torch.tensor(scale).to("tpu"))
            out.backward()
            xr = x.clone().requires_grad_()
            want = ((xr.sin() * scale * 2) + 1).exp().sum()
            want.backward()
            torch.testing.assert_close(out.detach().cpu(), want.detach())
            torch.testing.assert_close(xt.grad.cpu(), xr.grad)
        dynamic = torch.compile(lambda a: (fill_twice(a.sin()) + a.shape[0]).sum(), backend="tpu", dynamic=True)
        for n in (4, 3):  # (a size among the inputs)
            torch.testing.assert_close(dynamic(x[:n].to("tpu")).cpu(), (x[:n].sin() * 2 + n).sum())


@pytest.mark.parametrize("retain", [False, True])
def test_chunked_linear_cross_entropy_compiles(retain):
    # allow_retain_graph=True (what torch's warning under torch.compile asks for) traces its chunked op, whose
    # implementation accumulates in place: it runs eagerly between compiled pieces
    g = torch.Generator().manual_seed(1)
    x, w, t = torch.randn(6, 5, generator=g), torch.randn(7, 5, generator=g), torch.randint(0, 7, (6,), generator=g)
    opts = torch.nn.LinearCrossEntropyOptions(batch_chunk_size=2, allow_retain_graph=retain)
    torch._dynamo.reset()  # (the other parameter's compiled code would serve this one)
    xr, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    F.linear_cross_entropy(xr, w, t, options=opts).backward()
    step = torch.compile(lambda a, b, c: F.linear_cross_entropy(a, b, c, options=opts), backend="tpu")
    torch.testing.assert_close(step(x.to("tpu"), w.to("tpu"), t.to("tpu")).cpu(),  # (no gradient first: it raised)
                               F.linear_cross_entropy(x, w, t, options=opts))
    step(xt, w.to("tpu"), t.to("tpu")).backward()
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-6)
