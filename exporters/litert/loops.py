"""A jaxpr ``while`` as TFLite ``WHILE``: a condition subgraph and a body subgraph.

TFLite's ``WHILE`` passes its inputs, the loop variables, to both subgraphs; the condition returns one
bool, the body the next values of every variable, and the op returns their last values. A subgraph sees
nothing but its inputs, so the loop variables are the carry plus every non-constant value the condition or
the body reads (passed through unchanged); constants (the weights of a recurrent layer) are the subgraphs'
own constant tensors, stored once in the file. Dynamic dims inside a subgraph are read off its own inputs.
The subgraphs are :class:`~exporters.litert.ir.Graph` objects named in the op's options
(:func:`called_graphs`); the builder numbers them after the signatures' subgraphs.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

from exporters.jaxpr_values import is_static
from exporters.litert.emitter import Emitter, Val
from exporters.litert.ir import Graph, Tensor
from exporters.loops import while_parts

#: The ``WhileOptions`` fields that name subgraphs.
SUBGRAPH_FIELDS = ("condSubgraphIndex", "bodySubgraphIndex")


def called_graphs(graph: Graph) -> list[Graph]:
    """The subgraphs ``graph``'s loops call, nested ones included, each once, in call order."""
    out: list[Graph] = []
    for op in graph.ops:
        for value in op.options.values():
            if isinstance(value, Graph) and value not in out:
                out.append(value)
                out.extend(g for g in called_graphs(value) if g not in out)
    return out


def translate_while(tr: Any, eqn: Any, ins: list) -> list[Val]:
    """The ``while`` ``eqn`` on values ``ins`` as one ``WHILE`` op; returns the final carry."""
    em: Emitter = tr.em
    p = eqn.params
    cond_consts, body_consts, init = while_parts(eqn, ins)
    invariant = list({id(v): v for v in [*cond_consts, *body_consts] if not v.is_const}.values())
    loop_vars = [*invariant, *init]
    outer = [em.tensor_of(v, None, expand=True) for v in loop_vars]
    cond_graph, body_graph = Graph(em._name("while_cond")), Graph(em._name("while_body"))
    with _subgraph(em, cond_graph, loop_vars) as inside:
        args = _arguments(cond_consts, invariant, inside)
        (go,) = tr.eval_jaxpr(p["cond_jaxpr"].jaxpr, p["cond_jaxpr"].consts, args)
        cond_graph.outputs = [_produced(em, em.tensor_of(go, None, expand=True), go)]
    with _subgraph(em, body_graph, loop_vars) as inside:
        args = _arguments(body_consts, invariant, inside)
        new = tr.eval_jaxpr(p["body_jaxpr"].jaxpr, p["body_jaxpr"].consts, args)
        passed = [v.tensor for v in inside[:len(invariant)]]
        body_graph.outputs = passed + [_produced(em, em.tensor_of(v, None, expand=True), v) for v in new]
    results = [em.tensor(v.shape, v.dtype, "while") for v in loop_vars]
    em.op("WHILE", outer, results, condSubgraphIndex=cond_graph, bodySubgraphIndex=body_graph)
    return [Val(v.shape, v.dtype, tensor=t) for v, t in zip(init, results[len(invariant):])]


def _arguments(consts: list, invariant: list, inside: list) -> list:
    """A subgraph's jaxpr arguments: ``consts`` as the subgraph has them (an invariant's loop variable, a
    constant fresh), then the carry's loop variables."""
    seen = dict(zip(map(id, invariant), inside))
    return [seen[id(v)] if id(v) in seen else _fresh(v) for v in consts] + inside[len(invariant):]


def _fresh(v: Val) -> Val:
    """A constant value like ``v`` with nothing cached (a cached tensor may belong to another subgraph)."""
    return Val(v.shape, v.dtype, const=v.const)


def _produced(em: Emitter, t: Tensor, val: Val) -> Tensor:
    """``t``, or a copy an op makes when ``t`` is a constant or one of the subgraph's inputs (a loop
    variable a body leaves as it is: TFLite's WHILE copies each body output back into its input)."""
    if not t.is_const and t not in em.graph.inputs:
        return t
    return em.emit("RESHAPE", [t, em.shape_operand(val.shape)], val.shape, val.dtype)


@contextlib.contextmanager
def _subgraph(em: Emitter, graph: Graph, loop_vars: Sequence[Val]) -> Iterator[list[Val]]:
    """Emit into ``graph``, whose inputs are one tensor per loop variable; yields their values."""
    saved = em.graph, em._dim_tensors, em.dim_sources
    em.graph, em._dim_tensors, em.dim_sources = graph, {}, {}
    try:
        inside = []
        for v in loop_vars:
            t = em.tensor(v.shape, v.dtype, "loop_var")
            graph.inputs.append(t)
            val = Val(v.shape, v.dtype, tensor=t)
            for axis, d in enumerate(v.shape):
                name = _plain_var(d)
                if name is not None:
                    em.dim_sources.setdefault(name, (val, axis, 1, 0))
            inside.append(val)
        yield inside
    finally:
        em.graph, em._dim_tensors, em.dim_sources = saved


def _plain_var(d: Any) -> str | None:
    """The name of a dim that is one symbolic variable (``b``, not ``2*b``), else ``None``."""
    if is_static(d):
        return None
    terms = list(d._sorted_terms)
    if len(terms) != 1:
        return None
    term, coeff = terms[0]
    if coeff != 1 or term.is_constant or len(term._factors) != 1:
        return None
    factor, power = term._factors[0]
    return factor.var if power == 1 else None


__all__ = ["SUBGRAPH_FIELDS", "called_graphs", "translate_while"]
