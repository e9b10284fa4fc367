"""One self-contained HTML page: tables, inline SVG histograms and per-op charts, no scripts."""

from __future__ import annotations

from html import escape
from typing import TYPE_CHECKING

from validators.metrics import HISTOGRAM_EDGES
from validators.report.markdown_report import criterion, fmt, method_text, verdict
from validators.report.svg import histogram_svg, op_chart_svg

if TYPE_CHECKING:
    from validators.metrics import OutputError
    from validators.report.data import Localization, ParityReport, TargetResult

#: Wide content (a long table, a per-op chart of a big graph) scrolls inside its own box, so the
#: page itself never scrolls sideways; long paths in ``<code>`` wrap.
_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2em auto;max-width:1100px;
color:#222;padding:0 1em}
h1 .PASS,td.PASS{color:#3a923a}h1 .FAIL,td.FAIL,td.ERROR{color:#c8362b}
table{border-collapse:collapse;margin:.5em 0 1.2em;display:block;width:max-content;max-width:100%;overflow-x:auto}
th,td{border:1px solid #ccc;padding:3px 8px;font-size:13px}
th{background:#f3f3f3}td.num{text-align:right;font-family:ui-monospace,monospace}
.charts{display:flex;flex-wrap:wrap;gap:12px}.chart{border:1px solid #eee;background:#fff;display:block}
figure{margin:0;max-width:100%;overflow-x:auto}figcaption{font-size:12px;color:#555}
.culprit{border-left:4px solid #6a1b9a;padding:.3em .8em;background:#f7f2fa}
code{background:#f3f3f3;padding:0 3px;overflow-wrap:anywhere}.note{color:#555;font-size:13px}
"""


def _e(v: object) -> str:
    return escape(str(v))


def _row(cells: list[str], classes: list[str] | None = None) -> str:
    classes = classes or [""] * len(cells)
    return "<tr>" + "".join(f'<td class="{c}">{v}</td>' if c else f"<td>{v}</td>"
                            for v, c in zip(cells, classes)) + "</tr>"


def _abs_limit(e: "OutputError", tolerances: dict) -> float | None:
    """The absolute error an output may show (max of atol and rtol × |ref|max), for colouring."""
    tol = next((v for k, v in tolerances.items() if str(k).replace("torch.", "") == e.dtype), None)
    if tol is None or e.mode not in ("tolerance", "exact"):
        return None
    rtol, atol = tol
    scale = e.max_abs / e.max_rel if isinstance(e.max_rel, float) and 0 < e.max_rel < float("inf") else 0.0
    return max(atol, rtol * scale) if e.mode == "tolerance" else 0.0


def _summary(report: "ParityReport") -> list[str]:
    out = ["<table><tr><th>target</th><th>status</th><th>precision</th><th>output</th><th>max abs</th>"
           "<th>max rel</th><th>mean abs</th><th>cosine</th><th>judged by</th><th>convert s</th></tr>"]
    for t in report.targets:
        if t.status == "error":
            out.append(_row([_e(t.target), "ERROR", _e(t.precision), "—", "", "", "", "", _e(t.message), ""],
                            ["", "ERROR", "", "", "", "", "", "", "", ""]))
            continue
        for name, c in t.worst().items():
            e = c.error
            v = verdict(e.passed)
            out.append(_row([_e(t.target), v, _e(t.precision), f"{_e(name)} {list(e.shape)} {_e(e.dtype)}",
                             fmt(e.max_abs), fmt(e.max_rel), fmt(e.mean_abs), f"{e.cosine:.6f}", _e(criterion(e)),
                             f"{t.convert_seconds:.2f}"],
                            ["", v, "", "", "num", "num", "num", "num", "", "num"]))
    out.append("</table>")
    return out


def _localization(loc: "Localization", repro_dir: str | None) -> list[str]:
    out = ['<div class="culprit">']
    if loc.node is None:
        out.append(f"<p>Not localized ({_e(loc.method)}): {_e(loc.note)}</p>")
    else:
        out.append(f"<p><b>First divergence:</b> <code>{_e(loc.op)}</code> at FX node <code>{_e(loc.node)}</code> "
                   f"({_e(loc.kind)})<br><b>Source:</b> {_e(loc.where)}</p><ul>")
        if loc.error is not None:
            out.append(f"<li>error at that node: max abs {fmt(loc.error.max_abs)}, max rel "
                       f"{fmt(loc.error.max_rel)} (input set {loc.input_index})</li>")
        if loc.isolated is not None:
            out.append(f"<li>op alone on PyTorch's inputs: max abs {fmt(loc.isolated.max_abs)}, max rel "
                       f"{fmt(loc.isolated.max_rel)} — {verdict(loc.isolated.passed)}</li>")
        out.append(f"<li>method: {_e(method_text(loc))}</li>")
        if loc.note:
            out.append(f"<li>{_e(loc.note)}</li>")
        out.append("</ul>")
    if repro_dir:
        out.append(f"<p>Repro: <code>{_e(repro_dir)}</code></p>")
    out.append("</div>")
    return out


def _op_chart(loc: "Localization", caption: str) -> list[str]:
    if not loc.profile:
        return [f'<p class="note">No per-op profile ({_e(loc.method)}).</p>']
    svg = op_chart_svg(loc.profile, f"per-op max relative error, {loc.target}", highlight=loc.node)
    return [f"<figure>{svg}<figcaption>{_e(caption)}</figcaption></figure>"]


def _target(t: "TargetResult", tolerances: dict) -> list[str]:
    out = [f'<h2 id="target-{_e(t.target)}">{_e(t.target)} — {verdict(t.passed) if t.status != "error" else "ERROR"}'
           "</h2>"]
    if t.status == "error":
        return out + [f"<p>{_e(t.message)}</p>"]
    if t.localization is not None:
        out += _localization(t.localization, t.repro_dir)
        out += _op_chart(t.localization, "Each bar is one FX node in graph order: log10 of its max relative error "
                         "against PyTorch's value (green pass, red fail, purple the first divergence).")
    out.append("<h3>Error histograms (worst input set per output)</h3><div class=\"charts\">")
    for name, c in t.worst().items():
        e = c.error
        if not e.histogram:
            out.append(f"<p>{_e(name)}: {_e(e.detail)}</p>")
            continue
        svg = histogram_svg(e.histogram, HISTOGRAM_EDGES, f"{t.target} {name} absolute error histogram",
                            limit=_abs_limit(e, tolerances))
        out.append(f"<figure>{svg}<figcaption>{_e(name)} (input set {c.input_index}): "
                   f"{verdict(e.passed)}, max abs {fmt(e.max_abs)}</figcaption></figure>")
    out.append("</div>")
    if t.notes:
        out.append("<ul class=\"note\">" + "".join(f"<li>{_e(n)}</li>" for n in t.notes) + "</ul>")
    return out


def to_html(report: "ParityReport") -> str:
    """The report as one HTML document (UTF-8, inline CSS and SVG only)."""
    v = verdict(report.passed)
    body = [f'<h1>Parity report: {_e(report.model)} — <span class="{v}">{v}</span></h1>',
            f"<p>Reference: PyTorch. Input sets: {len(report.inputs)}. "
            f"Targets: {_e(', '.join(t.target for t in report.targets))}.</p>"]
    body += _summary(report)
    for t in report.targets:
        body += _target(t, report.tolerances)
    if report.op_profile is not None:
        body.append("<h2>Per-op error profile</h2>")
        body += _op_chart(report.op_profile, f"Every FX node of the lowered program ({report.op_profile.method}, "
                          f"input set {report.op_profile.input_index}) against PyTorch: log10 max relative error.")
    if report.cross:
        body.append("<h2>Targets compared with each other</h2><table><tr><th>input set</th><th>pair</th>"
                    "<th>output</th><th>max abs</th><th>max rel</th><th>cosine</th><th>result</th></tr>")
        for c in report.cross:
            e = c.error
            body.append(_row([str(c.input_index), f"{_e(c.reference)} vs {_e(c.target)}", _e(e.name),
                              fmt(e.max_abs), fmt(e.max_rel), f"{e.cosine:.6f}", verdict(e.passed)],
                             ["num", "", "", "num", "num", "num", verdict(e.passed)]))
        body.append("</table>")
    body.append("<h2>Inputs</h2><table><tr><th>set</th><th>origin</th><th>tensors</th><th>how drawn</th></tr>")
    for i in report.inputs:
        tensors = "<br>".join(f"{_e(n)} {list(s)} {_e(d)}" for n, s, d in i.specs)
        body.append(_row([str(i.index), _e(i.origin), tensors, "<br>".join(_e(n) for n in i.notes)]))
    body.append("</table>")
    tol = ", ".join(f"{_e(str(k).replace('torch.', ''))}: rtol {r:g} / atol {a:g}"
                    for k, (r, a) in report.tolerances.items())
    env = ", ".join(f"{_e(k)} {_e(val)}" for k, val in report.environment.items())
    body.append(f'<p class="note">Tolerances: {tol}. Environment: {env}.</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Parity report: {_e(report.model)} — {v}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body) + "\n</body></html>\n")
