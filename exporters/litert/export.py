"""LoweredProgram → one TFLite subgraph (trace, translate, optimize)."""

from __future__ import annotations

from typing import Any

import numpy as np

from exporters.jaxpr_trace import fx_locator, trace
from exporters.litert.emitter import Emitter, Val
from exporters.litert.ir import Graph
from exporters.litert.optimize import optimize
from exporters.litert.translate import Translator

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
    closed, avals, env, shapes = trace(program, "LiteRT")
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
                em.dim_sources.setdefault(d, (val, axis))
        graph.inputs.append(t)
        graph.input_names.append(f"args_{i}")
        vals.append(val)
    if any(np.dtype(a.dtype) == np.float64 for a in avals):
        em.note("float64 inputs/outputs are float32 in the LiteRT model")
    outs = Translator(em, fx_locator(program)).run(closed, vals)
    for i, val in enumerate(outs):
        perm = NHWC if channels_last_io and val.rank == 4 else None
        t = em.tensor_of(val, perm, expand=True)
        if t.is_const or t in graph.inputs or t in graph.outputs:
            # TFLite outputs must be produced by an operator: copy through a RESHAPE.
            dims = [val.shape[p] for p in (perm or range(val.rank))]
            t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, val.dtype)
        graph.outputs.append(t)
        graph.output_names.append(f"output_{i}")
    optimize(graph)
    for i, t in enumerate(graph.outputs):
        t.name = f"{name}_output_{i}"
    return graph

