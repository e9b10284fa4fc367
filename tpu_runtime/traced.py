"""Decompositions traced once per call signature into a single plan.

An op without a lowering (``threshold_backward``, ``_softmax_backward_data``,
``nll_loss_forward``…) has a PyTorch decomposition into ops that have one. Run
as Python on every call, a decomposition costs one dispatch per piece (and
torch._refs ones a lot of Python besides). Instead, the first call of each
signature traces the decomposition with ``make_fx`` on fake CPU tensors into a
core-ATen graph, and the graph becomes one :class:`~tpu_runtime.plans.OpPlan`
run by the lowering table (:func:`converter.lowering.fx_runner.run_graph_module`):
one executable in strict mode, one node in fused mode.

Not traced (the decomposition then runs eagerly, piece by piece): ops that
return views (aliasing must be kept), ops that mutate, graphs with random ops
(they need the device RNG input) and graphs with an op the table lacks.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch

from converter.lowering import registry
from converter.lowering.fx_runner import run_graph_module
from converter.lowering.interpreter import conform
from tpu_runtime.plans import OpPlan, _collect, _fill, _structure, _tensor_leaves, out_meta

_DECOMPS: dict | None = None
_CPU = torch.device("cpu")


def _decompositions() -> dict:
    """Core ATen decompositions, minus the ops the table keeps whole (as the dynamo backend)."""
    global _DECOMPS
    if _DECOMPS is None:
        from converter.capture import PRESERVED_OPS

        table = registry.registered()
        _DECOMPS = {op: fn for op, fn in torch._decomp.core_aten_decompositions().items()
                    if op not in PRESERVED_OPS and op not in table}
    return _DECOMPS


def traceable(func: Any) -> bool:
    """Whether ``func``'s decomposition may be traced into one plan (no views, no mutation)."""
    schema = func._schema
    if schema.is_mutable or any(r.alias_info is not None for r in schema.returns):
        return False
    return not getattr(func, "is_view", False)


def _on_cpu(tmpl: Any) -> Any:
    if isinstance(tmpl, torch.device):
        return _CPU
    if isinstance(tmpl, (list, tuple)):
        return type(tmpl)(_on_cpu(x) for x in tmpl)
    if isinstance(tmpl, dict):
        return {k: _on_cpu(v) for k, v in tmpl.items()}
    return tmpl


def traced_plan(func: Any, key: tuple, args: tuple, kwargs: dict, decomp: Callable) -> OpPlan | None:
    """Trace ``decomp`` for this call signature; ``None`` when it cannot become one plan."""
    from torch.fx.experimental.proxy_tensor import make_fx

    if not traceable(func):
        return None
    try:
        meta, targs, tkwargs = out_meta(func, args, kwargs, dyn=False)
    except Exception:  # no meta kernel: the eager decomposition will say what is wrong
        return None
    ins: list = []
    _collect(args, ins, False)
    _collect(tuple(kwargs.values()), ins, False)
    examples = [torch.empty(tuple(x.shape), dtype=x.dtype) for x in ins]
    cargs, ckwargs = _on_cpu(targs), _on_cpu(tkwargs)

    def f(*xs: Any) -> Any:
        values = list(xs)
        out = decomp(*_fill(cargs, values), **_fill(ckwargs, values))
        # a named result (``nll_loss_forward``'s return type) would be traced as a call of its class
        return tuple(out) if isinstance(out, tuple) else out

    try:
        gm = make_fx(f, decomposition_table=_decompositions(), tracing_mode="fake")(*examples)
    except Exception:  # data-dependent python, unsupported fake op…: run it eagerly instead
        return None
    table = registry.registered()
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target is operator.getitem:
            continue
        op = node.target
        if not isinstance(op, torch._ops.OpOverload) or op not in table or op._schema.is_mutable \
                or torch.Tag.nondeterministic_seeded in op.tags:
            return None
    specs: list = []
    structure = _structure(meta, specs)
    if _traced_specs(gm) != specs:  # the decomposition took a CPU-only branch (e.g. empty saved statistics)
        return None

    def fn(*values: Any) -> tuple:
        out = run_graph_module(gm, values)
        res = out[0] if not isinstance(meta, (list, tuple)) else out
        return tuple(_tensor_leaves(conform(res, meta), meta))

    return OpPlan(key, f"{func} (decomposed)", fn, tuple(specs), structure, op=func,
                  extra={"targs": targs, "tkwargs": tkwargs})


def _traced_specs(gm: torch.fx.GraphModule) -> list:
    """``(shape, dtype)`` of each tensor output of a traced graph, in order."""
    out = next(n for n in gm.graph.nodes if n.op == "output").args[0]
    vals = [n.meta.get("val") if isinstance(n, torch.fx.Node) else n for n in torch.utils._pytree.tree_leaves(out)]
    return [(tuple(v.shape), v.dtype) for v in vals if isinstance(v, torch.Tensor)]
