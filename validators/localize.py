"""Find the first op where a target's values leave PyTorch's.

Both sides are evaluated node by node on the same inputs:

* PyTorch: the (post-pass) ExportedProgram's graph module run by a
  ``torch.fx.Interpreter`` that records every node's value;
* the target, by one of three methods (named in the report):

  - ``"intermediates"`` (tpu, stablehlo): the lowered program jit-compiled on
    ``jax.devices()[0]`` with the interpreter's ``observer`` recording every node
    — the same JAX function the TPU runtime compiles and StableHLO exports;
  - ``"extra-outputs"`` (litert and other file targets): the artifact is rebuilt
    by the target's own builder with every input-dependent intermediate as an
    extra output, and run — the target's own numerics at each FX node;
  - ``"proxy"``: when that rebuild fails, the lowered program's intermediates
    stand in for the target's; a divergence inside the target's own translation
    is then reported as not localized.

The first node (in graph order) whose value fails its tolerance is the first
divergence. Its lowering is then re-run alone on PyTorch's input values (the
*isolated* error): a failure there convicts that op's lowering; if it passes,
the op is correct and the error accumulated (numeric drift) or, for
``extra-outputs``, came from the target's translation of the op.
"""

from __future__ import annotations

import dataclasses
import importlib
import operator
from typing import Any, Callable

import jax
import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from converter.api import TARGETS
from converter.errors import ConversionError, source_location
from converter.lowering import registry
from converter.lowering.context import LoweringContext
from converter.lowering.interpreter import LoweredProgram, TensorSpec, conform, run_graph
from tpu_runtime.module import to_jax, to_torch
from validators.metrics import OutputError, compare, to_numpy
from validators.report.data import Localization, NodeError
from validators.tolerances import tolerance

#: Targets whose artifact is the lowered JAX program itself (jit or jax.export).
JAX_TARGETS = ("tpu", "stablehlo")
#: How many failing nodes after the first divergence get an isolated re-check
#: when the first one is innocent (numeric drift), before giving up.
MAX_ISOLATED_CHECKS = 32


def torch_intermediates(ep: ExportedProgram, flat_inputs: list[torch.Tensor]) -> dict[str, Any]:
    """Run the program's graph module in PyTorch and record every node's value.

    Args:
        ep: the ExportedProgram the targets were lowered from.
        flat_inputs: the user's tensor inputs, flattened.

    Returns:
        FX node name → value (tensors, tuples of tensors, scalars).
    """
    values: dict[str, Any] = {}

    class Recorder(torch.fx.Interpreter):
        def run_node(self, n: torch.fx.Node) -> Any:
            out = super().run_node(n)
            values[n.name] = out
            return out

    with torch.no_grad():
        Recorder(ep.graph_module).run(*_placeholder_args(ep, flat_inputs))
    return values


def _placeholder_args(ep: ExportedProgram, flat_inputs: list[torch.Tensor]) -> list[Any]:
    consts = dict(ep.state_dict)
    consts.update(ep.constants)
    kinds = {s.arg.name: s for s in ep.graph_signature.input_specs if hasattr(s.arg, "name")}
    user = iter(flat_inputs)
    args = []
    for node in ep.graph.nodes:
        if node.op != "placeholder":
            continue
        spec = kinds.get(node.name)
        if spec is not None and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            args.append(consts[spec.target])
        elif isinstance(node.meta.get("val"), torch.Tensor):
            args.append(next(user))
        else:
            args.append(getattr(spec.arg, "value", None) if spec is not None else None)
    return args


