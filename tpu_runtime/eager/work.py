"""How much work an op does: an estimate of its multiply-adds, read from its jaxpr.

Fused eager sums it over the ops it records (:attr:`~tpu_runtime.eager.fused.FusedGraph.flops`) to decide whether
a forward pass is worth running as a graph of its own when ``loss.backward()`` begins
(:data:`~tpu_runtime.eager.fused.SPLIT_FLOPS`). The estimate only has to tell a step whose forward takes the
device a while from one whose forward is over in microseconds: a ``dot_general`` counts one multiply-add per
output element and contracted element, a convolution one per output element and kernel element it reads, every
other primitive one per output element; a ``scan`` counts its body ``length`` times, a ``cond`` its largest
branch, a ``while`` its body once (its trip count is a value).
"""

from __future__ import annotations

import math
from typing import Any

from jax.extend.core import ClosedJaxpr, Jaxpr


def work_of(jaxpr: Any) -> int:
    """Estimated multiply-adds of one run of ``jaxpr`` (a ``Jaxpr`` or ``ClosedJaxpr``: see the module docstring)."""
    if isinstance(jaxpr, ClosedJaxpr):
        jaxpr = jaxpr.jaxpr
    total = 0
    for eqn in jaxpr.eqns:
        inner = [work_of(sub) for sub in _subjaxprs(eqn.params)]
        if inner:
            total += max(inner) * (eqn.params.get("length", 1) if eqn.primitive.name == "scan" else 1)
            continue
        out = sum(_size(v) for v in eqn.outvars)
        name = eqn.primitive.name
        if name == "dot_general":
            (contracting, _), _ = eqn.params["dimension_numbers"]
            lhs = eqn.invars[0].aval.shape
            total += out * math.prod(lhs[i] for i in contracting)
        elif name == "conv_general_dilated":
            kernel = eqn.invars[1].aval.shape
            total += out * math.prod(kernel) // max(kernel[eqn.params["dimension_numbers"].rhs_spec[0]], 1)
        else:
            total += out
    return total


def _size(var: Any) -> int:
    return math.prod(getattr(var.aval, "shape", ()))


def _subjaxprs(params: dict) -> list:
    """The jaxprs an equation runs (a call's body, a loop's body and condition, a ``cond``'s branches)."""
    found = []
    for v in params.values():
        for x in (v if isinstance(v, (tuple, list)) else (v,)):
            if isinstance(x, (ClosedJaxpr, Jaxpr)):
                found.append(x)
    return found


__all__ = ["work_of"]
