"""The pass contract: ``requires`` → ``call`` → ``ensures`` (STYLE.md #10)."""

from __future__ import annotations

from dataclasses import dataclass

from torch.export import ExportedProgram


@dataclass(frozen=True)
class PassResult:
    """What one pass did."""

    name: str
    modified: bool


class Pass:
    """Base class of the FX passes: small, one per file, keeping ``node.meta``.

    A pass never mutates the program it is given; ``call`` returns a new one (or
    the same object when nothing changed).

    Args:
        inference: the program is converted for inference (weights may be folded
            or dropped); ``False`` keeps every parameter as a parameter.
    """

    #: Passes that fold weights run only when converting for inference.
    inference_only: bool = False

    def __init__(self, *, inference: bool = True) -> None:
        self.inference = inference

    def requires(self, ep: ExportedProgram) -> None:
        """Check preconditions; raise if the program is not in the expected form."""

    def call(self, ep: ExportedProgram) -> tuple[ExportedProgram, bool]:
        """Transform ``ep``; return it and whether anything changed."""
        raise NotImplementedError(f"{type(self).__name__} must implement call()")

    def ensures(self, ep: ExportedProgram) -> None:
        """Check postconditions (by default: the graph lints)."""
        ep.graph.lint()
