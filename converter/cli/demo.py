"""``tpu-export demo``: the bundled CNN through every available target, then the parity report."""

from __future__ import annotations

import importlib
from pathlib import Path

from converter.api import TARGETS
from converter.cli.demo_model import build

#: Where each file target's artifact is saved inside the demo folder.
_ARTIFACT_NAMES = {"stablehlo": "model_stablehlo", "litert": "model.tflite", "onnx": "model.onnx"}


def available_targets() -> list[str]:
    """Targets whose builder imports in this installation."""
    out = []
    for name, spec in TARGETS.items():
        module, func = spec.split(":")
        try:
            if hasattr(importlib.import_module(module), func):
                out.append(name)
        except ImportError:
            continue
    return out


def run_demo(out: Path) -> int:
    """Validate the demo model on every available target, save the artifacts and the reports.

    Prints one row per target, then the parity verdict (with the first diverging op
    of any failing target) and, last, the path of the HTML report.

    Args:
        out: the folder for artifacts and reports (``out/report/report.html``).

    Returns:
        0 when every target matches PyTorch, 1 otherwise.
    """
    from validators import validate

    model, args = build()
    targets = available_targets()
    out.mkdir(parents=True, exist_ok=True)
    print(f"tpu-export demo: {type(model).__name__} on input {list(args[0].shape)} → {out}/")
    report = validate(model, args, targets=targets, num_random_inputs=2, errors="report")
    print(f"\n{'target':10} {'convert s':>9} {'max abs err':>12} {'max rel err':>12}  {'parity':6}  artifact")
    for t in report.targets:
        if t.status == "error":
            print(f"{t.target:10} {'':>9} {'':>12} {'':>12}  {'ERROR':6}  {t.message}")
            continue
        if t.target == "tpu":
            saved = f"(in memory, {t.artifact.device})"
        else:
            saved = str(out / _ARTIFACT_NAMES.get(t.target, f"model_{t.target}"))
            t.artifact.save(saved)
        worst = max((c.error for c in t.comparisons), key=lambda e: (not e.passed, e.max_rel))
        print(f"{t.target:10} {t.convert_seconds:9.2f} {worst.max_abs:12.3e} {worst.max_rel:12.3e}  "
              f"{'PASS' if t.passed else 'FAIL':6}  {saved}")
    for t in report.targets:
        if t.localization is not None and t.localization.node is not None:
            print(f"  {t.target}: first divergence at {t.localization.op} ({t.localization.where})")
    paths = report.write(out / "report")
    print(f"\nparity over {len(report.inputs)} input sets:",
          "all targets match PyTorch" if report.passed else "MISMATCH")
    print(f"reports: {', '.join(str(p) for p in paths if p.suffix in ('.json', '.md'))}")
    print(f"HTML report: {out / 'report' / 'report.html'}")
    return 0 if report.passed else 1
