"""JSON form of a :class:`ParityReport` and writing every report file.

Layout (``schema_version`` 1)::

    {"schema": "tpu-export/parity-report", "schema_version": 1, "passed": bool,
     "model": str, "environment": {...}, "tolerances": {dtype: [rtol, atol], ...},
     "task_level": {precision: [min_top1, min_snr_db]},
     "inputs": [{"index", "origin", "tensors": [{"name", "shape", "dtype"}], "notes"}],
     "targets": [{"target", "status", "passed", "precision", "convert_seconds", "run_seconds",
                  "message", "notes", "repro_dir",
                  "comparisons": [{"input_index", "reference", "target", "name", "shape", "dtype",
                                   "max_abs", "max_rel", "mean_abs", "cosine", "passed", "detail",
                                   "histogram", "mode", "top1_agreement", "snr_db"}],
                  "localization": null | {"target", "method", "input_index", "kind", "node", "op",
                                          "location", "error", "isolated", "note", "profile"}}],
     "cross": [comparison, ...], "op_profile": null | localization,
     "histogram_edges": [...]}

Non-finite numbers are written as the strings "inf", "-inf", "nan".
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from exporters.atomic import write_bytes
from validators.metrics import HISTOGRAM_EDGES
from validators.report.data import SCHEMA_NAME, SCHEMA_VERSION
from validators.tolerances import TASK_LEVEL

if TYPE_CHECKING:
    from validators.report.data import ParityReport


def to_json(report: "ParityReport") -> dict:
    """The report as a JSON-ready dict (see the module docstring for the layout)."""
    return {
        "schema": SCHEMA_NAME,
        "schema_version": SCHEMA_VERSION,
        "passed": report.passed,
        "model": report.model,
        "environment": dict(report.environment),
        "tolerances": {str(k).replace("torch.", ""): list(v) for k, v in report.tolerances.items()},
        "task_level": {k: list(v) for k, v in TASK_LEVEL.items()},
        "histogram_edges": list(HISTOGRAM_EDGES),
        "inputs": [i.to_json() for i in report.inputs],
        "targets": [t.to_json() for t in report.targets],
        "cross": [c.to_json() for c in report.cross],
        "op_profile": report.op_profile.to_json() if report.op_profile else None,
    }


def dumps(report: "ParityReport") -> str:
    """The JSON text (sorted keys, two-space indent, trailing newline)."""
    return json.dumps(to_json(report), indent=2, sort_keys=True, allow_nan=False) + "\n"


def write_all(report: "ParityReport", directory: Path) -> list[Path]:
    """Write the repro folders, then ``report.json``, ``report.md`` and ``report.html``.

    Returns:
        The three report paths followed by the repro folders.
    """
    from validators.repro import write_repro

    directory.mkdir(parents=True, exist_ok=True)
    repros = []
    for t in report.targets:
        if t.repro is not None:
            t.repro_dir = str(directory / "repro" / t.target)
            t.repro.summary = replace(report, targets=[t], op_profile=None,
                                      cross=[c for c in report.cross if t.target in (c.reference, c.target)]
                                      ).to_markdown()
            path = write_repro(t.repro, directory / "repro" / t.target)
            t.repro_dir = str(path)
            repros.append(path)
    paths = [
        write_bytes(directory / "report.json", dumps(report).encode()),
        write_bytes(directory / "report.md", report.to_markdown().encode()),
        write_bytes(directory / "report.html", report.to_html().encode()),
    ]
    return paths + repros
