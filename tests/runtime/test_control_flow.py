"""torch.cond, scan and map on tpu tensors: eager (every mode, with gradients) and torch.compile(backend="tpu")."""

from __future__ import annotations

import copy

import pytest
import torch
from torch._higher_order_ops.map import map as hmap
from torch._higher_order_ops.scan import scan

import tpu_runtime


class _Flow(torch.nn.Module):
    """One Linear used inside a control-flow op: a data-dependent branch, a scan over rows, or a map."""

    def __init__(self, kind: str) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin, self.kind = torch.nn.Linear(3, 3), kind

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.kind == "cond":
            return torch.cond(x.sum() > 0, lambda t: self.lin(t).relu(), lambda t: self.lin(t) * 2, (x,))
        if self.kind == "scan":
            h, ys = scan(lambda h, xt: (torch.tanh(self.lin(h) + xt), h * xt), torch.zeros(3, device=x.device), x)
            return ys + h
        return hmap(lambda xt: self.lin(xt).sin(), x)


def _inputs() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(5)
    return [torch.rand(4, 3, generator=g) + 0.1, -torch.rand(4, 3, generator=g) - 0.1]  # both branches of cond


def _agree(kind: str, mode: str) -> None:
    ref = _Flow(kind)
    dev = copy.deepcopy(ref).to("tpu")
    run = torch.compile(dev, backend="tpu") if mode == "compile" else dev
    with tpu_runtime.set_eager_mode("strict" if mode == "compile" else mode):
        for x in _inputs():
            got, want = run(x.to("tpu")), ref(x)
            got.pow(2).sum().backward()
            want.pow(2).sum().backward()
            torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)
            for p, q in zip(dev.parameters(), ref.parameters()):
                torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("kind", ["cond", "scan", "map"])
def test_control_flow_runs_in_eager_with_gradients(kind, mode):
    # each raised inside torch: dynamo's fake rule for cond refused the tpu class's fakes ("expected both a and b
    # to be FakeTensor"), scan and map failed the same way (UncapturedHigherOrderOpError)
    _agree(kind, mode)


def test_compiled_cond_trains_on_the_device():
    torch._dynamo.reset()
    _agree("cond", "compile")


@pytest.mark.parametrize("kind", ["scan", "map"])
def test_compiled_scan_and_map_run_on_the_device(kind):
    # inference (a scan's gradient under torch.compile fails inside torch's own scan functionalization, on the CPU
    # too: README); map had no lowering ("this higher-order op is not supported")
    torch._dynamo.reset()
    ref = _Flow(kind)
    run = torch.compile(copy.deepcopy(ref).to("tpu"), backend="tpu")
    with torch.no_grad():
        for x in _inputs():
            torch.testing.assert_close(run(x.to("tpu")).cpu(), ref(x), rtol=1e-5, atol=1e-5)
