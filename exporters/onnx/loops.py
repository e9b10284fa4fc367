"""A jaxpr ``while`` or long ``scan`` as one ONNX ``Loop``.

``Loop``'s body graph takes the iteration number, the condition and the loop-carried values, and returns
the next condition, the next values and, per iteration, its scan outputs, which the op stacks along a new
first axis. The body reads every other value (the weights, a scan's ``xs``) from the enclosing graph by
name, as ONNX allows, so only the carry is carried:

* ``while``: the condition is the jaxpr's ``cond`` on the initial carry, computed before the loop, and
  again in the body on the next carry;
* ``scan``: ``M`` is the length; step ``i`` reads ``Gather(xs, i)`` (``length - 1 - i`` in reverse, whose
  stacked outputs are then flipped) and its ``ys`` are the scan outputs. Dynamic dims of ``xs`` and of the
  carry stay dynamic.

Names are unique across the model (one counter), so a body's values never shadow the enclosing graph's;
dim tensors and constant casts the body computes are forgotten when it ends (they exist only inside it).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import numpy as np
from onnx import helper

from exporters.loops import while_parts
from exporters.onnx.graph import OnnxGraph, Val, is_static, value_info


def translate_while(tr: Any, eqn: Any, ins: list) -> list[Val]:
    """The ``while`` ``eqn`` on values ``ins`` as a ``Loop`` with no trip count."""
    g: OnnxGraph = tr.em
    p = eqn.params
    cond_consts, body_consts, init = while_parts(eqn, ins)
    cond, body = p["cond_jaxpr"], p["body_jaxpr"]
    (go,) = tr.eval_jaxpr(cond.jaxpr, cond.consts, [*cond_consts, *init])
    with _body(g, init) as (inside, nodes):
        new = tr.eval_jaxpr(body.jaxpr, body.consts, [*body_consts, *inside])
        (again,) = tr.eval_jaxpr(cond.jaxpr, cond.consts, [*cond_consts, *new])
        graph = _graph(g, nodes, inside, [again, *new])
    outs = g.op("Loop", ["", g.tensor(go), *[g.tensor(v) for v in init]], n_out=len(init), body=graph)
    return [g.val(name, v.shape, v.dtype) for name, v in zip(_listed(outs), init)]


def translate_scan(tr: Any, eqn: Any, ins: list) -> list[Val]:
    """The ``scan`` ``eqn`` on values ``ins`` as a ``Loop`` of ``length`` iterations with scan outputs."""
    g: OnnxGraph = tr.em
    p = eqn.params
    length, n_consts, n_carry, reverse = p["length"], p["num_consts"], p["num_carry"], p["reverse"]
    consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
    body = p["jaxpr"]
    trips = g.const(np.int64(length)) if is_static(length) else g.op("Reshape", [g.dim_tensor(length), g.i64([])])
    with _body(g, carry) as (inside, nodes):
        step = nodes.iteration
        if reverse:
            step = g.op("Sub", [g.op("Sub", [trips, step]), g.const(np.int64(1))])
        x = [g.val(g.op("Gather", [g.tensor(v), step], axis=0), v.shape[1:], v.dtype) for v in xs]
        outs = tr.eval_jaxpr(body.jaxpr, body.consts, [*consts, *inside, *x])
        true = g.const(np.bool_(True))
        graph = _graph(g, nodes, inside, [None, *outs], cond=true)
    names = _listed(g.op("Loop", [trips, "", *[g.tensor(v) for v in carry]], n_out=len(outs), body=graph))
    avals = body.out_avals[n_carry:]
    ys = []
    for name, aval in zip(names[n_carry:], avals):
        if reverse:  # (stacked in iteration order: last step first)
            name = g.op("Slice", [name, g.i64([-1]), g.i64([np.iinfo(np.int64).min]), g.i64([0]), g.i64([-1])])
        ys.append(g.val(name, (length, *aval.shape), aval.dtype))
    return [g.val(n, v.shape, v.dtype) for n, v in zip(names[:n_carry], carry)] + ys


class _Nodes(list):
    """A body's node list; ``iteration`` names its iteration-number input."""

    iteration: str = ""
    condition: str = ""


@contextlib.contextmanager
def _body(g: OnnxGraph, carried: Sequence[Val]) -> Iterator[tuple[list[Val], _Nodes]]:
    """Emit into a body graph's node list; yields one value per carried one (the body's inputs) and the list."""
    saved_nodes, saved_dims = g.nodes, dict(g._dims)
    saved_casts = {k for k in g._consts if k[0] == "cast"}
    nodes = _Nodes()
    nodes.iteration = g.fresh("iteration")
    nodes.condition = g.fresh("condition")
    g.nodes = nodes
    try:
        yield [g.val(g.fresh("carried"), v.shape, v.dtype) for v in carried], nodes
    finally:
        g.nodes, g._dims = saved_nodes, saved_dims
        for k in [k for k in g._consts if k[0] == "cast" and k not in saved_casts]:
            del g._consts[k]  # (a Cast node inside the body)


def _graph(g: OnnxGraph, nodes: _Nodes, inside: list[Val], outs: list, cond: str | None = None) -> Any:
    """The body ``GraphProto``: inputs (iteration, condition, carried), outputs (condition, ``outs[1:]``);
    ``outs[0]`` is the condition value, or ``None`` with ``cond`` naming it."""
    produced = {o for n in nodes for o in n.output} | {v.name for v in inside}
    names = []
    for v in outs:
        name = cond if v is None else g.tensor(v)
        if name not in produced or name in names:
            name = g.op("Identity", [name])  # (a body output must be the body's own value, each once)
        names.append(name)
    ins = [value_info(nodes.iteration, np.int64, (), edge=False), value_info(nodes.condition, np.bool_, (), edge=False)]
    ins += [value_info(v.name, v.dtype, v.shape, edge=False) for v in inside]
    typed = [np.dtype(np.bool_)] + [v.dtype for v in outs[1:]]
    shapes = [()] + [v.shape for v in outs[1:]]
    outputs = [value_info(n, d, s, edge=False) for n, d, s in zip(names, typed, shapes)]
    return helper.make_graph(list(nodes), g.fresh("loop_body"), ins, outputs)


def _listed(names: Any) -> list:
    return names if isinstance(names, list) else [names]


__all__ = ["translate_scan", "translate_while"]
