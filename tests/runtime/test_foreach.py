"""``torch._foreach_*`` on tpu tensors: foreach optimizers and direct calls, against CPU."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime

from tests.runtime.conftest import batch, tiny_mlp, train_steps


@pytest.mark.parametrize("optim,kwargs", [
    (torch.optim.AdamW, {"lr": 0.05, "foreach": True}),
    (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "weight_decay": 0.01, "foreach": True}),
], ids=["adamw", "sgd"])
def test_foreach_optimizer_steps_match_cpu(optim, kwargs):
    model = tiny_mlp()
    ref = copy.deepcopy(model)
    x, y = batch()
    model.to("tpu")
    got = train_steps(model, optim(model.parameters(), **kwargs), x.to("tpu"), y.to("tpu"), 3)
    want = train_steps(ref, optim(ref.parameters(), **kwargs), x, y, 3)
    assert got == pytest.approx(want, rel=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_optimizers_default_to_foreach_for_tpu_tensors_as_for_a_privateuse1_device():
    # torch.optim checks the exact tensor type before its foreach default: tpu parameters (a tensor
    # subclass) took the per-parameter loop, one op per parameter and update; CPU tensors are unaffected
    import tpu_runtime
    from torch.optim.optimizer import _default_to_fused_or_foreach
    from tpu_runtime.eager.debug import REPORT

    assert _default_to_fused_or_foreach(list(tiny_mlp().parameters()), False) == (False, False)
    assert _default_to_fused_or_foreach(list(tiny_mlp().to("tpu").parameters()), False) == (False, True)
    x, y = batch()
    ops = {}
    for foreach in (None, True, False):
        model = tiny_mlp()
        ref = copy.deepcopy(model)
        model.to("tpu")
        opt = torch.optim.AdamW(model.parameters(), lr=0.05, foreach=foreach)
        train_steps(model, opt, x.to("tpu"), y.to("tpu"), 1)
        with tpu_runtime.set_eager_mode("debug"):
            got = train_steps(model, opt, x.to("tpu"), y.to("tpu"), 1)
            ops[foreach] = REPORT.ops
        ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.05)
        assert got == pytest.approx(train_steps(ref, ref_opt, x, y, 2)[1:], rel=1e-5)
    assert ops[None] == ops[True] < ops[False]


def _lists(seed: int = 0) -> tuple[list, list]:
    g = torch.Generator().manual_seed(seed)
    cpu = [torch.randn(3, 4, generator=g), torch.randn(5, generator=g), torch.randn(2, 2, 2, generator=g)]
    return cpu, [t.to("tpu") for t in cpu]


def test_foreach_calls_match_cpu():
    (a, ta), (b, tb), (c, tc) = _lists(0), _lists(1), _lists(2)
    for x, y in zip(torch._foreach_add(ta, tb, alpha=2.0), torch._foreach_add(a, b, alpha=2.0)):
        torch.testing.assert_close(x.cpu(), y)
    for x, y in zip(torch._foreach_norm(ta), torch._foreach_norm(a)):
        torch.testing.assert_close(x.cpu(), y)
    torch._foreach_mul_(ta, 0.5)
    torch._foreach_mul_(a, 0.5)
    scalars = torch.tensor([0.1, -2.0, 3.0])
    torch._foreach_addcdiv_(ta, tb, [t.abs() + 1 for t in tc], scalars)
    torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in c], scalars)
    torch._foreach_lerp_(ta, tc, 0.25)
    torch._foreach_lerp_(a, c, 0.25)
    for x, y in zip(ta, a):
        assert x.device.type == "tpu"
        torch.testing.assert_close(x.cpu(), y)


def test_clip_grad_norm_foreach_matches_cpu():
    cpu, tpu = _lists(3)
    params = [torch.nn.Parameter(torch.zeros_like(t)) for t in cpu]
    tparams = [torch.nn.Parameter(torch.zeros_like(t)) for t in tpu]
    for p, g in zip(params, cpu):
        p.grad = g.clone()
    for p, g in zip(tparams, tpu):
        p.grad = g.clone()
    want = torch.nn.utils.clip_grad_norm_(params, 0.5, foreach=True)
    got = torch.nn.utils.clip_grad_norm_(tparams, 0.5, foreach=True)
    torch.testing.assert_close(got.cpu(), want)
    for p, q in zip(tparams, params):
        torch.testing.assert_close(p.grad.cpu(), q.grad)


def test_a_foreach_call_is_one_node_of_the_fused_graph_and_a_new_scalar_reuses_it():
    import tpu_runtime
    from tpu_runtime.eager import fused

    (a, ta), (b, tb) = _lists(4), _lists(5)
    with tpu_runtime.set_eager_mode("fused"):
        tpu_runtime.sync()
        torch._foreach_addcdiv_(ta, tb, [t.abs() + 1 for t in tb], torch.tensor([0.5, 1.5, -1.0]))
        names = [plan.name for plan, _ in fused.GRAPH.nodes]
        tpu_runtime.sync()
    assert names.count("aten._foreach_addcdiv.Tensor") == 1  # three tensors, one node
    torch._foreach_addcdiv_(a, b, [t.abs() + 1 for t in b], torch.tensor([0.5, 1.5, -1.0]))
    for x, y in zip(ta, a):
        torch.testing.assert_close(x.cpu(), y)
    torch._foreach_mul_(ta, 0.25)  # strict: compiles once …
    with tpu_runtime.cache_only():
        torch._foreach_mul_(ta, 0.75)  # … and a new python scalar is an input of the same executable
    torch._foreach_mul_(a, 0.25)
    torch._foreach_mul_(a, 0.75)
    for x, y in zip(ta, a):
        torch.testing.assert_close(x.cpu(), y)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_an_in_place_foreach_call_writes_through_views_into_their_base(mode):
    # each result is written straight into its target: a view's write must reach the base it aliases
    import tpu_runtime

    base = torch.arange(12.0).reshape(3, 4)
    tbase = base.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        torch._foreach_mul_([tbase[0], tbase[:, 3], tbase[2, 1:3]], [2.0, -1.0, 0.5])
        got = tbase.cpu()
    torch._foreach_mul_([base[0], base[:, 3], base[2, 1:3]], [2.0, -1.0, 0.5])
    torch.testing.assert_close(got, base)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_an_in_place_foreach_call_over_aliasing_lists_runs_element_by_element_as_torch_does(mode):
    # torch writes element 0 before it reads element 1: a target that another element reads (or
    # that overlaps another target) sees the earlier writes
    import tpu_runtime

    a, b = torch.randn(4), torch.randn(4)
    ta, tb = a.to("tpu"), b.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        torch._foreach_add_([ta, tb], [tb, ta])
        got = [ta.cpu(), tb.cpu()]
    torch._foreach_add_([a, b], [b, a])
    torch.testing.assert_close(got, [a, b])
    c = torch.rand(4) + 1  # ... with a scalar list too (which has no storage to compare)
    ta, tb, tc = a.to("tpu"), b.to("tpu"), c.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        torch._foreach_addcdiv_([ta, tb], [tb, ta], [tc, tc], [0.5, -2.0])
        got = [ta.cpu(), tb.cpu()]
    torch._foreach_addcdiv_([a, b], [b, a], [c, c], [0.5, -2.0])
    torch.testing.assert_close(got, [a, b])


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_foreach_maximum_and_minimum_with_scalars_match_cpu(mode):
    # torch.maximum takes no scalar: the per-tensor op of their Scalar / ScalarList overloads is clamp_min / clamp_max
    base = [torch.tensor([-1.0, 0.05, 2.0]), torch.tensor([0.3, -0.4])]
    calls = [lambda ts: torch._foreach_maximum(ts, 0.1), lambda ts: torch._foreach_minimum(ts, [0.1, -0.2]),
             lambda ts: (torch._foreach_maximum_(ts, [0.0, 0.5]), ts)[1],
             lambda ts: (torch._foreach_minimum_(ts, 0.0), ts)[1]]
    with tpu_runtime.set_eager_mode(mode):
        for call in calls:
            want = call([t.clone() for t in base])
            got = call([t.clone().to("tpu") for t in base])
            for g, w in zip(got, want):
                torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_in_place_foreach_ops_bump_the_autograd_version_as_on_cpu(mode):
    # an optimizer step (foreach by default) between two backwards through one graph: the CPU raises, the
    # device ran the second backward on the updated weights (the foreach ops left the versions alone)
    with tpu_runtime.set_eager_mode(mode):
        x, y = torch.zeros(3, device="tpu"), torch.zeros(3, device="tpu")
        torch._foreach_add_([x, y], 1.0)
        torch._foreach_mul_([x], [y])
        assert (x._version, y._version) == (2, 1)
        model = torch.nn.Linear(3, 3).to("tpu")
        out = model(torch.ones(2, 3, device="tpu", requires_grad=True)).sum()
        out.backward(retain_graph=True)
        torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9).step()
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.backward()