def jax_intermediates(program: LoweredProgram, flat_inputs: list[torch.Tensor], seed: int = 0) -> dict[str, Any]:
    """Run the lowered program under ``jax.jit`` on the default device, recording every node.

    Returns:
        FX node name → NumPy array, for each ``call_function`` node with an array value.
    """

    def traced(state: dict, key: Any, *xs: Any) -> dict:
        recorded: dict[str, Any] = {}

        def observe(node: torch.fx.Node, value: Any) -> None:
            if node.op == "call_function" and isinstance(value, jax.Array):
                recorded[node.name] = value

        run_graph(program, state, xs, jax.random.wrap_key_data(key), observer=observe)
        return recorded

    with jax.enable_x64(True):
        state = {k: jax.device_put(v) for k, v in program.state.items()}
        key = jax.random.key_data(jax.random.key(seed))
        out = jax.jit(traced)(state, key, *[to_jax(x) for x in flat_inputs])
        return {k: np.asarray(v) for k, v in out.items()}


@dataclasses.dataclass
class ProbedProgram(LoweredProgram):
    """A LoweredProgram whose outputs also carry the values of chosen FX nodes.

    Target builders consume it like any LoweredProgram; the artifact then returns
    the user outputs followed by one output per name in ``probes``.
    """

    probes: tuple = ()

    def fn(self, state: dict, *inputs: Any, rng: Any = None) -> tuple[tuple, dict]:
        """The user outputs plus the probed intermediates."""
        wanted, recorded = set(self.probes), {}

        def observe(node: torch.fx.Node, value: Any) -> None:
            if node.name in wanted:
                recorded[node.name] = value

        outs, muts = run_graph(self, state, inputs, rng, observer=observe)
        return tuple(outs) + tuple(recorded[p] for p in self.probes), muts


def probe_names(ep: ExportedProgram) -> list[str]:
    """Input-dependent, non-empty tensor-valued ``call_function`` nodes, in graph order."""
    users = {s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT
             and hasattr(s.arg, "name")}
    dependent: set[str] = set()
    names = []
    for node in ep.graph.nodes:
        if node.op == "placeholder" and node.name in users:
            dependent.add(node.name)
        elif node.op == "call_function" and any(a.name in dependent for a in node.all_input_nodes):
            dependent.add(node.name)
            val = node.meta.get("val")
            if isinstance(val, torch.Tensor) and val.numel() > 0 and all(isinstance(d, int) for d in val.shape):
                names.append(node.name)
    return names


def probed_intermediates(program: LoweredProgram, target: str, flat_inputs: list[torch.Tensor],
                         builder: Callable | None = None) -> dict[str, Any]:
    """Rebuild ``target``'s artifact with every intermediate as an extra output and run it.

    Args:
        program: the program the target's artifact was built from.
        target: the target name (its builder comes from ``converter.api.TARGETS``).
        flat_inputs: the user's tensor inputs, flattened.
        builder: the builder to use instead of the registered one.

    Returns:
        FX node name → NumPy array.

    Raises:
        ConversionError: the target cannot build or run the probed program.
    """
    names = probe_names(program.exported)
    metas = {n.name: n.meta["val"] for n in program.exported.graph.nodes if n.name in set(names)}
    extra = [TensorSpec(f"probe_{n}", tuple(metas[n].shape), metas[n].dtype) for n in names]
    fields = {f.name: getattr(program, f.name) for f in dataclasses.fields(LoweredProgram)}
    fields["outputs"] = list(program.outputs) + extra
    probed = ProbedProgram(**fields, probes=tuple(names))
    if builder is None:
        module, func = TARGETS[target].split(":")
        builder = getattr(importlib.import_module(module), func)
    artifact = builder(probed, **program.options)
    outs = artifact(*flat_inputs)
    outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
    got = outs[len(program.outputs):]
    if len(got) != len(names):
        raise ConversionError(f"the probed {target} artifact returned {len(outs)} outputs, "
                              f"expected {len(program.outputs) + len(names)}")
    return {n: to_numpy(v) for n, v in zip(names, got)}




