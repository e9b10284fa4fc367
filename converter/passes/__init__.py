"""Shared FX passes over the captured ExportedProgram, run in one declared order."""

from __future__ import annotations

from torch.export import ExportedProgram

from converter.passes.base import Pass, PassResult

#: The declared order (STYLE.md #10). Filled by the pass modules.
PIPELINE: list[type[Pass]] = []


def run_passes(ep: ExportedProgram, *, inference: bool = True) -> tuple[ExportedProgram, list[PassResult]]:
    """Run every pass of :data:`PIPELINE` that applies to the mode.

    Args:
        ep: the captured program.
        inference: weight-folding passes (constant folding, BatchNorm folding) run
            only for inference; training keeps parameters as parameters.

    Returns:
        The transformed program and one :class:`PassResult` per pass run.
    """
    results = []
    for cls in PIPELINE:
        p = cls()
        if p.inference_only and not inference:
            continue
        p.requires(ep)
        ep, modified = p.call(ep)
        p.ensures(ep)
        results.append(PassResult(cls.__name__, modified))
    return ep, results
