"""Editing an ExportedProgram safely: the helpers every pass shares.

A pass never mutates the program it is given. :class:`ProgramEditor` copies the
graph (node names and ``node.meta`` kept), lets the pass rewrite it and add or
drop lifted inputs, and :meth:`ProgramEditor.build` assembles a new
``ExportedProgram`` whose signature, ``state_dict`` and ``constants`` match the
placeholders — torch.export's verifier checks that on construction.
"""

from __future__ import annotations

import copy
import operator
from typing import Any, Iterable

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import (ExportGraphSignature, InputKind, InputSpec, OutputKind, OutputSpec,
                                          SymBoolArgument, SymFloatArgument, SymIntArgument, TensorArgument,
                                          TokenArgument)

#: Lifted inputs whose value is known at conversion time (unless mutated).
LIFTED_TENSOR_KINDS = (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR)

#: Ops that return uninitialised memory: evaluating them bakes arbitrary bytes
#: into the artifact and breaks "same model → byte-identical file".
_UNINITIALISED = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                            "empty_permuted"})

#: Signature arguments that only name a graph node.
_RENAMEABLE = (TensorArgument, SymIntArgument, SymFloatArgument, SymBoolArgument, TokenArgument)

#: ``node.meta`` keys that point errors at user code; copied onto nodes a pass creates.
SOURCE_META_KEYS = ("stack_trace", "nn_module_stack", "source_fn_stack", "torch_fn")


def is_random(target: Any) -> bool:
    """True for ops that draw from an RNG (dropout, bernoulli, rand*, randn*, …)."""
    if isinstance(target, torch._ops.OpOverload):
        return torch.Tag.nondeterministic_seeded in target.tags or bool(
            getattr(target, "_nondeterministic_seeded", False))
    return False


def is_side_effecting(node: torch.fx.Node) -> bool:
    """True when removing or merging ``node`` could change behaviour.

    Mutable schemas, asserts and other effectful ops (``torch.fx`` side-effect
    list), random ops, and higher-order ops (control flow whose body may mutate).
    """
    if node.op != "call_function":
        return node.op in ("placeholder", "output")
    target = node.target
    if isinstance(target, torch._ops.HigherOrderOperator):
        return True
    if isinstance(target, torch._ops.OpOverload) and target._schema.is_mutable:
        return True
    if is_random(target):
        return True
    return node.is_impure()


def is_pure_op(node: torch.fx.Node) -> bool:
    """True for a call of an ATen overload (or ``getitem``) that is safe to evaluate or merge."""
    if node.op != "call_function" or is_side_effecting(node):
        return False
    if node.target is operator.getitem:
        return True
    if not isinstance(node.target, torch._ops.OpOverload):
        return False
    return node.target._schema.name.split("::", 1)[-1] not in _UNINITIALISED


def source_meta(node: torch.fx.Node) -> dict:
    """The source-location part of ``node.meta`` (to copy onto a node that replaces it)."""
    return {k: node.meta[k] for k in SOURCE_META_KEYS if k in node.meta}


