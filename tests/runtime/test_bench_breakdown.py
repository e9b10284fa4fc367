"""``benchmarks/bench_eager.py``'s runtime/torch split: it counts the runtime's calls and puts its hooks back."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime
from benchmarks.bench_eager import breakdown
from tpu_runtime import tensor as tensor_module
from tpu_runtime.eager.fused import GRAPH


def test_breakdown_times_dispatch_and_flushes_then_restores_them():
    x = torch.randn(4, 4).to("tpu")
    dispatch, calls = tensor_module._DISPATCH[0], []

    def step() -> float:
        with tpu_runtime.set_eager_mode("fused"):
            calls.append(1)
            return (x * 2 + 1).sum().item()  # three ops recorded, one flush inside item()

    step()
    total, runtime, wait = breakdown(step, 5)
    assert len(calls) == 6 and 0 < runtime < total and 0 <= wait < total
    assert tensor_module._DISPATCH[0] is dispatch and "flush" not in vars(GRAPH)
    assert step() == pytest.approx((x.cpu() * 2 + 1).sum().item(), rel=1e-5)


def test_breakdown_counts_nothing_without_tpu_work():
    synced = []
    total, runtime, wait = breakdown(lambda: sum(range(100)), 3, sync=lambda: synced.append(1))
    assert runtime == 0.0 and 0 <= wait < total and synced == [1]


def test_paired_runs_each_side_in_its_eager_mode():
    # a training loop runs in one mode: each timed block enters its side's mode once (a mode switch is a sync
    # point, so switching around every step flushed a second fused graph per step)
    from benchmarks.bench_eager import paired

    seen = []

    def side(mode):
        def fn():
            seen.append((mode, tpu_runtime.get_eager_mode()))
        fn.mode = mode
        return fn

    paired(side("strict"), side("fused"), rounds=2, block=2)
    assert len(seen) == 8 and all(want == got for want, got in seen)


def test_paired_breakdown_alternates_the_sides_and_takes_medians():
    from benchmarks.bench_eager import paired_breakdown

    calls = []
    a = lambda: calls.append("a")  # noqa: E731
    b = lambda: calls.append("b")  # noqa: E731
    (ta, ra, wa), (tb, rb, wb) = paired_breakdown(a, b, 3, 2)
    assert calls == ["a", "a", "b", "b", "b", "b", "a", "a", "a", "a", "b", "b"]
    assert 0 <= ra <= ta and 0 <= rb <= tb and 0 <= wa <= ta and 0 <= wb <= tb  # (medians of each part)


def test_the_xla_floor_is_the_same_training_step_as_pytorchs():
    import benchmarks.xla_floor as xla_floor
    from benchmarks.bench_eager import _task

    task = _task("mlp")
    step = xla_floor.floor_step(task, 1e-3)  # (checked against PyTorch's AdamW on the CPU first)
    torch.manual_seed(0)
    model = task.make().train()
    model.drop.p = 0.0
    x, y = task.batches[0]
    assert step() == pytest.approx(torch.nn.functional.mse_loss(model(x), y).item(), rel=1e-5)
    assert xla_floor.floor_step(_task("mingpt"), 1e-3) is None  # (no JAX twin)


def test_the_xla_floors_check_catches_another_step(monkeypatch):
    import benchmarks.xla_floor as xla_floor
    from benchmarks.bench_eager import _task

    monkeypatch.setattr(xla_floor, "WEIGHT_DECAY", 0.1)  # not AdamW's default
    with pytest.raises(AssertionError):
        xla_floor.floor_step(_task("mlp"), 1e-2)


def test_subclass_floor_runs_a_training_step_with_the_shapes_of_the_real_one():
    # the floor's step is the same torch code on tensors that hold nothing: shapes and dtypes as on the CPU,
    # tied weights kept tied, in-place ops returning their target, a new python float making no new signature
    from benchmarks import subclass_floor
    from examples.train import make_task

    task = make_task("mingpt")
    torch.manual_seed(0)
    model = task.make().train()
    want = model(task.batches[0][0]).shape
    step = subclass_floor.floor_training_step(model, task.batches[0], task.loss, foreach=True)
    assert step() == 0.0 and model.lm_head.weight is model.wte.weight
    assert all(type(p) is subclass_floor.Shadow for p in model.parameters())
    x = subclass_floor.Shadow(tuple(task.batches[0][0].shape), torch.int64)
    assert model(x).shape == want and model(x).dtype == torch.float32
    seen = len(subclass_floor._OUTPUTS)
    step(), step()
    p = next(model.parameters())
    with torch.no_grad():
        assert p.mul_(0.5) is p and torch.add(p, 0.25).shape == p.shape
        torch.add(p, 0.75)  # another float: the same signature
    assert len(subclass_floor._OUTPUTS) == seen + 2  # (mul_ and add: nothing per step)


def test_repeated_reports_the_median_of_the_paired_runs_and_their_range(monkeypatch):
    import benchmarks.bench_eager as bench

    runs = iter([(1.5, 2.0, 1.0), (2.5, 4.0, 1.0), (2.0, 3.0, 1.5)])
    monkeypatch.setattr(bench, "paired", lambda a, b, rounds, block: next(runs))
    assert bench.repeated(None, None, 9, 3, 3) == (2.0, 1.5, 2.5, 3.0, 1.0)


def test_plain_floor_runs_the_same_step_beside_the_subclass_floor_in_its_own_process():
    # (it names PrivateUse1 itself: a process of its own; it checks its logits' shape against the CPU model's)
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[2] / "benchmarks" / "plain_floor.py"
    run = subprocess.run([sys.executable, str(script), "--rounds", "1", "--block", "1", "--repeats", "1"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "logits [4, 8, 64]" in run.stdout and "subclass-floor/plain-floor time" in run.stdout, run.stdout
