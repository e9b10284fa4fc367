"""torch.cond, while_loop, scan and map: lowered to lax.cond / lax.while_loop / lax.scan for every jaxpr target and torch.compile."""

import pytest
import torch
import torch.nn.functional as F

from converter import convert
from converter.api import build, capture_program
from converter.errors import UnsupportedOpError
from tests.targets import ALL, assert_target_passed
from validators import validate

while_loop = torch._higher_order_ops.while_loop
#: one worker: each model's capture serves every target
pytestmark = pytest.mark.xdist_group("control-flow")


class _Cond(torch.nn.Module):
    """A data-dependent branch (two different weights)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda t: self.a(t).relu(), lambda t: self.b(t) * 2, (x,))


class _Branchy(_Cond):
    """The branch, then a loop whose trip count is data-dependent."""

    def forward(self, x: torch.Tensor) -> tuple:
        y = super().forward(x)
        n, z = while_loop(lambda i, t: t.abs().sum() < 100, lambda i, t: (i + 1, t * 1.5 + 1), (torch.tensor(0), y))
        return z, n


@pytest.fixture(scope="module")
def branchy():
    """One validation of every target (one capture) on an input taking the positive branch."""
    return validate(_Branchy().eval(), (torch.rand(2, 4) + 0.1,), targets=ALL, num_random_inputs=0, errors="report")


@pytest.mark.parametrize("target", ALL)
def test_cond_and_while_loop_export_and_match_pytorch_on_both_branches(branchy, target):
    # they raised "higher-order ops (control flow) are not supported yet"; the program keeps the control
    # flow: one export serves inputs taking either branch and any trip count (ONNX: a Loop, LiteRT: a WHILE;
    # both refused the loop by name before)
    assert_target_passed(branchy, target)
    module = branchy.target(target).artifact
    pos, neg = torch.rand(2, 4) + 0.1, -torch.rand(2, 4) - 0.1
    for x in (pos, neg, pos * 50):
        want = _Branchy()(x)
        got = module(x)
        torch.testing.assert_close(torch.as_tensor(got[0]), want[0], rtol=1e-5, atol=1e-5)
        assert int(got[1]) == int(want[1])
    assert {int(_Branchy()(x)[1]) for x in (pos, pos * 50)} != {0}  # the loop ran, a different number of times


@pytest.fixture(scope="module")
def cond_program():
    """:class:`_Cond` captured once for the targets that build from it."""
    return capture_program(_Cond().eval(), (torch.rand(2, 4) + 0.1,))


@pytest.mark.parametrize("target", ["onnx", "litert"])
def test_cond_exports_to_onnx_and_litert_as_both_branches_and_a_select(cond_program, target):
    pos, neg = torch.rand(2, 4) + 0.1, -torch.rand(2, 4) - 0.1
    art = build(cond_program, target=target)
    for x in (pos, neg):
        torch.testing.assert_close(torch.as_tensor(art(x)), _Cond()(x), rtol=1e-5, atol=1e-5)


def test_control_flow_errors_name_the_users_line():
    # an unsupported op inside a branch is found before tracing
    class Bad(torch.nn.Module):
        def forward(self, x, mask):
            return torch.cond(x.sum() > 0, lambda t, m: torch.ops.aten._masked_scale(t, m, 2.0),
                              lambda t, m: t * 1.0, (x, mask))

    with pytest.raises(UnsupportedOpError, match=r"aten._masked_scale.default for target 'tpu' at "
                                                 r".*test_control_flow.py:\d+"):
        convert(Bad(), (torch.arange(6.0), torch.ones(6, dtype=torch.bool)), target="tpu")


def test_a_branch_is_decomposed_like_the_graph():
    # the branches kept ops the lowering table leaves to the decomposition (detach): "unsupported aten.detach"
    class Detached(torch.nn.Module):
        def forward(self, x):
            return torch.cond(x.sum() > 0, lambda t: F.gelu(t).detach() * 2, lambda t: t.clone(), (x,))

    report = validate(Detached(), (torch.eye(3),), targets=("tpu",), num_random_inputs=1)
    assert report.passed, [(t.target, t.status, t.message) for t in report.targets]


def test_compiled_cond_trains_and_while_loop_runs_as_eager():
    # torch.compile(backend="tpu", fullgraph=True) of CPU tensors: values and gradients through both branches;
    # a loop in inference; a loop whose gradient is needed is refused with the reason
    torch._dynamo.reset()
    w0 = torch.randn(4, 4, generator=torch.Generator().manual_seed(1))

    def f(x, w):
        return torch.cond(x.sum() > 0, lambda t, w: (t @ w).sin(), lambda t, w: (t @ w).cos() * 3, (x, w)).sum()

    def loop(x):
        return while_loop(lambda i, t: t.abs().sum() < 100, lambda i, t: (i + 1, t * 1.5 + 1), (torch.tensor(0), x))

    compiled = torch.compile(f, backend="tpu", fullgraph=True)
    for x in (torch.rand(2, 4), -torch.rand(2, 4)):
        w, ref = w0.clone().requires_grad_(), w0.clone().requires_grad_()
        got = compiled(x, w)
        want = f(x, ref)
        got.backward()
        want.backward()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(w.grad, ref.grad, rtol=1e-5, atol=1e-5)
        with torch.no_grad():
            for g, e in zip(torch.compile(loop, backend="tpu", fullgraph=True)(x), loop(x)):
                torch.testing.assert_close(g, e)
    with pytest.raises(Exception, match="a while_loop whose gradient is needed saves every iteration"):
        torch.compile(lambda x: loop(x)[1].sum(), backend="tpu", fullgraph=True)(w0.clone().requires_grad_())


class _Scanned(torch.nn.Module):
    """``torch._higher_order_ops.scan`` over 80 steps (a loop in ONNX / LiteRT), forward along dim 1 and reversed."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.w = torch.nn.Parameter(torch.randn(4, 4) * 0.3)

    def forward(self, x: torch.Tensor, h0: torch.Tensor) -> tuple:
        from torch._higher_order_ops.scan import scan

        def step(h, xt):
            h = torch.tanh(h @ self.w + xt)
            return h, h * 2

        h, ys = scan(step, h0, x, dim=1)
        back, total = scan(lambda c, xt: (c + xt, c.sum(-1)), h0, x, dim=1, reverse=True)
        return h, ys, back, total