def node_tolerance(node: torch.fx.Node, dtype: torch.dtype, overrides: dict | None) -> tuple[float, float]:
    """``(rtol, atol)`` of one node: user override by op name, then by dtype, then the defaults."""
    op = _op_name(node)
    overrides = overrides or {}
    if op in overrides:
        return overrides[op]
    if dtype in overrides:
        return overrides[dtype]
    return tolerance(dtype, op)


def _op_name(node: torch.fx.Node) -> str:
    if node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        return f"{_op_name(node.args[0])}[{node.args[1]}]"
    return str(node.target)


def profile(ep: ExportedProgram, reference: dict, got: dict, overrides: dict | None = None) -> list[tuple]:
    """Compare every recorded node, in graph order.

    Returns:
        ``(node, OutputError)`` pairs for the nodes both sides recorded as tensors.
    """
    pairs = []
    for node in ep.graph.nodes:
        if node.op != "call_function" or node.name not in got:
            continue
        ref = reference.get(node.name)
        if not isinstance(ref, torch.Tensor):
            continue
        rtol, atol = node_tolerance(node, ref.dtype, overrides)
        pairs.append((node, compare(node.name, ref, got[node.name], rtol, atol)))
    return pairs


def isolated_error(node: torch.fx.Node, reference: dict, program: LoweredProgram,
                   overrides: dict | None = None, seed: int = 0) -> OutputError | None:
    """Run one node's lowering alone on PyTorch's input values and compare with PyTorch's output.

    Returns:
        The error, or ``None`` when the node is not an ATen op with tensor output.
    """
    node = producer(node)
    ref = reference.get(node.name)
    if not isinstance(node.target, torch._ops.OpOverload) or not isinstance(ref, torch.Tensor):
        return None

    def value(n: torch.fx.Node) -> Any:
        v = reference[n.name]
        return to_jax(v) if isinstance(v, torch.Tensor) else v

    with jax.enable_x64(True):
        args = torch.fx.node.map_aggregate(node.args, lambda a: value(a) if isinstance(a, torch.fx.Node) else a)
        kwargs = torch.fx.node.map_aggregate(node.kwargs, lambda a: value(a) if isinstance(a, torch.fx.Node) else a)
        row = registry.lookup(node.target, program.target, source_location(node))
        ctx = LoweringContext(node=node, target=program.target, options=program.options, rng=jax.random.key(seed))
        result = conform(registry.apply(row, ctx, tuple(args), dict(kwargs)), node.meta.get("val"), node)
        got = to_torch(result)
    rtol, atol = node_tolerance(node, ref.dtype, overrides)
    return compare(node.name, ref, got, rtol, atol)


def producer(node: torch.fx.Node) -> torch.fx.Node:
    """The op behind a ``getitem`` (multi-output ops), else the node itself."""
    while node.target is operator.getitem and isinstance(node.args[0], torch.fx.Node):
        node = node.args[0]
    return node


