"""Merge identical pure computations."""

from __future__ import annotations

from typing import Any, Hashable

import torch
from torch.export import ExportedProgram

from converter.passes.base import Pass
from converter.passes.program import ProgramEditor, is_pure_op


class _Unhashable(Exception):
    """An argument that cannot be part of a CSE key (the node is then left alone)."""


def _key(value: Any, rep: dict[torch.fx.Node, torch.fx.Node]) -> Hashable:
    """A hashable key of an argument; the type is part of it so ``1``, ``1.0`` and ``True`` differ."""
    if isinstance(value, torch.fx.Node):
        return ("node", rep.get(value, value).name)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, tuple(_key(v, rep) for v in value))
    if isinstance(value, dict):
        return ("dict", tuple(sorted((k, _key(v, rep)) for k, v in value.items())))
    if isinstance(value, slice):
        return ("slice", _key(value.start, rep), _key(value.stop, rep), _key(value.step, rep))
    if isinstance(value, float):
        # -0.0 == 0.0 but they are different constants; NaN never equals itself.
        return ("float", value.hex())
    if value is None or isinstance(value, (bool, int, str, torch.dtype, torch.device, torch.layout,
                                           torch.memory_format)):
        return (type(value).__name__, value)
    raise _Unhashable(type(value).__name__)


class EliminateCommonSubexpressionsPass(Pass):
    """Replace a pure call_function node by an earlier one with the same target and arguments.

    Keyword arguments are compared by name; node arguments by their (already
    merged) representative, so chains of duplicates collapse in one pass. The
    kept node is the first in graph order and keeps its ``node.meta``.

    Never merged: random ops (``native_dropout``, ``bernoulli``, ``rand*``,
    ``randn*``: two draws are two different values), ops with mutable schemas or
    side effects, ``empty*``, control flow, and nodes whose arguments hold a
    value without a stable key (tensors baked into args, custom objects).
    """

    def call(self, ep: ExportedProgram) -> tuple[ExportedProgram, bool]:
        """Return the program with duplicates merged."""
        editor = ProgramEditor(ep)
        rep = _duplicates(editor.graph)
        if not rep:
            return ep, False
        for node, first in rep.items():
            node.replace_all_uses_with(first)
        editor.erase_dead(rep)
        return editor.build(), True

    def ensures(self, ep: ExportedProgram) -> None:
        """The graph lints and no two pure nodes compute the same thing."""
        super().ensures(ep)
        left = _duplicates(ep.graph)
        if left:
            raise AssertionError(f"duplicates left after {type(self).__name__}: "
                                 f"{[(n.name, f.name) for n, f in left.items()]}")


def _duplicates(graph: torch.fx.Graph) -> dict[torch.fx.Node, torch.fx.Node]:
    """Map each duplicate pure node to the first node (in graph order) computing the same value."""
    seen: dict[Hashable, torch.fx.Node] = {}
    rep: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in graph.nodes:
        if not is_pure_op(node):
            continue
        try:
            key = (node.target, _key(node.args, rep), _key(dict(node.kwargs), rep))
        except _Unhashable:
            continue
        first = seen.setdefault(key, node)
        if first is not node:
            rep[node] = first
    return rep
