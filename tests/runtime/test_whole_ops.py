"""``F.linear`` and ``torch.matmul`` on tpu tensors run as one op forward and one op backward
(tpu_runtime.whole_ops), with the values and gradients of PyTorch on the CPU."""

from __future__ import annotations

import copy
import re

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import tpu_runtime

aten = torch.ops.aten


class _Ops(TorchDispatchMode):
    """Records the ATen ops that reach the tpu device."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _pair(*shapes, seed=0, dtype=torch.float32):
    """CPU leaves of ``shapes`` requiring grad, and their tpu copies (leaves too)."""
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(s, generator=g, dtype=dtype).requires_grad_() for s in shapes]
    return cpu, [t.detach().to("tpu").requires_grad_() for t in cpu]


def _check_grads(cpu, tpu, rtol=1e-5, atol=1e-5):
    for c, t in zip(cpu, tpu):
        assert t.grad is not None and t.grad.device.type == "tpu"
        torch.testing.assert_close(t.grad.cpu(), c.grad, rtol=rtol, atol=atol)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_linear_layer_is_one_op_forward_and_one_backward(mode):
    with tpu_runtime.set_eager_mode(mode):
        (x,), (xt,) = _pair((2, 5, 4))
        layer = torch.nn.Linear(4, 3)
        dev = copy.deepcopy(layer).to("tpu")
        with _Ops() as seen:
            out = dev(xt)
            out.sum().backward()
        layer(x).sum().backward()
        torch.testing.assert_close(out.detach().cpu(), layer(x).detach())
    ops = [op for op in seen.ops if op not in (aten.detach.default, aten.ones_like.default, aten.sum.default,
                                               aten.expand.default)]
    assert ops == [aten.linear.default, aten.linear_backward.default]
    _check_grads([x, layer.weight, layer.bias], [xt, dev.weight, dev.bias])


@pytest.mark.parametrize("input_shape, weight_shape, bias", [
    ((3, 4), (5, 4), True),          # a batch of vectors
    ((4,), (5, 4), True),            # one vector
    ((2, 3, 4), (5, 4), False),      # no bias
    ((2, 1, 3, 4), (2, 4), True),    # 4-D
    ((0, 3, 4), (5, 4), True),       # empty batch
    ((2, 3), (0, 3), True),          # no output features
])
def test_linear_values_and_gradients_match_cpu(input_shape, weight_shape, bias):
    shapes = [input_shape, weight_shape] + ([weight_shape[:1]] if bias else [])
    cpu, tpu = _pair(*shapes, seed=1)
    out = F.linear(*tpu)
    ref = F.linear(*cpu)
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    _check_grads(cpu, tpu)


def test_linear_of_a_transposed_weight_and_an_input_that_needs_no_gradient():
    # a tied, transposed weight (a view) and a constant input: only the weight's gradient is made
    (w,), (wt,) = _pair((4, 6), seed=2)
    x = torch.randn(3, 4)
    out = F.linear(x.to("tpu"), wt.t())
    ref = F.linear(x, w.t())
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    out.pow(2).sum().backward()
    ref.pow(2).sum().backward()
    _check_grads([w], [wt])


@pytest.mark.parametrize("a_shape, b_shape", [
    ((3, 4), (4, 5)),                # matrices
    ((2, 3, 4), (4, 5)),             # a batch times a matrix
    ((3, 4), (2, 4, 5)),             # a matrix times a batch
    ((2, 1, 3, 4), (5, 4, 6)),       # broadcast batch dimensions (summed back in the gradients)
    ((5, 0), (0, 10)),               # empty dimensions (the kernel's reshapes failed beside them)
    ((5, 5, 0), (0, 5)),
    ((0, 0), (5, 0, 0)),
])
def test_matmul_values_and_gradients_match_cpu(a_shape, b_shape):
    cpu, tpu = _pair(a_shape, b_shape, seed=3)
    out = tpu[0] @ tpu[1]
    ref = cpu[0] @ cpu[1]
    assert out.shape == ref.shape and out.stride() == ref.stride()
    torch.testing.assert_close(out.detach().cpu(), ref.detach())
    (out * out).sum().backward()
    (ref * ref).sum().backward()
    _check_grads(cpu, tpu)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_attention_scores_of_transposed_heads_are_one_op_each_way(mode):
    # minGPT's q @ k.transpose(-2, -1): no copy of the transposed operand, one op forward and backward
    with tpu_runtime.set_eager_mode(mode):
        cpu, tpu = _pair((2, 3, 5, 4), (2, 3, 5, 4), seed=4)
        with _Ops() as seen:
            out = tpu[0] @ tpu[1].transpose(-2, -1)
            grads = torch.autograd.grad(out.sum(), tpu)
        ref = cpu[0] @ cpu[1].transpose(-2, -1)
        ref_grads = torch.autograd.grad(ref.sum(), cpu)
        torch.testing.assert_close(out.detach().cpu(), ref.detach())
        for g, r in zip(grads, ref_grads):
            torch.testing.assert_close(g.cpu(), r)
    assert aten.clone.default not in seen.ops and aten.bmm.default not in seen.ops
    assert seen.ops.count(aten.matmul.default) == 1 and seen.ops.count(aten.matmul_backward.default) == 1


def test_second_order_gradients_match_cpu():
    # a gradient penalty: create_graph=True runs the backward as differentiable ops
    (x, w, b), (xt, wt, bt) = _pair((3, 4), (2, 4), (2,), seed=5)
    results = []
    for x_, w_, b_ in ((x, w, b), (xt, wt, bt)):
        h = torch.tanh(F.linear(x_, w_, b_)) @ w_
        (gx,) = torch.autograd.grad(h.sum(), x_, create_graph=True)
        (gx * gx).sum().backward()
        results.append(gx)
    torch.testing.assert_close(results[1].detach().cpu(), results[0].detach())
    _check_grads([x, w, b], [xt, wt, bt])


@pytest.mark.parametrize("context", [torch.inference_mode, torch.no_grad])
def test_linear_and_matmul_without_autograd_take_every_shape(context):
    # with the autograd keys skipped (inference mode), the ops reach the device whole, vector operands too
    g = torch.Generator().manual_seed(6)
    x, w, v, m = (torch.randn(s, generator=g) for s in ((2, 3, 4), (5, 4), (4,), (3, 3)))
    cases = [(F.linear, x, w), (F.linear, x, v), (torch.matmul, v, v), (torch.matmul, x, v), (torch.matmul, v, w.t()),
             (torch.matmul, m, x), (torch.matmul, x, x.mT)]
    with context():
        for fn, a, b in cases:
            out = fn(a.to("tpu"), b.to("tpu"))
            ref = fn(a, b)
            assert out.shape == ref.shape
            torch.testing.assert_close(out.cpu(), ref)


def test_a_saved_input_written_in_place_is_refused_as_on_the_cpu():
    (x, w), (xt, wt) = _pair((3, 4), (2, 4), seed=7)
    for x_, w_ in ((x, w), (xt, wt)):
        h = x_ * 1.0
        out = F.linear(h, w_)
        h.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def test_a_frozen_weight_keeps_no_input_so_the_input_may_be_written_in_place_as_on_the_cpu():
    # as torch's own formulas: the input is saved only for the weight's gradient (LoRA-style frozen layers)
    (x,), (xt,) = _pair((3, 4), seed=9)
    w = torch.randn(2, 4, generator=torch.Generator().manual_seed(9))
    grads = []
    for x_, w_ in ((x, w), (xt, w.to("tpu"))):
        h = x_ * 2.0
        out = F.linear(h, w_) @ w_
        h.add_(1)
        out.pow(2).sum().backward()
        grads.append(x_.grad)
    torch.testing.assert_close(grads[1].cpu(), grads[0])


def test_debug_mode_compares_the_backward_ops_with_the_cpu():
    from tpu_runtime.eager import REPORT

    (x, w), (xt, wt) = _pair((2, 3, 4), (5, 4), seed=8)
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True):
        (F.linear(xt, wt) @ wt).sum().backward()
        assert REPORT.findings == [] and REPORT.uncompared == 0 and REPORT.compared >= 4


@pytest.mark.parametrize("context", [torch.inference_mode, torch.no_grad, torch.enable_grad])
@pytest.mark.parametrize("case", ["mixed_dtypes", "sizes", "batch_sizes", "int64", "bool_matmul", "zero_dim_matmul"])
def test_calls_the_cpu_refuses_are_refused_and_integer_ones_computed(context, case):
    # in inference mode linear reaches the table row whole: it computed float32 @ float64 the CPU refuses
    a, b, fn = {"mixed_dtypes": (torch.ones(2, 3), torch.ones(4, 3, dtype=torch.float64), F.linear),
                "sizes": (torch.ones(2, 3), torch.ones(4, 4), F.linear),
                "batch_sizes": (torch.ones(2, 3, 4), torch.ones(3, 4, 5), torch.matmul),  # batch dims that do not broadcast
                "int64": (torch.arange(6).view(2, 3), torch.arange(12).view(3, 4), torch.matmul),
                "bool_matmul": (torch.ones(2, 3, dtype=torch.bool), torch.ones(3, 4, dtype=torch.bool),
                                torch.matmul),
                "zero_dim_matmul": (torch.tensor(2.0), torch.ones(3), torch.matmul)}[case]  # (torch's decomposition asserted)
    with context():
        try:
            want = fn(a, b)
        except RuntimeError as e:
            with pytest.raises(RuntimeError, match=re.escape(str(e).splitlines()[0][:30])):
                fn(a.to("tpu"), b.to("tpu"))
            return
        got = fn(a.to("tpu"), b.to("tpu"))
    assert torch.equal(got.cpu(), want)


@pytest.mark.parametrize("act", [F.silu, F.mish])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_silu_and_mish_backward_are_one_op_rounded_once_as_on_the_cpu(act, dtype):
    # torch decomposes silu_backward/mish_backward for devices other than CPU and CUDA into ~6 ops, each rounded
    # to the half type: half of the bfloat16 gradients were 1-2 units off the CPU's (4x its error against float64)
    (x, w), (xt, wt) = _pair((256,), (256,), dtype=dtype)
    with torch.no_grad():
        x.mul_(4), xt.mul_(4)
    with _Ops() as seen:
        (act(xt) * wt).sum().backward()
    (act(x) * w).sum().backward()
    assert aten.silu_backward.default in seen.ops or aten.mish_backward.default in seen.ops
    torch.testing.assert_close(xt.grad.cpu(), x.grad, rtol=torch.finfo(dtype).eps, atol=0)  # (a unit at most)
    # a gradient of the gradient takes torch's composite, as before
    (gx,), (gxt,) = (torch.autograd.grad(act(t).sum(), t, create_graph=True) for t in (x, xt))
    (ggx,), (ggxt,) = (torch.autograd.grad(g.sum(), t) for g, t in ((gx, x), (gxt, xt)))
    torch.testing.assert_close(ggxt.cpu(), ggx, rtol=2e-2, atol=2e-2, equal_nan=True)  # (exp overflows float16)


@pytest.mark.parametrize("act", [F.silu, F.mish])
def test_compiled_silu_and_mish_gradients_are_rounded_once_as_on_the_cpu(act):
    # torch.compile's backward met the kernel above with traced tensors, which took torch's composite: bfloat16
    # gradients 2.7x as far from float64 as the CPU's, half of them a unit or two off
    x = torch.linspace(-6, 6, 401, dtype=torch.bfloat16)
    g = torch.linspace(0.5, 1.5, 401, dtype=torch.bfloat16)
    cpu = x.clone().requires_grad_()
    act(cpu).backward(g)
    dev = x.to("tpu").requires_grad_()
    torch.compile(act, backend="tpu")(dev).backward(g.to("tpu"))
    assert torch.equal(dev.grad.cpu(), cpu.grad)
