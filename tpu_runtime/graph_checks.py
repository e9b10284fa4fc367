"""Index and value checks inside ``torch.compile(backend="tpu")`` graphs: the CPU's error, not XLA's clamped read.

Eager mode checks every call of an op of :data:`tpu_runtime.bounds.CHECKS` as it runs. A compiled graph holds the
same ops (after AOTAutograd's decompositions: ``cross_entropy``'s target is checked as the index of the
``gather`` it decomposes to), so each checked argument's flags — the same small computation eager mode runs:
whether a value is out of range, the first one, its position (:func:`tpu_runtime.bounds.flags`) — are computed
inside the compiled program as extra outputs (:func:`observers`, called by the lowering interpreter with the
node's argument values) and read after the run (:func:`report`):

* a graph of CPU tensors ends on the host (its outputs are copied back): the call raises, as on the CPU;
* a graph of tpu tensors runs asynchronously: the error is raised at the next sync point, as eager mode's (and a
  CUDA device-side assert), with a note naming the op and the user's line.

A python argument the CPU refuses (``uniform_(from > to)``) raises on every call of the graph. A check whose
bound is a symbolic size (a dynamic dimension) is not made.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import numpy as np
import torch

from converter.errors import SourceLocation, source_location
from tpu_runtime import bounds


class Check(NamedTuple):
    """The ``op`` of an index check's entry in ``ctx.checks`` (``(flags, Check, (), {})``): what to raise."""

    error: type
    message: Any  # message(value, position) -> str
    func: Any
    where: SourceLocation


aten = torch.ops.aten

def _take_message(size: int) -> bounds.Message:
    return lambda v, i: f"out of range: tried to access index {v} on a tensor of {size} elements."


#: Ops that AOTAutograd decomposes into a checked op → ``size → (error, message)``: the error their CPU kernel
#: raises instead of that op's (``cross_entropy``'s ``nll_loss_forward`` → ``gather`` of the target: ``IndexError:
#: Target 7 is out of bounds.``), by name (a node's ``original_aten`` may be another object for the same overload).
_WORDED_AS = {
    **{str(op): lambda size: (IndexError, bounds._target_message)
       for op in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)},
    str(aten.take.default): lambda size: (IndexError, _take_message(size)),
}


def observers(gm: torch.fx.GraphModule) -> tuple[dict, list]:
    """The checks of ``gm``'s nodes: ``({node: observe(args, kwargs, ctx)}, [exceptions])``.

    Each observer adds the flags of its node's checked arguments to ``ctx.checks``; the exceptions are the
    python arguments the CPU refuses (raised by every call of the graph)."""
    found: dict = {}
    refusals: list = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or node.target not in bounds.CHECKS:
            continue
        names = [a.name for a in node.target._schema.arguments]
        paths: dict[int, tuple] = {}  # id of an argument's traced value → (argument name, position in its list)

        def traced(v: Any, name: str, i: int | None = None) -> Any:
            val = v.meta.get("val") if isinstance(v, torch.fx.Node) else v
            if isinstance(val, torch.Tensor):
                paths[id(val)] = (name, i)
            return val

        named = {}
        for name, v in [*zip(names, node.args), *node.kwargs.items()]:
            named[name] = ([traced(e, name, i) for i, e in enumerate(v)] if isinstance(v, (list, tuple))
                           else traced(v, name))
        try:
            checks = bounds.CHECKS[node.target](named)
        except (IndexError, RuntimeError, TypeError, KeyError, AttributeError):  # the op reports a bad call itself
            continue
        specs = []
        for c in checks:
            if isinstance(c, BaseException):
                refusals.append(c)
                continue
            idx, low, size, error, message = c[:5]
            ignore, part, values = (c + (None, None, False))[5:8]
            path = paths.get(id(idx))
            if (path is None or (idx.is_floating_point() and not values)
                    or not all(b is None or type(b) in (int, float) for b in (low, size))):
                continue
            worded = _WORDED_AS.get(str(node.meta.get("original_aten")))
            if worded is not None:
                error, message = worded(size)
            specs.append((path, low, size, ignore, part, Check(error, message, node.target, source_location(node))))
        if specs:
            found[node] = functools.partial(_observe, names, tuple(specs))
    return found, refusals


def _observe(names: list, specs: tuple, args: tuple, kwargs: dict, ctx: Any) -> None:
    """Add the flags of one node's checked arguments (their JAX values: ``args``, ``kwargs``) to ``ctx.checks``."""
    named = dict(zip(names, args), **kwargs)
    for (name, i), low, size, ignore, part, check in specs:
        v = named[name] if i is None else named[name][i]
        if v is None or not hasattr(v, "shape") or not np.prod(v.shape):
            continue
        ctx.checks.append((bounds.flags(v, low, size, ignore, part), check, (), {}))


def report(flags: Any, check: Check, at_once: bool) -> None:
    """After a run: raise ``check``'s error if ``flags`` found a value out of range (``at_once``: now, the graph
    is done; else at the next sync point, see :func:`tpu_runtime.bounds.queue`).

    Raises:
        IndexError, RuntimeError: the CPU's error for the first value out of range.
    """
    if not at_once:
        bounds.queue(flags, check.error, check.message, check.func, check.where)
        return
    bad, first, at = np.asarray(flags).tolist()
    if bad:
        e = check.error(check.message(first, at))
        e.add_note(f"(an index of {check.func} at {check.where}, in a graph compiled by torch.compile(backend='tpu'))")
        raise e


__all__ = ["Check", "observers", "report"]
