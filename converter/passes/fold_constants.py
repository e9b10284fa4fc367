"""Evaluate weight-only subgraphs at conversion time (inference only)."""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram

from converter.passes.base import Pass
from converter.passes.program import ProgramEditor, is_pure_op, node_inputs


def _nbytes(value: Any) -> int | None:
    """Bytes of a tensor (or of the tensors in a tuple/list); None when unknown (symbolic)."""
    if isinstance(value, torch.Tensor):
        try:
            return int(value.numel()) * value.element_size()
        except (TypeError, RuntimeError):  # a symbolic numel (dynamic shape)
            return None
    if isinstance(value, (tuple, list)):
        sizes = [_nbytes(v) for v in value]
        return None if any(s is None for s in sizes) else sum(sizes)
    return 0


class FoldConstantsPass(Pass):
    """Replace subgraphs that read only parameters, buffers and constants by their value.

    Weight transposes (``permute``/``t`` of a weight), casts of weights and
    arithmetic on constants are computed once with PyTorch; the result becomes a
    new CONSTANT_TENSOR input (placed after the other lifted inputs, its InputSpec
    at the same position, its value in ``ep.constants``) carrying the source
    location of the node it replaces. The inputs it no longer needs are left for
    :class:`~converter.passes.eliminate_dead_code.EliminateDeadCodePass`.

    Equal folded values share one constant.

    Not folded: random ops, ops with side effects or mutable schemas, ops that
    return uninitialised memory (``empty*``), anything reading a buffer the
    program mutates, control flow, non-tensor results (kept as ops; their
    constant inputs are folded instead), results bigger than
    ``max(max_growth × their constant inputs, small_bytes)`` — an ``expand`` or
    ``full`` is cheaper to run than to store — and results over ``small_bytes``
    computed from a weight that other ops still read (tied embeddings: storing
    the transposed copy too would double the weight). Skipped candidates and
    the reason are listed in :attr:`skipped`.
    """

    inference_only = True

    #: A folded value may be at most this many times the bytes of the constants it reads …
    max_growth: float = 2.0
    #: … unless it is at most this small.
    small_bytes: int = 4096

    def __init__(self, *, inference: bool = True) -> None:
        super().__init__(inference=inference)
        #: ``(node name, reason)`` of constant subgraphs that were left in place.
        self.skipped: list[tuple[str, str]] = []

    def call(self, ep: ExportedProgram) -> tuple[ExportedProgram, bool]:
        """Return the program with constant subgraphs folded."""
        editor = ProgramEditor(ep)
        values: dict[torch.fx.Node, Any] = {}
        leaves: dict[torch.fx.Node, frozenset] = {}
        for node in editor.graph.nodes:
            if node.op == "placeholder":
                value = editor.constant_value(node)
                if value is not None:
                    values[node] = value
                    leaves[node] = frozenset([node])
            elif is_pure_op(node) and all(n in values for n in node.all_input_nodes):
                deps = frozenset().union(*(leaves[n] for n in node_inputs(node)))
                budget = self._budget(values, deps)
                size = _nbytes(node.meta.get("val"))
                if size is None or size > budget:
                    self.skipped.append((node.name, f"result of {size} bytes exceeds budget {budget}"))
                    continue
                value = self._evaluate(node, values)
                if value is None:
                    continue
                if (_nbytes(value) or 0) > budget:
                    self.skipped.append((node.name, f"result of {_nbytes(value)} bytes exceeds budget {budget}"))
                    continue
                values[node] = value
                leaves[node] = deps

        # Leaves read by ops that stay in the graph stay in the artifact: folding a
        # big copy of one (the transposed embedding of a tied LM head) would store
        # its bytes twice.
        live = {n for n in values if n.op == "placeholder" and any(u not in values for u in n.users)}
        chosen: dict[torch.fx.Node, None] = {}
        kept: set[torch.fx.Node] = set()

        def choose(node: torch.fx.Node) -> None:
            if node in chosen or node in kept or node.op != "call_function":
                return
            value = values[node]
            if isinstance(value, torch.Tensor):
                shared = sorted(n.name for n in leaves[node] & live)
                if not shared or (_nbytes(value) or 0) <= self.small_bytes:
                    chosen[node] = None
                    return
                self.skipped.append((node.name, f"would duplicate {', '.join(shared)}, which stay in use"))
            kept.add(node)  # keep the op, fold what feeds it
            live.update(n for n in node_inputs(node) if n.op == "placeholder")
            for inp in node_inputs(node):
                choose(inp)

        for node in editor.graph.nodes:
            if node in values and any(u not in values for u in node.users):
                choose(node)
        if not chosen:
            return ep, False
        folded: list[tuple[torch.Tensor, torch.fx.Node]] = []
        for node in chosen:
            # Equal values share one constant (a weight transposed in two places).
            value = values[node]
            constant = next((c for v, c in folded if v.dtype == value.dtype and v.shape == value.shape
                             and torch.equal(v, value)), None)
            if constant is None:
                constant = editor.add_constant(value, node.name, like=node)
                folded.append((value, constant))
            node.replace_all_uses_with(constant)
        editor.erase_dead([n for n in values if n.op == "call_function"])
        return editor.build(), True

    def _budget(self, values: dict, deps: frozenset) -> int:
        return max(int(self.max_growth * sum(_nbytes(values[d]) or 0 for d in deps)), self.small_bytes)

    def _evaluate(self, node: torch.fx.Node, values: dict) -> Any:
        args = torch.fx.node.map_arg(node.args, lambda n: values[n])
        kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: values[n])
        try:
            with torch.no_grad():
                return node.target(*args, **kwargs)
        except (RuntimeError, NotImplementedError, TypeError, ValueError) as e:
            # Folding is an optimisation: an op PyTorch cannot run eagerly here
            # (e.g. a meta-only kernel) stays in the graph, and the reason is kept.
            self.skipped.append((node.name, f"{type(e).__name__}: {e}"))
            return None