def localize(target: str, program: LoweredProgram, flat_inputs: list[torch.Tensor], *, input_index: int = 0,
             overrides: dict | None = None, seed: int = 0, builder: Callable | None = None) -> Localization:
    """Find the first FX node where ``target`` diverges from PyTorch on ``flat_inputs``.

    Args:
        target: the target name.
        program: the LoweredProgram the target's artifact was built from.
        flat_inputs: the (failing) user inputs, flattened.
        input_index: which input set these are (for the report).
        overrides: tolerance overrides (ATen op name or dtype → ``(rtol, atol)``).
        seed: PRNG seed for random ops.
        builder: the target's builder (defaults to the registered one).

    Returns:
        A :class:`Localization` with the per-node profile and, when found, the culprit.
    """
    ep = program.exported
    reference = torch_intermediates(ep, flat_inputs)
    note = ""
    if target in JAX_TARGETS:
        method = "intermediates"
        got = jax_intermediates(program, flat_inputs, seed)
    else:
        try:
            got = probed_intermediates(program, target, flat_inputs, builder)
            method = "extra-outputs"
        except Exception as e:  # any failure of the rebuild is reported (method "proxy" + reason), not hidden
            method = "proxy"
            note = (f"{target} could not be rebuilt with intermediates as extra outputs "
                    f"({str(e).splitlines()[0]}); the lowered program's intermediates (TPU runtime) stand in. ")
            got = jax_intermediates(program, flat_inputs, seed)
    pairs = profile(ep, reference, got, overrides)
    nodes = [NodeError.of(n, _op_name(n), e) for n, e in pairs]
    failing = [(n, e) for n, e in pairs if not e.passed]
    base = dict(target=target, method=method, input_index=input_index, profile=nodes)
    if not failing:
        note += ("every intermediate matches PyTorch; the divergence is inside the target's own translation "
                 "or runtime and cannot be tied to an FX node" if method == "proxy"
                 else "every intermediate matches PyTorch")
        return Localization(kind="not-localized", note=note, **base)
    first, first_err = failing[0]
    culprit, err, isolated = first, first_err, isolated_error(first, reference, program, overrides, seed)
    if isolated is not None and isolated.passed and method != "extra-outputs":
        for n, e in failing[1:MAX_ISOLATED_CHECKS + 1]:
            iso = isolated_error(n, reference, program, overrides, seed)
            if iso is not None and not iso.passed:
                note += (f"values first leave tolerance at {first.name} ({_op_name(first)}) by accumulated "
                         f"rounding; {n.name} is the first op that is wrong on exact inputs. ")
                culprit, err, isolated = n, e, iso
                break
    if isolated is None or not isolated.passed:
        kind = "op"
        note += "the lowering of this op is wrong on PyTorch's exact inputs"
    elif method == "extra-outputs":
        kind = "translation"
        note += (f"the lowering table is correct on this op in isolation; {target}'s translation of it "
                 "(its rules / runtime kernels) diverges")
    else:
        kind = "accumulated"
        note += "no op is wrong on exact inputs; the error is accumulated rounding (consider a per-op tolerance)"
    op_node = producer(culprit)
    loc = source_location(op_node)
    return Localization(kind=kind, node=culprit.name, op=str(op_node.target), location=_location_json(loc),
                        error=err, isolated=isolated, note=note, **base)


def _location_json(loc: Any) -> dict:
    return {"file": loc.file, "line": loc.line, "function": loc.function, "module_path": loc.module_path,
            "module_type": loc.module_type, "text": str(loc)}


def find_node(ep: ExportedProgram, name: str) -> torch.fx.Node:
    """The FX node called ``name`` (the culprit of a :class:`Localization`)."""
    for node in ep.graph.nodes:
        if node.name == name:
            return node
    raise KeyError(name)




def op_profile(program: LoweredProgram, flat_inputs: list[torch.Tensor], *, input_index: int = 0,
               overrides: dict | None = None, seed: int = 0) -> Localization:
    """The per-op error profile of the lowered program on one input set (no culprit sought).

    Used when every target passes, so the report still shows how much headroom
    each op has against its tolerance.
    """
    reference = torch_intermediates(program.exported, flat_inputs)
    got = jax_intermediates(program, flat_inputs, seed)
    pairs = profile(program.exported, reference, got, overrides)
    failing = [n.name for n, e in pairs if not e.passed]
    note = ("every intermediate is within tolerance" if not failing else
            f"{len(failing)} intermediate(s) exceed the per-op tolerance although the outputs pass "
            f"(first: {failing[0]})")
    return Localization(target="lowered program", method="intermediates", input_index=input_index,
                        profile=[NodeError.of(n, _op_name(n), e) for n, e in pairs], kind="none", note=note)


__all__ = ["JAX_TARGETS", "ProbedProgram", "find_node", "isolated_error", "jax_intermediates", "localize",
           "node_tolerance", "op_profile", "probe_names", "probed_intermediates", "producer", "profile",
           "torch_intermediates"]
