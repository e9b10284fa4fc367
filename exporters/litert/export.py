"""LoweredProgram → one TFLite subgraph (trace, translate, optimize)."""

from __future__ import annotations

from typing import Any

import numpy as np

from converter.errors import UnsupportedOpError, source_location
from exporters.jaxpr_trace import fx_locator, trace
from exporters.litert.emitter import Emitter, Val
from exporters.litert.ir import Graph
from exporters.litert.loops import called_graphs
from exporters.litert.optimize import optimize
from exporters.litert.translate import NO_TYPES, Translator

NHWC = (0, 2, 3, 1)


def lower_program(program: Any, name: str, *, channels_last_io: bool = False, notes: list[str],
                  options: dict | None = None) -> Graph:
    """Translate one LoweredProgram into a TFLite :class:`Graph` named ``name``.

    Args:
        program: a ``converter.lowering.interpreter.LoweredProgram``.
        name: the signature key.
        channels_last_io: rank-4 inputs and outputs are NHWC in the file.
        notes: list collecting conversion decisions.
        options: exporter options (reserved).

    Raises:
        UnsupportedOpError: a primitive or composite has no TFLite mapping.
        ExportError: anything else that prevents the export.
    """
    closed, avals, env, shapes, carriers = trace(program, "LiteRT")
    for i, aval in enumerate(avals):
        _check_dtype(program, "input", i, aval.dtype)
    graph = Graph(name)
    em = Emitter(graph, notes, options)
    em.dim_env = env
    vals = []
    for i, (spec, shape, aval) in enumerate(zip(program.inputs, shapes, avals)):
        perm = NHWC if channels_last_io and len(shape) == 4 else None
        dims = [shape[p] for p in (perm or range(len(shape)))]
        t = em.tensor(dims, aval.dtype, "input")
        t.name = f"{name}_args_{i}"
        val = Val(shape, aval.dtype, tensor=t, perm=perm)
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                base, scale, offset = carriers[(i, axis)]
                em.dim_sources.setdefault(base, (val, axis, scale, offset))
        graph.inputs.append(t)
        graph.input_names.append(f"args_{i}")
        vals.append(val)
    if any(np.dtype(a.dtype) == np.float64 for a in avals):
        em.note("float64 inputs/outputs are float32 in the LiteRT model")
    outs = Translator(em, fx_locator(program)).run(closed, vals)
    for i, val in enumerate(outs):
        _check_dtype(program, "output", i, val.dtype)
        perm = NHWC if channels_last_io and val.rank == 4 else None
        t = em.tensor_of(val, perm, expand=True)
        if t.is_const or t in graph.inputs or t in graph.outputs:
            # TFLite outputs must be produced by an operator: copy through a RESHAPE.
            dims = [val.shape[p] for p in (perm or range(val.rank))]
            t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, val.dtype)
        graph.outputs.append(t)
        graph.output_names.append(f"output_{i}")
        graph.output_dtypes.append(np.dtype(val.dtype))
    optimize(graph)
    for sub in called_graphs(graph):  # (loop bodies)
        optimize(sub)
    for i, t in enumerate(graph.outputs):
        t.name = f"{name}_output_{i}"
    return graph


def _check_dtype(program: Any, kind: str, index: int, dtype: Any) -> None:
    """Refuse a model input or output whose dtype has no TFLite type (an op making one is
    refused where it is, by the translator; these are the values no op makes: inputs and
    constants returned as outputs, e.g. a folded ``torch.full(..., dtype=torch.bfloat16)``).

    Raises:
        UnsupportedOpError: naming the FX node (the folded constant or placeholder) and its
            source line where the program has an FX graph.
    """
    name = np.dtype(dtype).name
    if name not in NO_TYPES:
        return
    node = _fx_node(program, kind, index)
    what = str(node.target) if node is not None and node.op == "call_function" else \
        f"{kind} {index}" + (f" ({node.name})" if node is not None else "")
    where = source_location(node) if node is not None else None
    reason = f"dtype {name} has no LiteRT type"
    if np.issubdtype(np.dtype(dtype), np.complexfloating):  # (complex values inside the program are pairs)
        reason += " (no complex tensors: pass or return torch.view_as_real(x), the same numbers as a real tensor)"
    raise UnsupportedOpError(what, "litert", where, reason=reason, hint=False)


def _fx_node(program: Any, kind: str, index: int) -> Any:
    """The FX node of user input / output ``index`` of ``program``, or ``None``."""
    ep = getattr(program, "exported", None)
    if ep is None:
        return None
    from torch.export.graph_signature import OutputKind
    if kind == "input":  # program.inputs are named after their placeholders
        wanted = program.inputs[index].name if index < len(program.inputs) else None
        return next((n for n in ep.graph.nodes if n.op == "placeholder" and n.name == wanted), None)
    specs = ep.graph_signature.output_specs
    user = [a for s, a in zip(specs, ep.graph.output_node().args[0]) if s.kind == OutputKind.USER_OUTPUT]
    node = user[index] if index < len(user) else None
    return node if hasattr(node, "op") else None
