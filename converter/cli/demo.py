"""``tpu-export demo``: the bundled CNN through every available target, then a parity summary."""

from __future__ import annotations

import importlib
import time
from pathlib import Path

import torch

from converter.api import TARGETS, convert
from converter.cli.demo_model import build


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
    """Convert, save, run and compare; print a table; return the exit code."""
    from validators.metrics import compare

    model, args = build()
    with torch.no_grad():
        ref = model(*args)
    out.mkdir(parents=True, exist_ok=True)
    rows, ok = [], True
    print(f"tpu-export demo: {type(model).__name__} on input {list(args[0].shape)} → {out}/")
    for target in available_targets():
        start = time.perf_counter()
        art = convert(model, args, target=target)
        seconds = time.perf_counter() - start
        if target == "tpu":
            got, saved = art(*args), "(in memory, " + str(art.device) + ")"
        else:
            path = out / {"stablehlo": "model_stablehlo", "litert": "model.tflite", "onnx": "model.onnx"}[target]
            art.save(path)
            got, saved = art(*args), str(path)
        err = compare("output_0", ref, got)
        ok &= err.passed
        rows.append((target, seconds, err, saved))
    print(f"\n{'target':10} {'convert s':>9} {'max abs err':>12} {'max rel err':>12}  {'parity':6}  artifact")
    for target, seconds, err, saved in rows:
        print(f"{target:10} {seconds:9.2f} {err.max_abs:12.3e} {err.max_rel:12.3e}  {'PASS' if err.passed else 'FAIL':6}  {saved}")
    print("\nparity:", "all targets match PyTorch" if ok else "MISMATCH")
    return 0 if ok else 1
