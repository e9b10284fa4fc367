"""The parity report's data: what ran, what was compared, where it first diverged."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from validators.metrics import OutputError

#: Version of the JSON layout written by :meth:`ParityReport.to_json`; bump it on
#: any change that removes or renames a key.
SCHEMA_VERSION = 1
SCHEMA_NAME = "tpu-export/parity-report"


@dataclass(frozen=True)
class NodeError:
    """The error of one FX node's value against PyTorch's (one bar of the per-op chart)."""

    name: str
    op: str
    max_abs: float
    max_rel: float
    passed: bool

    @classmethod
    def of(cls, node: Any, op: str, error: OutputError) -> "NodeError":
        """Build from an FX node and its :class:`OutputError`."""
        return cls(node.name, op, error.max_abs, error.max_rel, error.passed)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"name": self.name, "op": self.op, "max_abs": _num(self.max_abs), "max_rel": _num(self.max_rel),
                "passed": self.passed}


@dataclass
class Localization:
    """Where a target first diverges from PyTorch.

    Attributes:
        target: the target.
        method: "intermediates", "extra-outputs" or "proxy" (see ``validators.localize``).
        input_index: the input set it was run on.
        profile: every compared node's error, in graph order.
        kind: "op" (the op's lowering is wrong on exact inputs), "translation" (the
            target's translation of the op diverges), "accumulated" (rounding
            drift), "not-localized", or "none" (a profile of a passing run).
        node: the FX node name of the culprit.
        op: its ATen overload.
        location: the user's source location (file, line, function, module_path, …).
        error: the node's error in the full run.
        isolated: the node's lowering re-run alone on PyTorch's inputs.
        note: an explanation in words.
    """

    target: str
    method: str
    input_index: int = 0
    profile: list[NodeError] = field(default_factory=list)
    kind: str = "none"
    node: str | None = None
    op: str | None = None
    location: dict | None = None
    error: OutputError | None = None
    isolated: OutputError | None = None
    note: str = ""

    @property
    def where(self) -> str:
        """``file:line (module path)`` of the culprit, or "unknown location"."""
        return (self.location or {}).get("text") or "unknown location"

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"target": self.target, "method": self.method, "input_index": self.input_index, "kind": self.kind,
                "node": self.node, "op": self.op, "location": self.location,
                "error": self.error.to_json() if self.error else None,
                "isolated": self.isolated.to_json() if self.isolated else None, "note": self.note,
                "profile": [n.to_json() for n in self.profile]}


@dataclass(frozen=True)
class Comparison:
    """One output of one input set, compared between a reference and a target."""

    input_index: int
    reference: str
    target: str
    error: OutputError

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"input_index": self.input_index, "reference": self.reference, "target": self.target,
                **self.error.to_json()}


@dataclass
class TargetResult:
    """Everything about one target in one run.

    Attributes:
        target: "tpu", "stablehlo", "litert", …
        status: "pass", "fail" or "error" (could not convert or run).
        precision: "fp32", "fp16", "bf16" or "int8"; low precisions are judged by
            task-level agreement.
        comparisons: every output of every input set against PyTorch.
        localization: set when the target failed (or for the op profile).
        message: the error line when ``status == "error"``.
        notes: the artifact's own notes (conversion decisions).
        repro_dir: where the repro bundle was written, once written.
        repro: the in-memory repro bundle (not serialized).
        artifact: the target's artifact (not serialized), e.g. to save it.
    """

    target: str
    status: str
    precision: str = "fp32"
    convert_seconds: float = 0.0
    run_seconds: float = 0.0
    comparisons: list[Comparison] = field(default_factory=list)
    localization: Localization | None = None
    message: str = ""
    notes: list[str] = field(default_factory=list)
    repro_dir: str | None = None
    repro: Any = field(default=None, repr=False, compare=False)
    artifact: Any = field(default=None, repr=False, compare=False)

    @property
    def passed(self) -> bool:
        """True when every comparison passed."""
        return self.status == "pass"

    def worst(self) -> dict[str, Comparison]:
        """The worst comparison per output name: failures first, then by max relative error."""
        out: dict[str, Comparison] = {}
        for c in self.comparisons:
            cur = out.get(c.error.name)
            if cur is None or _badness(c.error) > _badness(cur.error):
                out[c.error.name] = c
        return out

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"target": self.target, "status": self.status, "passed": self.passed, "precision": self.precision,
                "convert_seconds": round(self.convert_seconds, 4), "run_seconds": round(self.run_seconds, 4),
                "message": self.message, "notes": list(self.notes), "repro_dir": self.repro_dir,
                "comparisons": [c.to_json() for c in self.comparisons],
                "localization": self.localization.to_json() if self.localization else None}


@dataclass(frozen=True)
class InputInfo:
    """One input set as the report describes it."""

    index: int
    origin: str
    specs: tuple
    notes: tuple = ()

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"index": self.index, "origin": self.origin,
                "tensors": [{"name": n, "shape": list(s), "dtype": d} for n, s, d in self.specs],
                "notes": list(self.notes)}


@dataclass
class ParityReport:
    """The result of :func:`validators.validate`.

    Attributes:
        model: the model's class name.
        targets: one result per target, in the order asked.
        cross: target-vs-target comparisons (each pair, each output, each input set).
        inputs: the input sets used.
        tolerances: the per-dtype tolerances in force (for the record).
        op_profile: a per-op error profile of a passing run (when no target failed).
        environment: library versions.
    """

    model: str
    targets: list[TargetResult] = field(default_factory=list)
    cross: list[Comparison] = field(default_factory=list)
    inputs: list[InputInfo] = field(default_factory=list)
    tolerances: dict = field(default_factory=dict)
    op_profile: Localization | None = None
    environment: dict = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """True when every target and every target-vs-target comparison passed."""
        return all(t.passed for t in self.targets) and all(c.error.passed for c in self.cross)

    def target(self, name: str) -> TargetResult:
        """The result of one target.

        Raises:
            KeyError: the target was not part of the run.
        """
        for t in self.targets:
            if t.target == name:
                return t
        raise KeyError(f"no target {name!r} in this report; it has {[t.target for t in self.targets]}")

    @property
    def localizations(self) -> list[Localization]:
        """Every localization of a failing target, then the passing run's op profile."""
        out = [t.localization for t in self.targets if t.localization is not None]
        return out + ([self.op_profile] if self.op_profile is not None else [])

    def to_json(self) -> dict:
        """The report as a JSON-ready dict (versioned by ``schema_version``)."""
        from validators.report.json_report import to_json

        return to_json(self)

    def to_markdown(self) -> str:
        """A Markdown summary: one table per target, the first divergence, the repro paths."""
        from validators.report.markdown_report import to_markdown

        return to_markdown(self)

    def to_html(self) -> str:
        """One self-contained HTML page with inline SVG charts (readable offline)."""
        from validators.report.html_report import to_html

        return to_html(self)

    def write(self, directory: str | Path) -> list[Path]:
        """Write ``report.json``, ``report.md``, ``report.html`` and one repro folder per failure.

        Every file is written atomically.

        Args:
            directory: the output folder (created if missing).

        Returns:
            The written paths: the three reports, then the repro folders.
        """
        from validators.report.json_report import write_all

        return write_all(self, Path(directory))

    def __str__(self) -> str:
        return self.to_markdown()


def _num(v: Any) -> Any:
    """A finite float as is; non-finite as the string "inf", "-inf" or "nan" (JSON has no such numbers)."""
    if isinstance(v, float) and not math.isfinite(v):
        return "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def _badness(e: OutputError) -> tuple:
    rel = e.max_rel if not math.isnan(e.max_rel) else math.inf
    return (not e.passed, rel)
