"""``torch.optim.*(fused=True)`` on tpu tensors: one plan per optimizer step, against CPU's fused kernels."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime
from tests.runtime.conftest import batch, tiny_mlp, train_steps
from tpu_runtime.eager import fused

CASES = [
    (torch.optim.AdamW, {"lr": 0.05, "weight_decay": 0.1}),
    (torch.optim.Adam, {"lr": 0.05, "weight_decay": 0.01, "amsgrad": True}),
    (torch.optim.Adam, {"lr": 0.05, "maximize": True}),
    (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}),
    (torch.optim.SGD, {"lr": 0.05, "momentum": 0.9, "dampening": 0.2}),
    (torch.optim.SGD, {"lr": 0.05}),
    (torch.optim.Adagrad, {"lr": 0.05, "lr_decay": 0.01, "weight_decay": 0.01}),
    (torch.optim.AdamW, {"lr": torch.tensor(0.05)}),
]
IDS = ["adamw", "adam-amsgrad", "adam-maximize", "sgd-nesterov", "sgd-dampening", "sgd-plain", "adagrad",
       "adamw-tensor-lr"]


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("optim,kwargs", CASES, ids=IDS)
def test_fused_optimizer_steps_match_cpu(optim, kwargs, mode):
    model = tiny_mlp()
    ref = copy.deepcopy(model)
    x, y = batch()
    model.to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        got = train_steps(model, optim(model.parameters(), fused=True, **kwargs), x.to("tpu"), y.to("tpu"), 3)
    want = train_steps(ref, optim(ref.parameters(), fused=True, **kwargs), x, y, 3)
    assert got == pytest.approx(want, rel=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.device.type == "tpu"
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_fused_adagrad_of_half_parameters_takes_its_scalars_in_their_dtype_as_on_the_cpu(dtype):
    # the CPU's vectorized kernel rounds the step's lr, eps and weight decay to the parameters' dtype: in float32
    # 63 of 1000 bf16 parameters ended a unit apart after 3 steps
    g = torch.Generator().manual_seed(0)
    w, grad = (torch.randn(1024, generator=g).to(dtype) for _ in range(2))
    out = []
    for device in ("tpu", "cpu"):
        p = torch.nn.Parameter(w.clone().to(device))
        opt = torch.optim.Adagrad([p], lr=0.1, lr_decay=0.01, weight_decay=0.03, eps=1e-3, fused=True)
        for _ in range(3):
            p.grad = grad.clone().to(device)
            opt.step()
        out.append((p.detach().cpu(), opt.state[p]["sum"].cpu()))
    assert torch.equal(out[0][0], out[1][0]) and torch.equal(out[0][1], out[1][1])


def _step_graph(opt, monkeypatch) -> list:
    """The names of the ops ``opt.step()`` records in fused eager (its end starts their graph)."""
    seen, flush = [], fused.GRAPH.flush

    def spy(*cause):
        seen.append([plan.name for plan, _ in fused.GRAPH.nodes])
        flush(*cause)

    monkeypatch.setattr(fused.GRAPH, "flush", spy)
    opt.step()
    monkeypatch.undo()
    assert len(seen) == 1 and not fused.GRAPH.nodes  # one graph, started at the end of the step
    return seen[0]


def test_fused_optimizer_step_is_one_node_of_the_fused_graph(monkeypatch):
    model = tiny_mlp().to("tpu")
    x, y = batch()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    with tpu_runtime.set_eager_mode("fused"):
        train_steps(model, opt, x.to("tpu"), y.to("tpu"), 1)
        model(x.to("tpu")).sum().backward()
        tpu_runtime.sync()
        names = _step_graph(opt, monkeypatch)
    assert names.count("aten._fused_adamw.default") == 1  # every parameter's update in one node
    others = [n for n in names if n != "aten._fused_adamw.default"]
    # the rest: the step counters' increment, and the gradients that are views (a linear weight's
    # is the transpose of a matmul) replayed on their storage: a view's value is not kept across a sync
    assert any("add" in n for n in others) and all("add" in n or n.startswith("view ") for n in others)


def test_fused_eager_writes_the_step_into_the_parameters_without_wrappers(monkeypatch):
    # each parameter's and moment's new value becomes its tensor's pending value directly (as a foreach step's
    # do): no wrapper tensor per result, written back one by one (measured on examples' minGPT: 0.87 ms of
    # dispatch per step that way, 0.37 ms this way)
    from tpu_runtime import execute

    model = tiny_mlp().to("tpu")
    x, y = batch()
    opt = torch.optim.AdamW(model.parameters(), lr=0.05, fused=True)
    wrapped, wrap = [], execute.wrap
    with tpu_runtime.set_eager_mode("fused"):
        train_steps(model, opt, x.to("tpu"), y.to("tpu"), 1)
        model(x.to("tpu")).sum().backward()
        before = [p.detach().cpu() for p in model.parameters()]
        monkeypatch.setattr(execute, "wrap", lambda *a: wrapped.append(a) or wrap(*a))
        opt.step()
        monkeypatch.undo()
    assert not wrapped
    assert all(not torch.equal(p.detach().cpu(), b) for p, b in zip(model.parameters(), before))


def test_grad_scale_unscales_and_found_inf_skips_the_step():
    g = torch.Generator().manual_seed(0)
    cpu = {name: [torch.randn(3, 2, generator=g), torch.randn(4, generator=g)]
           for name in ("params", "grads", "exp_avgs")}
    cpu["exp_avg_sqs"] = [t.abs() for t in cpu["exp_avgs"]]
    for found in (0.0, 1.0):
        state = {k: [t.clone() for t in v] for k, v in cpu.items()}
        tstate = {k: [t.to("tpu") for t in v] for k, v in cpu.items()}
        kw = dict(lr=0.1, beta1=0.9, beta2=0.99, weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)
        for s, steps, dev in ((state, [torch.tensor(3.0)] * 2, "cpu"), (tstate, [torch.tensor(3.0).to("tpu")] * 2, "tpu")):
            torch._fused_adamw_(s["params"], s["grads"], s["exp_avgs"], s["exp_avg_sqs"], [], steps, **kw,
                                grad_scale=torch.tensor(4.0).to(dev), found_inf=torch.tensor(found).to(dev))
        for k in cpu:
            for a, b, orig in zip(tstate[k], state[k], cpu[k]):
                torch.testing.assert_close(a.cpu(), b, rtol=1e-6, atol=1e-7)
                if found == 1.0:
                    assert torch.equal(a.cpu(), orig)  # a skipped step changes nothing


def test_a_new_learning_rate_reuses_the_compiled_step():
    model = tiny_mlp().to("tpu")
    x, y = batch()
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, fused=True)
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    tx, ty = x.to("tpu"), y.to("tpu")
    for _ in range(2):  # the first step (momentum buffers start as the gradient) and a later one compile
        train_steps(model, opt, tx, ty, 1)
        sched.step()
    with tpu_runtime.cache_only():
        train_steps(model, opt, tx, ty, 1)  # lr is now 0.0125: the same executable
