"""examples/train.py, shortened: a few steps of the MLP in every mode match CPU training."""

from __future__ import annotations

import pytest

from examples.train import RUNS, make_task, max_rel_diff, train


def test_train_mlp_every_mode_matches_cpu():
    task = make_task("mlp", batch=4, n_batches=2)
    ref = train(task, "cpu", 3)
    assert ref[-1] < ref[0] * 1.5
    for run in RUNS[1:]:
        curve = train(task, run, 3)
        assert max_rel_diff(curve, ref) < 1e-4, (run, curve, ref)


def test_train_rejects_an_unknown_run():
    with pytest.raises(ValueError, match="unknown run"):
        train(make_task("mlp"), "tpu-v9", 1)
