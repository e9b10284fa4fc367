"""Shared FX passes over the captured ExportedProgram, run in one declared order."""

from __future__ import annotations

from torch.export import ExportedProgram

from converter.passes.base import Pass, PassResult
from converter.passes.eliminate_common_subexpressions import EliminateCommonSubexpressionsPass
from converter.passes.eliminate_dead_code import EliminateDeadCodePass
from converter.passes.fold_batch_norm import FoldBatchNormPass
from converter.passes.fold_constants import FoldConstantsPass

#: The declared order (STYLE.md #10). BatchNorm folding first: it needs the
#: conv/linear weights as they were captured and yields new constants; constant
#: folding then evaluates weight-only subgraphs (transposes, casts); CSE merges
#: what folding exposed; DCE last drops dead nodes and the weights nobody reads.
PIPELINE: list[type[Pass]] = [
    FoldBatchNormPass,
    FoldConstantsPass,
    EliminateCommonSubexpressionsPass,
    EliminateDeadCodePass,
]

__all__ = ["PIPELINE", "Pass", "PassResult", "run_passes", "EliminateCommonSubexpressionsPass",
           "EliminateDeadCodePass", "FoldBatchNormPass", "FoldConstantsPass"]


def run_passes(ep: ExportedProgram, *, inference: bool = True) -> tuple[ExportedProgram, list[PassResult]]:
    """Run every pass of :data:`PIPELINE` that applies to the mode.

    Args:
        ep: the captured program (not modified; passes return new programs).
        inference: weight-folding passes (constant folding, BatchNorm folding) run
            only for inference; training keeps parameters as parameters.

    Returns:
        The transformed program and one :class:`PassResult` per pass run.
    """
    results = []
    for cls in PIPELINE:
        if cls.inference_only and not inference:
            continue
        p = cls(inference=inference)
        p.requires(ep)
        ep, modified = p.call(ep)
        p.ensures(ep)
        results.append(PassResult(cls.__name__, modified))
    return ep, results