@pytest.fixture(scope="module")
def scanned():
    """One validation of every target (one capture) of :class:`_Scanned`."""
    return validate(_Scanned().eval(), (torch.randn(2, 80, 4), torch.randn(2, 4)), targets=ALL, num_random_inputs=1,
                    errors="report")


@pytest.mark.parametrize("target", ALL)
def test_scan_exports_and_matches_pytorch(scanned, target):
    # it was refused: "this higher-order op is not supported (torch.cond and while_loop are)"
    assert_target_passed(scanned, target)


class _Mapped(_Scanned):
    """``torch._higher_order_ops.map`` over 80 slices (a loop in ONNX / LiteRT), two outputs of different dtypes."""

    def forward(self, x: torch.Tensor, b: torch.Tensor) -> tuple:
        from torch._higher_order_ops.map import map as hmap

        return hmap(lambda xt, b: (torch.tanh(xt @ self.w) + b, xt.sum(-1).to(torch.float64)), x, b)


@pytest.fixture(scope="module")
def mapped():
    """One validation of every target (one capture) of :class:`_Mapped`."""
    return validate(_Mapped().eval(), (torch.randn(80, 2, 4), torch.randn(4)), targets=ALL, num_random_inputs=1,
                    errors="report")


@pytest.mark.parametrize("target", ALL)
def test_map_exports_and_matches_pytorch(mapped, target):
    # it was refused: "this higher-order op is not supported (torch.cond, while_loop and scan are)"
    assert_target_passed(mapped, target)
