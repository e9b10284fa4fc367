"""Walk the jaxpr of a LoweredProgram and build the ONNX model.

Tracing (:mod:`exporters.jaxpr_trace`) and the jaxpr walk
(:class:`exporters.jaxpr_walk.JaxprTranslator`: call-like inlining, composites with
decomposition fallback, constant folding, rule lookup, errors naming the primitive,
the enclosing ATen op and the user's source line) are shared with the LiteRT
exporter; this module binds the walk to the ONNX rule tables
(:data:`rules.RULES`, :data:`rules.COMPOSITES`: Gelu, LayerNormalization, Softmax,
Resize, …) and the :class:`OnnxGraph` (constants fold as the walk folds them:
:mod:`exporters.fold`), and assembles and checks the ``ModelProto``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper

from converter.errors import ExportError
from exporters.jaxpr_trace import fx_locator, trace
from exporters.jaxpr_walk import JaxprTranslator
from exporters.onnx import loops, rules
from exporters.onnx.graph import OnnxGraph, Val, edge_dtype, elem_type, onnx_dtype, value_info
from exporters.onnx.inspect import inner_nodes

#: The ONNX opset the exporter writes (Gelu needs 20; ONNX Runtime 1.32 runs it).
OPSET = 20
#: ONNX IR version matching :data:`OPSET`.
IR_VERSION = 10

#: A serialized protobuf message must stay under 2 GiB.
_PROTOBUF_LIMIT = 2**31 - 2**24


class Translator(JaxprTranslator):
    """Translates jaxprs into an :class:`OnnxGraph`.

    Args:
        em: the graph under construction.
        locate: optional ``eqn -> (ATen op name, SourceLocation) | None`` (see ``jaxpr_trace.fx_locator``).
    """

    TARGET = "ONNX"
    KEY = "onnx"
    VAL = Val
    RULES = rules.RULES
    COMPOSITES = rules.COMPOSITES
    #: Primitives whose rules handle constant inputs themselves (folding would bloat the file).
    NO_FOLD = frozenset({"broadcast_in_dim", "iota", "dim_as_value", "reshape"})
    #: Dtypes no rule computes with (ONNX Runtime has no complex kernels for Abs, MatMul, …).
    NO_DTYPES = frozenset({"complex64", "complex128"})
    LOOPS = True

    def while_loop(self, eqn: Any, ins: list) -> list:
        """A ``while`` as a ``Loop`` (:mod:`exporters.onnx.loops`)."""
        return loops.translate_while(self, eqn, ins)

    def scan_loop(self, eqn: Any, ins: list) -> list:
        """A long ``scan`` as a ``Loop`` with scan outputs (:mod:`exporters.onnx.loops`)."""
        return loops.translate_scan(self, eqn, ins)


def build_model(program: Any, notes: list[str], description: str = "tpu-export") -> tuple[onnx.ModelProto, list]:
    """Translate one LoweredProgram into an ONNX ``ModelProto``.

    Returns:
        (model, the jaxpr dtypes of the outputs).

    Raises:
        UnsupportedOpError: a primitive or composite has no ONNX mapping.
        ExportError: anything else that prevents the export.
    """
    closed, avals, env, shapes, carriers = trace(program, "ONNX")
    g = OnnxGraph(notes)
    g.dim_env = env
    inputs, vals = [], []
    for i, (spec, shape, aval) in enumerate(zip(program.inputs, shapes, avals)):
        name = f"args_{i}"
        inputs.append(value_info(name, aval.dtype, shape))
        for axis, d in enumerate(spec.shape):
            if isinstance(d, str):
                base, scale, offset = carriers[(i, axis)]
                g.dim_sources.setdefault(base, (name, axis, scale, offset))
        inside = name if edge_dtype(aval.dtype) == onnx_dtype(aval.dtype) else \
            g.op("Cast", [name], to=elem_type(aval.dtype))  # (a bfloat16 input computes as float32)
        vals.append(Val(shape, aval.dtype, name=inside))
    if any(np.dtype(a.dtype) == np.float64 for a in avals):
        g.note("float64 inputs/outputs are float32 in the ONNX model (the artifact casts back)")
    outs = Translator(g, fx_locator(program)).run(closed, vals)
    outputs, out_dtypes = [], []
    for i, val in enumerate(outs):
        name = f"output_{i}"
        t = g.tensor(val, expand=True)
        if edge_dtype(val.dtype) != onnx_dtype(val.dtype):  # (a bfloat16 output, computed as float32)
            t = g.op("Cast", [t], to=helper.np_dtype_to_tensor_dtype(edge_dtype(val.dtype)))
        g.nodes.append(helper.make_node("Identity", [t], [name], name=f"n{len(g.nodes)}_Identity"))
        outputs.append(value_info(name, val.dtype, val.shape))
        out_dtypes.append(val.dtype)
    _prune(g, [o.name for o in outputs])
    size = sum(len(t.raw_data) for t in g.initializers)
    if size >= _PROTOBUF_LIMIT:
        raise ExportError(f"the ONNX model's weights take {size / 2**30:.2f} GiB, over protobuf's 2 GiB limit "
                          "(ONNX external data is not supported by this exporter yet)")
    graph = helper.make_graph(g.nodes, "main", inputs, outputs, g.initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)], ir_version=IR_VERSION,
                              producer_name="tpu-export", doc_string=description)
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as e:
        raise ExportError(f"the exported ONNX model is invalid: {str(e).strip().splitlines()[0]}") from e
    return model, out_dtypes


def _prune(g: OnnxGraph, outputs: list[str]) -> None:
    """Drop nodes and initializers no output depends on (e.g. a declined composite's attempt)."""
    needed = set(outputs)
    keep = []
    for node in reversed(g.nodes):
        if any(o in needed for o in node.output):
            keep.append(node)
            needed.update(_reads(node))
    g.nodes[:] = keep[::-1]
    g.initializers[:] = [t for t in g.initializers if t.name in needed]


def _reads(node: Any) -> set:
    """The names ``node`` reads: its inputs and, for a ``Loop``, every name its body reads (names are unique
    across the model, so the body's own ones match nothing outside)."""
    return {i for n in (node, *inner_nodes(node)) for i in n.input if i}


__all__ = ["IR_VERSION", "OPSET", "Translator", "build_model"]
