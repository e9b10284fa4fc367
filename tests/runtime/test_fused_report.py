"""The fused report: how many graphs fused eager ran, why, and where Python waited for one."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tpu_runtime
from tests.runtime.conftest import batch, tiny_mlp
from tpu_runtime.eager import fused


def test_the_report_counts_graphs_by_cause_and_names_each_value_reads_line(monkeypatch):
    model = tiny_mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    x, y = (t.to("tpu") for t in batch())
    with tpu_runtime.set_eager_mode("fused"):
        tpu_runtime.sync()  # (nothing left pending from before)
        tpu_runtime.reset_fused_report()
        for _ in range(3):
            loss = F.mse_loss(model(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            loss.item()  # already computed by the backward's graph: no graph of its own
            hot = (model(x) > 0).sum().item(); read_line = _line()  # a value read: one more graph per step
        report = tpu_runtime.fused_report()
        assert report.causes == {"backward": 3, "optimizer step": 3, "value read": 3}
        assert report.graphs == 9 and report.ops > 9 and 3 <= report.compiled < 9  # later steps hit the cache
        assert report.reads == {f"{__file__}:{read_line} in {_NAME}": 3}
        assert f"{__file__}:{read_line}" in str(report) and "9 graphs run" in str(report)
        assert torch.tpu.fused_report().graphs == 9 and hot >= 0

        monkeypatch.setattr(fused, "MAX_OPS", 3)
        z = x
        for _ in range(4):  # three reach the limit; the fourth runs at the sync
            z = z * 2
        tpu_runtime.sync()
    report = tpu_runtime.fused_report()
    assert report.causes["size limit"] == 1 and report.causes["sync"] == 1
    assert tpu_runtime.fused_report().graphs == 11
    tpu_runtime.reset_fused_report()
    assert tpu_runtime.fused_report().graphs == 0 and not tpu_runtime.fused_report().reads


def test_leaving_fused_mode_runs_the_pending_graph_as_a_mode_switch():
    tpu_runtime.reset_fused_report()
    x = torch.ones(3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        y = x + 1
    assert tpu_runtime.fused_report().causes == {"mode switch": 1}
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


_NAME = "test_the_report_counts_graphs_by_cause_and_names_each_value_reads_line"


def _line() -> int:
    import sys

    return sys._getframe(1).f_lineno


def test_a_value_read_inside_a_library_names_the_librarys_line_and_the_users_call():
    # (a library function as transformers' mask helpers are: its file under site-packages reads the value)
    namespace: dict = {}
    exec(compile("def all_ones(t):\n    return bool((t == 1).all())\n", "/env/lib/site-packages/lib/masks.py", "exec"),
         namespace)
    tpu_runtime.reset_fused_report()
    with tpu_runtime.set_eager_mode("fused"):
        assert namespace["all_ones"](torch.ones(3).to("tpu") + 0); line = _line()
    assert dict(tpu_runtime.fused_report().reads) == {
        f"lib/masks.py:2 in all_ones (from {__file__}:{line} in "
        "test_a_value_read_inside_a_library_names_the_librarys_line_and_the_users_call)": 1}


def _double(t):
    return t * 2


def test_calling_a_compiled_function_on_pending_values_is_counted_as_a_compiled_call():
    # (named by the compiled function's frame: its compiled code runs there)
    torch._dynamo.reset()
    double = torch.compile(_double, backend="tpu")
    x = torch.ones(3).to("tpu")
    double(x)  # (compiled first: torch's trace logging may print its example inputs, a value read)
    tpu_runtime.reset_fused_report()
    with tpu_runtime.set_eager_mode("fused"):
        y = double(x + 1)
        assert torch.equal(y.cpu(), torch.full((3,), 4.0))
    report = tpu_runtime.fused_report()
    assert report.causes == {"compiled call": 1}, str(report)
    assert report.reads == {f"{__file__}:{_double.__code__.co_firstlineno} in _double": 1}


def test_a_forward_with_enough_work_runs_as_its_own_graph_when_backward_begins(monkeypatch):
    # the forward's estimated multiply-adds decide: below SPLIT_FLOPS it stays in the forward + backward graph,
    # from it on it starts at loss.backward() (cause "forward"); the values are the same either way
    x, y = batch()
    torch.manual_seed(0)
    base = tiny_mlp()
    want = F.mse_loss(base(x), y)
    want.backward()
    got = {}
    for threshold in (float("inf"), 1):
        monkeypatch.setattr(fused, "SPLIT_FLOPS", threshold)
        model = tiny_mlp().to("tpu")
        model.load_state_dict(base.state_dict())
        with tpu_runtime.set_eager_mode("fused"):
            tpu_runtime.sync()
            tpu_runtime.reset_fused_report()
            loss = F.mse_loss(model(x.to("tpu")), y.to("tpu"))
            recorded = fused.GRAPH.flops
            loss.backward()
            got[threshold] = (tpu_runtime.fused_report().causes, recorded)
        torch.testing.assert_close(loss.cpu(), want.detach())
        torch.testing.assert_close(model[0].weight.grad.cpu(), base[0].weight.grad)
    assert got[float("inf")][0] == {"backward": 1} and got[1][0] == {"forward": 1, "backward": 1}
    # (the tiny MLP's forward: its two matmuls and the elementwise ops around them)
    first = x.shape[0] * base[0].in_features * base[0].out_features
    assert got[1][1] > first and got[1][1] == got[float("inf")][1]


def test_the_work_estimate_counts_multiply_adds_of_matmuls_convolutions_and_loops():
    import jax
    import jax.numpy as jnp

    from tpu_runtime.eager.work import work_of

    mm = jax.make_jaxpr(lambda a, b: a @ b)(jnp.ones((4, 8)), jnp.ones((8, 16)))
    assert work_of(mm) == 4 * 16 * 8
    conv = jax.make_jaxpr(lambda v, k: jax.lax.conv(v, k, (1, 1), "SAME"))(jnp.ones((2, 3, 8, 8)),
                                                                         jnp.ones((5, 3, 3, 3)))
    assert work_of(conv) == (2 * 5 * 8 * 8) * (3 * 3 * 3)
    loop = jax.make_jaxpr(lambda c: jax.lax.scan(lambda c, _: (c @ c + 1, None), c, None, length=3)[0])
    assert work_of(loop(jnp.ones((4, 4)))) == 3 * (4 * 4 * 4 + 16)
    branches = jax.make_jaxpr(lambda c: jax.lax.cond(c.sum() > 0, lambda v: v @ v, lambda v: v + 1, c))
    # the larger branch; the sum, comparison and index conversion before it
    assert work_of(branches(jnp.ones((4, 4)))) == 4 * 4 * 4 + 3


def test_the_split_threshold_comes_from_the_environment(monkeypatch):
    monkeypatch.setenv("TPU_FUSED_SPLIT_FLOPS", "123")
    assert fused._split_flops() == 123.0
    monkeypatch.delenv("TPU_FUSED_SPLIT_FLOPS")
    assert fused._split_flops() == float("inf")  # (off by default: see SPLIT_FLOPS)
