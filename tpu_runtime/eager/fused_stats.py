"""Why fused eager's graphs ran, how big they were and how many were compiled: :func:`fused_report`.

A fused graph runs at a sync point. The ones a training loop is built around cost nothing extra: the end of
``loss.backward()`` and of an optimizer's ``step()`` start the graph and Python records on while it computes.
A *value read* — ``.item()``, ``.cpu()``, ``print``, ``if t > 0:``, an op whose output shape depends on the
values (``nonzero``, boolean-mask indexing) — makes Python wait for the graph, and cuts the step's work into one
more graph to compile and run every step; so does calling a ``torch.compile``d function on pending values (a
*compiled call*: its executable takes concrete arrays). The report counts the graphs by what ran them and names
the source line of each value read and compiled call (the innermost frame outside torch and tpu-export, and the
user's line that called it when that frame is a library's), as torch_xla's debug metrics name the line behind
each graph execution::

    with tpu_runtime.eager_mode("fused"):
        train()
    print(tpu_runtime.fused_report())

``compiled`` counts the graphs whose structure was new to the in-memory cache (compiled, or loaded from the disk
cache): in a loop that records the same ops every step, it stops growing after the first steps.
"""

from __future__ import annotations

import collections
import copy
from dataclasses import dataclass, field

from converter.errors import caller_location

#: What runs a fused graph (:meth:`~tpu_runtime.eager.fused.FusedGraph.flush`'s ``cause``).
CAUSES = ("forward", "backward", "optimizer step", "value read", "compiled call", "sync", "size limit", "mode switch")


@dataclass
class FusedReport:
    """Counters of the fused graphs run since the process started or :func:`reset_fused_report`.

    Attributes:
        graphs: graphs run.
        ops: ops recorded in them.
        compiled: those graphs whose structure was not in the in-memory cache.
        causes: graphs run per cause (one of :data:`CAUSES`).
        reads: value-read and compiled-call graphs per source location (:func:`read_location`).
    """

    graphs: int = 0
    ops: int = 0
    compiled: int = 0
    causes: collections.Counter = field(default_factory=collections.Counter)
    reads: collections.Counter = field(default_factory=collections.Counter)

    def note(self, cause: str, ops: int, compiled: bool) -> None:
        """Count one graph of ``ops`` ops run for ``cause`` (a value read also notes its source line)."""
        self.graphs += 1
        self.ops += ops
        self.compiled += compiled
        self.causes[cause] += 1
        if cause in _WAITS:
            self.reads[read_location()] += 1

    def __str__(self) -> str:
        per = f", {self.ops / self.graphs:.0f} ops per graph" if self.graphs else ""
        lines = [f"fused eager: {self.graphs} graphs run ({self.compiled} compiled), {self.ops} ops{per}"]
        lines += [f"  {cause:<15}{self.causes[cause]:>8}" for cause in CAUSES if self.causes[cause]]
        if self.reads:
            lines.append("value reads and compiled calls (Python waits for the graph there; in a loop each is one more "
                         "graph per step):")
            lines += [f"  {n:>8}  {where}" for where, n in self.reads.most_common()]
        return "\n".join(lines)


#: Causes that make Python wait for the graph where they happen: a value read, and a call of a ``torch.compile``d
#: function on pending values (its executable takes concrete arrays), counted by source line.
_WAITS = frozenset({"value read", "compiled call"})
#: Frames of the runtime and of torch: a value read is named by the first frame outside them.
_RUNTIME = ("/torch/", "/converter/", "/tpu_runtime/", "<frozen")


def read_location() -> str:
    """Where a value read happened: the innermost frame outside torch and tpu-export; when that frame is a
    library's (``transformers`` checking whether a mask is all ones), also the user's line that called it."""
    inner = caller_location(_RUNTIME)
    if "/site-packages/" not in (inner.file or ""):
        return str(inner)
    return f"{str(inner).split('/site-packages/', 1)[1]} (from {caller_location()})"


#: The process-wide counters (autograd's thread records into the same graph).
REPORT = FusedReport()


def fused_report() -> FusedReport:
    """A copy of the fused-graph counters (see the module docstring); ``print`` it for a summary."""
    return copy.deepcopy(REPORT)


def reset_fused_report() -> None:
    """Zero the fused-graph counters."""
    REPORT.__init__()


__all__ = ["CAUSES", "FusedReport", "fused_report", "read_location", "reset_fused_report", "REPORT"]
