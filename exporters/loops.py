"""Loops in exported files: what the LiteRT and ONNX exporters share.

A jaxpr ``while`` becomes the format's loop (LiteRT ``WHILE`` with a condition and a body
subgraph, ONNX ``Loop`` with a body graph), each target's :meth:`while_loop`. A ``scan`` too long to
unroll (:data:`exporters.jaxpr_walk.MAX_UNROLLED_SCAN` steps) is first rewritten here as a ``while`` over
``(step, carry, ys)``: step ``i`` reads ``xs[i]`` (``xs[length - 1 - i]`` in reverse) with a
``dynamic_slice`` and writes its ``y`` into a preallocated ``ys`` with a ``dynamic_update_slice``, the
operators both formats have. A recurrent layer over a long sequence (``nn.LSTM`` over 500 frames), a CTC
loss or a ``torch._higher_order_ops.while_loop`` then exports as one loop, not as one copy of its body per
step.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from jax import lax
from jax._src import core as jcore


def scan_as_while(eqn: Any) -> jcore.ClosedJaxpr:
    """The ``scan`` ``eqn`` as a jaxpr over the same inputs and outputs whose only loop is a ``while``."""
    p = eqn.params
    length, n_consts, n_carry, reverse = p["length"], p["num_consts"], p["num_carry"], p["reverse"]
    body = p["jaxpr"]
    y_avals = body.out_avals[n_carry:]

    def run(*args: Any) -> list:
        consts, carry, xs = args[:n_consts], args[n_consts:n_consts + n_carry], args[n_consts + n_carry:]

        def step(state: tuple) -> tuple:
            i, carry, ys = state
            at = length - 1 - i if reverse else i
            x = [lax.squeeze(lax.dynamic_slice_in_dim(x, at, 1, 0, allow_negative_indices=False), (0,)) for x in xs]
            outs = jcore.eval_jaxpr(body.jaxpr, body.consts, *consts, *carry, *x)
            ys = [lax.dynamic_update_slice(b, lax.expand_dims(y, (0,)), (at, *[jnp.int32(0)] * y.ndim),
                                           allow_negative_indices=False)
                  for b, y in zip(ys, outs[n_carry:])]
            return i + 1, list(outs[:n_carry]), ys

        ys = [jnp.zeros((length, *a.shape), a.dtype) for a in y_avals]
        _, carry, ys = lax.while_loop(lambda s: s[0] < length, step, (jnp.int32(0), list(carry), ys))
        return [*carry, *ys]

    avals = [jax.ShapeDtypeStruct(v.aval.shape, v.aval.dtype) for v in eqn.invars]
    with jax.enable_x64(True):  # (64-bit values stay 64-bit)
        return jax.make_jaxpr(run)(*avals)


def while_parts(eqn: Any, ins: list) -> tuple[list, list, list]:
    """A ``while`` eqn's inputs split into ``(condition constants, body constants, initial carry)``."""
    nc, nb = eqn.params["cond_nconsts"], eqn.params["body_nconsts"]
    return ins[:nc], ins[nc:nc + nb], ins[nc + nb:]


__all__ = ["scan_as_while", "while_parts"]
