"""The RNG higher-order ops AOTAutograd emits for activation checkpointing.

When ``torch.compile`` traces a ``torch.utils.checkpoint`` region that draws random
numbers (dropout), AOTAutograd saves the generator state in the forward graph and
replays it where the backward graph recomputes the region:

* ``run_and_save_rng_state(op, *args)`` → ``(state, op(*args))``;
* ``run_with_rng_state(state, op, *args)`` → ``op(*args)`` drawing exactly what it drew
  when ``state`` was saved.

Here the state is the PRNG key the op draws from, as the key's data bytes (``uint8``,
the dtype torch's generator states have): the forward takes a fresh key from the graph's
generator, the backward rebuilds the key from the bytes, and the op's lowering runs
with a context whose keys derive from that key alone (not from the node it sits in), so
both graphs draw the same mask.
"""

from __future__ import annotations

import dataclasses
import operator
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from converter.lowering import registry
from converter.lowering.context import LoweringContext

_HOPS = getattr(torch.ops, "higher_order", None)
RUN_AND_SAVE = getattr(_HOPS, "run_and_save_rng_state", None)
RUN_WITH = getattr(_HOPS, "run_with_rng_state", None)
#: The RNG higher-order ops this module lowers (those this torch has).
RNG_OPS = frozenset(op for op in (RUN_AND_SAVE, RUN_WITH) if op is not None)


def inner_op(node: torch.fx.Node) -> Any:
    """The op an RNG higher-order op node runs (its first or second argument)."""
    return node.args[0] if node.target is RUN_AND_SAVE else node.args[1]


def check(node: torch.fx.Node, target: str, location: Any) -> None:
    """Raise :class:`~converter.errors.UnsupportedOpError` when the wrapped op has no lowering."""
    registry.lookup(inner_op(node), target, location)


def _op_meta(node: torch.fx.Node) -> Any:
    """The wrapped op's output as traced: the node's value, or (run_and_save) that of its
    ``getitem(node, 1)`` user."""
    if node.target is RUN_WITH:
        return node.meta.get("val")
    for user in node.users:
        if user.target is operator.getitem and user.args[1] == 1:
            return user.meta.get("val")
    return None


def _state_bytes(key: Any) -> Any:
    data = jax.random.key_data(key).reshape(-1)
    return jax.lax.bitcast_convert_type(data, jnp.uint8).reshape(-1)


def _key_of(state: Any) -> Any:
    words = jax.lax.bitcast_convert_type(jnp.asarray(state, jnp.uint8).reshape(-1, 4), jnp.uint32)
    return jax.random.wrap_key_data(words)


def call(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: LoweringContext, location: Any,
         conform: Callable) -> Any:
    """Lower one ``run_and_save_rng_state`` / ``run_with_rng_state`` node on JAX values
    (``conform``: the interpreter's cast of a lowering's result to the traced dtypes)."""
    if node.target is RUN_AND_SAVE:
        ctx.node = node
        key = ctx.next_key()
        op, rest = args[0], args[1:]
    else:
        key = _key_of(args[0])
        op, rest = args[1], args[2:]
    row = registry.lookup(op, ctx.target, location)
    # node=None: the op's keys come from ``key`` alone (next_key salts with the node's name)
    inner = dataclasses.replace(ctx, node=None, rng=key, meta=_op_meta(node), _rng_count=0)
    out = conform(registry.apply(row, inner, rest, kwargs), inner.meta, node)
    return (_state_bytes(key), out) if node.target is RUN_AND_SAVE else out


__all__ = ["RNG_OPS", "RUN_AND_SAVE", "RUN_WITH", "call", "check", "inner_op"]
