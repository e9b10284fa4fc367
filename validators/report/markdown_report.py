"""Markdown summary of a :class:`ParityReport` (CLI output, ParityError message, repro README)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from validators.metrics import OutputError
    from validators.report.data import Localization, ParityReport, TargetResult


def fmt(v: float) -> str:
    """A float in 3-significant-digit scientific notation ("inf" / "nan" kept)."""
    if isinstance(v, str):
        return v
    if v != v:
        return "nan"
    if v in (float("inf"), float("-inf")):
        return "inf" if v > 0 else "-inf"
    return f"{v:.3e}"


def criterion(e: "OutputError") -> str:
    """How an output was judged, with the task-level number when there is one."""
    if e.mode == "top1":
        return f"top-1 agreement {100 * (e.top1_agreement or 0):.1f}%"
    if e.mode == "snr":
        return f"SNR {e.snr_db:.1f} dB"
    return e.mode


def verdict(passed: bool) -> str:
    """PASS or FAIL."""
    return "PASS" if passed else "FAIL"


def target_table(targets: list["TargetResult"]) -> list[str]:
    """One row per target and output: the worst comparison over the input sets."""
    lines = ["| target | status | precision | output | max abs | max rel | mean abs | cosine | judged by |",
             "|---|---|---|---|---:|---:|---:|---:|---|"]
    for t in targets:
        if t.status == "error":
            lines.append(f"| {t.target} | ERROR | {t.precision} | — | | | | | {t.message} |")
            continue
        for name, c in t.worst().items():
            e = c.error
            lines.append(f"| {t.target} | {verdict(e.passed)} | {t.precision} | {name} {list(e.shape)} "
                         f"{e.dtype} | {fmt(e.max_abs)} | {fmt(e.max_rel)} | {fmt(e.mean_abs)} | "
                         f"{e.cosine:.6f} | {criterion(e)}{' — ' + e.detail if e.detail and not e.passed else ''} |")
    return lines


def localization_section(loc: "Localization", repro_dir: str | None = None) -> list[str]:
    """The first-divergence block of one failing target."""
    lines = [f"### First divergence — {loc.target}", ""]
    if loc.node is None:
        lines.append(f"- not localized ({loc.method}): {loc.note}")
    else:
        lines += [f"- op: `{loc.op}` (FX node `{loc.node}`, {loc.kind})",
                  f"- source: {loc.where}"]
        if loc.error is not None:
            lines.append(f"- error at that node: max abs {fmt(loc.error.max_abs)}, max rel {fmt(loc.error.max_rel)}"
                         f" (input set {loc.input_index})")
        if loc.isolated is not None:
            lines.append(f"- op alone on PyTorch's inputs: max abs {fmt(loc.isolated.max_abs)}, "
                         f"max rel {fmt(loc.isolated.max_rel)} — {verdict(loc.isolated.passed)}")
        lines.append(f"- method: {method_text(loc)}")
        if loc.note:
            lines.append(f"- {loc.note}")
    if repro_dir:
        lines.append(f"- repro: `{repro_dir}`")
    return lines + [""]


def method_text(loc: "Localization") -> str:
    """The localization method in words."""
    if loc.method == "intermediates":
        what = {"tpu": "the lowered program the TPU runtime compiles",
                "stablehlo": "the lowered program jax.export turns into the StableHLO module"}.get(
                    loc.target, "the lowered program")
        return (f"every intermediate of {what} (jit on jax.devices()[0]) compared with PyTorch's value "
                "of the same FX node")
    return {
        "extra-outputs": f"the {loc.target} artifact rebuilt with every intermediate as an extra output, "
                         "compared with PyTorch's value of the same FX node",
        "proxy": f"proxy — the lowered program's intermediates (TPU runtime) stand in for {loc.target}'s",
    }.get(loc.method, loc.method)


def to_markdown(report: "ParityReport") -> str:
    """The whole summary."""
    origins = [i.origin for i in report.inputs]
    counts = ", ".join(f"{origins.count(o)} {o}" for o in ("sample", "given", "random") if origins.count(o))
    lines = [f"# Parity report: {report.model} — {verdict(report.passed)}", "",
             f"Reference: PyTorch. Input sets: {len(report.inputs)} ({counts}). "
             f"Targets: {', '.join(t.target for t in report.targets)}.", ""]
    lines += target_table(report.targets) + [""]
    failing = [t for t in report.targets if t.localization is not None]
    if failing:
        lines += ["## Where it diverges", ""]
        for t in failing:
            lines += localization_section(t.localization, t.repro_dir)
    if report.cross:
        lines += ["## Targets compared with each other", "",
                  "| pair | output | max abs | max rel | cosine | result |", "|---|---|---:|---:|---:|---|"]
        worst: dict[tuple, object] = {}
        for c in report.cross:
            key = (c.reference, c.target, c.error.name)
            cur = worst.get(key)
            if cur is None or (cur.error.passed and not c.error.passed) or c.error.max_abs > cur.error.max_abs:
                worst[key] = c
        for (a, b, name), c in worst.items():
            e = c.error
            lines.append(f"| {a} vs {b} | {name} | {fmt(e.max_abs)} | {fmt(e.max_rel)} | {e.cosine:.6f} | "
                         f"{verdict(e.passed)} |")
        lines.append("")
    notes = [(t.target, n) for t in report.targets for n in t.notes]
    if notes:
        lines += ["## Target notes", ""] + [f"- {t}: {n}" for t, n in notes] + [""]
    return "\n".join(lines).rstrip() + "\n"
