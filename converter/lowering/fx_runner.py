"""Run a plain aten-level ``torch.fx.GraphModule`` (as AOTAutograd hands it over) with the table.

The ExportedProgram interpreter (:mod:`converter.lowering.interpreter`) handles
lifted weights and buffer mutations; here every placeholder is a positional input
and the output tuple is returned as is (``None`` and python ints pass through).
"""

from __future__ import annotations

from typing import Any

import torch

from converter.errors import ConversionError
from converter.lowering.context import LoweringContext
from converter.lowering.interpreter import _call, _materialize, attribute
from converter.lowering.interpreter import check_supported as _check_graph


def check_supported(gm: torch.fx.GraphModule, target: str) -> None:
    """Raise :class:`UnsupportedOpError` for the first op of ``gm`` without a lowering."""
    _check_graph(gm.graph, target)


def run_graph_module(gm: torch.fx.GraphModule, inputs: tuple, *, target: str = "tpu",
                     options: dict | None = None, rng: Any = None, checks: list | None = None,
                     observers: dict | None = None) -> tuple:
    """Evaluate ``gm`` on JAX values (traceable under ``jax.jit``); ``checks`` (a list) collects
    the error checks of effectful ops (see :class:`LoweringContext`) for the caller to run;
    ``observers`` (node → function) see chosen nodes' argument values (:class:`LoweringContext`)."""
    ctx = LoweringContext(target=target, options=dict(options or {}), rng=rng,
                          checks=checks if checks is not None else [], observers=observers or {})
    return run_nodes(gm, inputs, ctx)


def run_nodes(gm: torch.fx.GraphModule, inputs: tuple, ctx: LoweringContext) -> tuple:
    """Evaluate ``gm``'s nodes with ``ctx`` (also a control-flow body: :mod:`converter.lowering.control_flow`)."""
    env: dict[str, Any] = {}
    it = iter(inputs)
    for node in gm.graph.nodes:
        if node.op == "placeholder":
            env[node.name] = next(it)
            ctx.bind(node.meta.get("val"), env[node.name])
        elif node.op == "call_function":
            env[node.name] = _call(node, env, ctx)
        elif node.op == "get_attr":
            env[node.name] = attribute(gm, node.target)
        elif node.op == "output":
            out = _materialize(node.args[0], env)
            return tuple(out) if isinstance(out, (list, tuple)) else (out,)
    raise ConversionError("graph has no output node")
