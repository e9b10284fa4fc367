"""Remove unused computations and the weights nothing reads any more."""

from __future__ import annotations

from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from converter.passes.base import Pass
from converter.passes.program import ProgramEditor, is_side_effecting


class EliminateDeadCodePass(Pass):
    """Erase call_function nodes without users and lifted inputs that became unused.

    Kept always: ops with a mutable schema, asserts and other effectful ops, random
    ops (removing one would shift the RNG stream of the ones after it), user
    inputs, and buffers the program writes to. Unused parameters and buffers are
    dropped from the signature and the ``state_dict`` only for inference — a
    training artifact keeps every parameter so its state matches the model's;
    unused lifted constants are dropped in both modes.
    """

    def requires(self, ep: ExportedProgram) -> None:
        """The signature has one InputSpec per placeholder."""
        n = sum(1 for node in ep.graph.nodes if node.op == "placeholder")
        if n != len(ep.graph_signature.input_specs):
            raise AssertionError(f"{n} placeholders but {len(ep.graph_signature.input_specs)} input specs")

    def call(self, ep: ExportedProgram) -> tuple[ExportedProgram, bool]:
        """Return the program without dead nodes and unused lifted inputs."""
        editor = ProgramEditor(ep)
        modified = False
        for node in reversed(list(editor.graph.nodes)):
            if node.op == "call_function" and not node.users and not is_side_effecting(node):
                editor.graph.erase_node(node)
                modified = True
        removable = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR) if self.inference \
            else (InputKind.CONSTANT_TENSOR,)
        for node in editor.placeholders():
            spec = editor.spec(node)
            if node.users or spec is None or spec.kind not in removable or spec.target in editor.mutated:
                continue
            editor.remove_placeholder(node)
            modified = True
        return (editor.build(), True) if modified else (ep, False)

    def ensures(self, ep: ExportedProgram) -> None:
        """No pure node is left without users."""
        super().ensures(ep)
        dead = [n.name for n in ep.graph.nodes
                if n.op == "call_function" and not n.users and not is_side_effecting(n)]
        if dead:
            raise AssertionError(f"dead nodes left after {type(self).__name__}: {dead}")
