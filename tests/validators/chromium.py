"""Render an HTML report in headless Chromium and measure what it drew.

:func:`render` copies the report next to itself with one probe ``<script>`` added
at the end of the body (the report itself has none), loads it from disk in
headless Chromium with every host name unresolvable, and returns what the probe
measured in the laid-out page, plus the console messages Chromium logged.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

#: The browser, when installed (Debian: ``apt-get install chromium``).
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)

_PROBE = """<script id="probe">(function () {
  const box = r => ({left: r.left, top: r.top, right: r.right, bottom: r.bottom, width: r.width, height: r.height});
  const out = {viewport: window.innerWidth, page_width: document.documentElement.scrollWidth, svgs: [],
               tables: [], resources: performance.getEntriesByType("resource").map(e => e.name)};
  for (const svg of document.querySelectorAll("svg")) {
    const r = svg.getBoundingClientRect();
    const clipped = [];
    for (const t of svg.querySelectorAll("text")) {
      const b = t.getBoundingClientRect();
      if (t.getComputedTextLength() <= 0 || b.left < r.left - 0.5 || b.right > r.right + 0.5 ||
          b.top < r.top - 0.5 || b.bottom > r.bottom + 0.5) clipped.push(t.textContent);
    }
    const scroller = svg.closest("figure");
    out.svgs.push({svg: svg instanceof SVGSVGElement, label: svg.getAttribute("aria-label"), box: box(r),
                   rects: svg.querySelectorAll("rect").length, texts: svg.querySelectorAll("text").length,
                   clipped: clipped, figure_width: scroller ? scroller.getBoundingClientRect().width : null});
  }
  for (const table of document.querySelectorAll("table")) {
    out.tables.push({header: Array.from(table.rows[0].cells).map(c => c.textContent),
                     rows: table.rows.length, box: box(table.getBoundingClientRect())});
  }
  document.body.setAttribute("data-probe", JSON.stringify(out));
})();</script>"""


def render(report_html: Path, out_dir: Path, *, width: int = 1280, height: int = 900, timeout: float = 60.0) -> dict:
    """Load ``report_html`` (plus the probe) in headless Chromium; return the probe's measurements.

    Args:
        report_html: the report file.
        out_dir: where the probe copy is written.
        width: viewport width in CSS pixels.
        height: viewport height.
        timeout: seconds before Chromium is killed.

    Returns:
        The probe's dict (``viewport``, ``page_width``, ``svgs``, ``tables``,
        ``resources``) with ``console``: the page's console messages.

    Raises:
        AssertionError: Chromium failed or the probe did not run (its error is in
            the console messages).
    """
    text = report_html.read_text(encoding="utf-8")
    assert text.count("</body>") == 1, "the report must have exactly one </body>"
    probe = out_dir / f"probe_{report_html.parent.name}_{report_html.name}"
    probe.write_text(text.replace("</body>", _PROBE + "</body>"), encoding="utf-8")
    cmd = [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
           "--host-resolver-rules=MAP * ~NOTFOUND", f"--window-size={width},{height}",
           "--enable-logging=stderr", "--v=0", f"--user-data-dir={out_dir / 'chromium-profile'}",
           "--dump-dom", probe.resolve().as_uri()]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    console = [line for line in done.stderr.splitlines() if ":CONSOLE" in line]
    assert done.returncode == 0, f"chromium exited {done.returncode}: {done.stderr[-2000:]}"
    found = re.search(r'data-probe="([^"]*)"', done.stdout)
    assert found, f"the probe did not run; console: {console}"
    data = json.loads(html.unescape(found.group(1)))
    data["console"] = console
    return data
