"""torch's control-flow operators: ``torch.cond`` → ``lax.cond``, ``while_loop`` → ``lax.while_loop``,
``scan`` and ``map`` → ``lax.scan``.

torch.export and AOTAutograd keep each branch / loop function as a sub-``GraphModule``
(a ``get_attr`` node of the graph); it is lowered with the same table, op by op, inside
the JAX control-flow primitive, so every target that takes a jaxpr (tpu, StableHLO) keeps
the control flow in the program instead of unrolling or specializing it. The results are
cast to the dtypes torch recorded, so both branches (and every loop iteration) agree.

Error checks of effectful ops (``torch.linalg``'s ``info``) inside a branch or loop body
cannot be read back from the program and are refused.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from converter.errors import LoweringError, source_location
from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.flex_attention import flex_attention_op, lower_flex_attention

cond_op = torch.ops.higher_order.cond
while_loop_op = torch.ops.higher_order.while_loop
scan_op = torch.ops.higher_order.scan
map_op = torch.ops.higher_order.map_impl


def subgraphs(node: torch.fx.Node) -> list[torch.fx.GraphModule]:
    """The sub-``GraphModule``\\ s a control-flow node calls (its ``get_attr`` arguments)."""
    owner = node.graph.owning_module
    return [getattr(owner, a.target) for a in node.args
            if isinstance(a, torch.fx.Node) and a.op == "get_attr"
            and isinstance(getattr(owner, a.target, None), torch.fx.GraphModule)]


def _runner(gm: torch.fx.GraphModule, ctx: Any, node: torch.fx.Node, metas: Any = None) -> Callable:
    """``gm`` as a function of a tuple of JAX values (outputs cast to ``metas``' dtypes when given)."""
    from converter.lowering.fx_runner import run_nodes
    from converter.lowering.interpreter import conform

    def run(values: tuple) -> tuple:
        sub = ctx.fork(checks=[])
        out = run_nodes(gm, tuple(values), sub)
        if sub.checks:
            raise LoweringError(node.target, source_location(node),
                                "an op with a data-dependent error check (torch.linalg's) inside a control-flow "
                                "body: the check cannot be read back from the program")
        return out if metas is None else tuple(conform(o, m, node) for o, m in zip(out, metas))

    return run


def _predicate(p: Any) -> Any:
    return jnp.asarray(p).reshape(()).astype(jnp.bool_)


def lower_cond(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> tuple:
    """cond(Tensor pred, GraphModule true_fn, GraphModule false_fn, Tensor[] operands) -> Tensor[]

    ``lax.cond`` on the predicate; each branch is its sub-graph lowered with the table.
    """
    pred, true_fn, false_fn, operands = args
    metas = node.meta.get("val")
    run_true, run_false = _runner(true_fn, ctx, node, metas), _runner(false_fn, ctx, node, metas)
    if isinstance(pred, bool):  # a predicate torch.export specialized
        return (run_true if pred else run_false)(tuple(operands))
    return jax.lax.cond(_predicate(pred), run_true, run_false, tuple(operands))


def lower_while_loop(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> tuple:
    """while_loop(GraphModule cond_fn, GraphModule body_fn, Tensor[] carried_inputs, Tensor[] additional_inputs) -> Tensor[]

    ``lax.while_loop`` over the carried values (cast to the dtypes torch recorded for the
    loop's results, which the body keeps); the additional inputs are closed over.
    """  # noqa: E501 (the first line is the schema)
    cond_fn, body_fn, carried, additional = args
    metas = node.meta.get("val")
    extra = tuple(additional)
    test = _runner(cond_fn, ctx, node)
    body = _runner(body_fn, ctx, node, metas)
    init = tuple(jnp.asarray(c).astype(to_jax_dtype(m.dtype)) for c, m in zip(carried, metas))
    return jax.lax.while_loop(lambda c: _predicate(test(tuple(c) + extra)[0]),
                              lambda c: body(tuple(c) + extra), init)


def lower_scan(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> tuple:
    """scan(GraphModule combine_fn, Tensor[] init, Tensor[] xs, Tensor[] additional_inputs) -> Tensor[]

    ``lax.scan`` over the leading dim of ``xs`` (``torch._higher_order_ops.scan`` moved its ``dim`` there and
    flips the sequence for ``reverse`` around the op): ``combine_fn(*carry, *x, *additional)`` gives the next
    carry (in the initial carry's dtypes) and the step's outputs, stacked. The additional inputs are closed over.
    """  # noqa: E501 (the first line is the schema)
    combine_fn, init, xs, additional = args
    metas = node.meta.get("val")
    n, extra = len(init), tuple(additional)
    run = _runner(combine_fn, ctx, node)
    carry = tuple(jnp.asarray(c).astype(to_jax_dtype(m.dtype)) for c, m in zip(init, metas[:n]))

    def step(carry: tuple, x: tuple) -> tuple:
        out = run(tuple(carry) + tuple(x) + extra)
        ys = tuple(jnp.asarray(y).astype(to_jax_dtype(m.dtype)) for y, m in zip(out[n:], metas[n:]))
        return tuple(jnp.asarray(o).astype(c.dtype) for o, c in zip(out[:n], carry)), ys

    carry, ys = jax.lax.scan(step, carry, tuple(jnp.asarray(x) for x in xs))
    return (*carry, *ys)


def lower_map(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> tuple:
    """map_impl(GraphModule f, Tensor[] xs, Tensor[] pos_args) -> Tensor[]

    ``torch._higher_order_ops.map``: ``f(*x, *pos_args)`` on each slice of ``xs`` along its leading dim, the results
    stacked: a ``lax.scan`` with no carry. The positional arguments are closed over.
    """
    f, xs, pos_args = args
    metas = node.meta.get("val")
    run, extra = _runner(f, ctx, node), tuple(pos_args)

    def step(carry: tuple, x: tuple) -> tuple:
        return carry, tuple(jnp.asarray(y).astype(to_jax_dtype(m.dtype)) for y, m in zip(run(tuple(x) + extra), metas))

    return tuple(jax.lax.scan(step, (), tuple(jnp.asarray(x) for x in xs))[1])


#: Control-flow operators → their lowering ``(node, args, kwargs, ctx) -> outputs``.
HOPS: dict[Any, Callable] = {cond_op: lower_cond, while_loop_op: lower_while_loop, scan_op: lower_scan,
                             map_op: lower_map, flex_attention_op: lower_flex_attention}

#: Why other higher-order operators are refused (by name; the default reason covers the rest).
REFUSED = {
    "while_loop_stack_output": "a while_loop whose gradient is needed saves every iteration, a data-dependent "
                               "count an XLA program cannot hold: run the loop under torch.no_grad, or give it a "
                               "static trip count (a python for loop)",
}