def node_inputs(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The distinct nodes ``node`` reads, in argument order."""
    return list(dict.fromkeys(node.all_input_nodes))


def mutated_input_targets(ep: ExportedProgram) -> set[str]:
    """Targets (buffer FQNs / user input names) that the program writes to."""
    kinds = (OutputKind.BUFFER_MUTATION, OutputKind.USER_INPUT_MUTATION, OutputKind.PARAMETER_MUTATION)
    return {s.target for s in ep.graph_signature.output_specs if s.kind in kinds}


class ProgramEditor:
    """A mutable copy of an ExportedProgram's graph, signature and weights.

    Args:
        ep: the program to copy. It is not modified.
    """

    def __init__(self, ep: ExportedProgram) -> None:
        self.ep = ep
        self.graph = torch.fx.Graph()
        env: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in ep.graph.nodes:
            env[node] = self.graph.node_copy(node, lambda n: env[n])
            # torch.export names nodes directly, so a name FX would not pick (an
            # argument called ``input`` shadows a builtin) comes back suffixed; the
            # signature refers to the original name, so restore it as torch does.
            # It is unique: FX only renames builtins and names it already handed out.
            env[node].name = node.name
        self.specs: dict[str, InputSpec] = {s.arg.name: s for s in ep.graph_signature.input_specs}
        self.state_dict: dict[str, Any] = dict(ep.state_dict)
        self.constants: dict[str, Any] = dict(ep.constants)
        self.mutated = mutated_input_targets(ep)
        self._old_outputs = [s.arg.name for s in ep.graph_signature.output_specs]
        self._fake_mode = torch._guards.detect_fake_mode(
            [n.meta["val"] for n in ep.graph.nodes if isinstance(n.meta.get("val"), torch.Tensor)])

    # --- lifted inputs -------------------------------------------------------------------------

    def placeholders(self) -> list[torch.fx.Node]:
        """The graph's placeholders, in order."""
        return [n for n in self.graph.nodes if n.op == "placeholder"]

    def spec(self, node: torch.fx.Node) -> InputSpec | None:
        """The InputSpec of a placeholder (None for other nodes)."""
        return self.specs.get(node.name) if node.op == "placeholder" else None

    def constant_value(self, node: torch.fx.Node) -> torch.Tensor | None:
        """The value of a parameter / buffer / constant placeholder that is never mutated, else None."""
        spec = self.spec(node)
        if spec is None or spec.kind not in LIFTED_TENSOR_KINDS or spec.target in self.mutated:
            return None
        value = self.state_dict.get(spec.target, self.constants.get(spec.target))
        return value if isinstance(value, torch.Tensor) else None

    def add_constant(self, value: torch.Tensor, name: str, like: torch.fx.Node | None = None) -> torch.fx.Node:
        """Add a CONSTANT_TENSOR placeholder holding ``value``.

        The placeholder goes after the last lifted tensor input (before the user
        inputs), its InputSpec at the same position; ``node.meta`` gets a fake
        ``val`` and the source location of ``like`` (the node it stands for).

        Args:
            value: the tensor (stored detached and contiguous).
            name: a readable stem for the constant's name.
            like: the node whose value this constant replaces.

        Returns:
            The new placeholder.
        """
        value = value.detach().contiguous()
        name = name.replace(".", "_").replace("-", "_")
        target = self._fresh_target(f"_folded.{name}")
        phs = self.placeholders()
        lifted = [p for p in phs if (s := self.spec(p)) is not None and
                  s.kind in (*LIFTED_TENSOR_KINDS, InputKind.TOKEN)]
        # The graph always ends in its output node, so an anchor exists.
        anchor = lifted[-1].next if lifted else next(iter(self.graph.nodes))
        with self.graph.inserting_before(anchor):
            node = self.graph.placeholder("c_folded_" + name)
        node.target = node.name  # a deduplicated name: the forward argument must match it
        if like is not None:
            node.meta.update(source_meta(like))
        node.meta["val"] = self._fake(value)
        node.meta["tensor_meta"] = torch.fx.passes.shape_prop._extract_tensor_metadata(value)
        self.constants[target] = value
        self.specs[node.name] = InputSpec(InputKind.CONSTANT_TENSOR, TensorArgument(node.name), target, None)
        return node

    def remove_placeholder(self, node: torch.fx.Node) -> None:
        """Drop an unused lifted placeholder, its InputSpec and (if no longer referenced) its value."""
        if node.users:
            raise AssertionError(f"placeholder {node.name} still has users {list(node.users)}")
        spec = self.specs.pop(node.name)
        self.graph.erase_node(node)
        if spec.target is not None and all(s.target != spec.target for s in self.specs.values()):
            self.state_dict.pop(spec.target, None)
            self.constants.pop(spec.target, None)

    def _fresh_target(self, stem: str) -> str:
        taken = set(self.state_dict) | set(self.constants) | {s.target for s in self.specs.values()}
        target, i = stem, 0
        while target in taken:
            i += 1
            target = f"{stem}_{i}"
        return target

    def _fake(self, value: torch.Tensor) -> torch.Tensor:
        mode = self._fake_mode or torch._subclasses.fake_tensor.FakeTensorMode()
        return mode.from_tensor(value, static_shapes=True)

    # --- graph edits --------------------------------------------------------------------------

    def erase_dead(self, nodes: Iterable[torch.fx.Node]) -> int:
        """Erase those of ``nodes`` (and what only they fed) that have no users; return how many."""
        erased: set[torch.fx.Node] = set()
        pending = list(nodes)
        while pending:
            node = pending.pop()
            if node in erased or node.users or node.op != "call_function" or is_side_effecting(node):
                continue
            inputs = node_inputs(node)
            self.graph.erase_node(node)
            erased.add(node)
            pending.extend(n for n in inputs if n.op == "call_function")
        return len(erased)

    # --- result --------------------------------------------------------------------------------

    def build(self) -> ExportedProgram:
        """Assemble and verify the new ExportedProgram."""
        self.graph.lint()
        input_specs = [self.specs[node.name] for node in self.placeholders()]
        out_node = self.graph.output_node()
        output_specs, renames = [], {}
        for spec, arg, old in zip(self.ep.graph_signature.output_specs, out_node.args[0], self._old_outputs):
            if isinstance(arg, torch.fx.Node) and isinstance(spec.arg, _RENAMEABLE) and old != arg.name:
                renames[old] = arg.name  # the output node was merged or folded into another one
                spec = OutputSpec(spec.kind, type(spec.arg)(name=arg.name), spec.target)
            output_specs.append(spec)
        call_graph = copy.deepcopy(self.ep.module_call_graph)
        for entry in call_graph:
            if entry.signature is not None:
                for out in entry.signature.outputs:
                    if getattr(out, "name", None) in renames:
                        out.name = renames[out.name]
        new = ExportedProgram(
            root=self.ep.graph_module,
            graph=self.graph,
            graph_signature=ExportGraphSignature(input_specs=input_specs, output_specs=output_specs),
            state_dict=self.state_dict,
            range_constraints=copy.deepcopy(self.ep.range_constraints),
            module_call_graph=call_graph,
            example_inputs=self.ep.example_inputs,
            constants=self.constants,
            verifiers=self.ep.verifiers,
        )
        new.graph_module.meta.update(self.ep.graph_module.meta)
        return new
