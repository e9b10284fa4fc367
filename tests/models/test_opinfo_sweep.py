"""``examples/opinfo_sweep.py``: torch's OpInfo samples through the tpu device, and what it reports."""

from __future__ import annotations

import json

import torch

from examples.opinfo_sweep import KNOWN, _difference, main


def test_the_sweep_runs_ops_sets_known_differences_apart_and_reports_debug_eagers_false_alarms(capsys):
    # one sweep (a child process: ~7 s of imports): native_batch_norm's known difference is set apart; debug eager
    # compared fft results exactly and flagged them all (the results themselves matched the CPU's): a false alarm
    # is a difference of its own
    main(["--mode", "debug", "--ops", "abs,gather,native_batch_norm,fft.rfft,max.reduction_with_dim",
          "--samples", "2"])
    out = capsys.readouterr().out.splitlines()
    rows = [json.loads(line) for line in out if line.startswith("{")]
    assert [r["op"] for r in rows] == ["native_batch_norm"] and rows[0]["known"] == KNOWN["native_batch_norm"]
    assert out[-1] == "differences: 0 (none); known: 1"


def test_a_difference_is_described_and_half_precision_is_judged_against_float64():
    want = torch.tensor([1.0, 2.0])
    assert _difference(want, want.clone(), torch.float32, None) is None
    assert _difference(want, torch.tensor([1.0, 2.5]), torch.float32, None).startswith("0: max difference 0.5")
    assert _difference((want,), (want, want), torch.float32, None) == "1 vs 2 leaves"
    # bfloat16: the CPU rounded 1/3 down, the device up: as far from float64 as the CPU, not a difference
    exact = torch.tensor([1 / 3], dtype=torch.float64)
    down, up = torch.tensor([0.33203125], dtype=torch.bfloat16), torch.tensor([0.333984375], dtype=torch.bfloat16)
    assert _difference(down, up, torch.bfloat16, lambda: exact) is None
    assert _difference(down, up + 0.25, torch.bfloat16, lambda: exact).startswith("0: error against float64")
    # float32 (ctc_loss's gradients): the device 1e-4 from the CPU but nearer float64 than it is
    cpu32, exact = torch.tensor([0.5001]), torch.tensor([0.50001], dtype=torch.float64)
    assert _difference(cpu32, torch.tensor([0.50001]), torch.float32, lambda: exact) is None
    assert _difference(cpu32, torch.tensor([0.4998]), torch.float32, lambda: exact) == \
        "0: error against float64 0.00021 (the CPU's 9e-05)"
