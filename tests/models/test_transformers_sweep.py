"""``examples/transformers_sweep.py``: one family through a check in process, and how a failure is reported."""

from __future__ import annotations

import pytest

from examples.transformers_sweep import FAMILIES, run_check


def test_a_family_trains_on_the_device_and_exports():
    eager = run_check("gpt2", "strict")
    assert eager["strict"].startswith("out ") and "BAD" not in eager["strict"], eager
    exported = run_check("gpt2", "export")
    assert {exported[t] for t in ("tpu", "stablehlo", "onnx", "litert")} == {"pass"}, exported


def test_a_failure_is_reported_with_its_first_line():
    # mobilebert's code makes torch.export specialize the length (torch's own refusal, not ours)
    row = run_check("mobilebert", "dynamic")
    assert row["error"].startswith("CaptureError: torch.export failed") and "Constraints violated" in row["error"]


@pytest.mark.parametrize("family", ["whisper", "vit", "wav2vec2"])
def test_every_kind_builds(family):
    from examples.transformers_sweep import build

    model, args, kind = build(family)
    assert model(*args).ndim == 3 and kind == FAMILIES[family][0]
