"""Online-softmax block math shared by the attention kernels (runs inside kernel bodies).

Row statistics are [rows, 1] columns (2-D keeps both Mosaic and Triton happy).
"""

from __future__ import annotations

import jax.numpy as jnp

from kernels._common import matmul

NEG_INF = float("-inf")


def online_softmax_init(rows: int, d: int):
    """The empty (running max, denominator, accumulator) for ``rows`` query rows."""
    return (jnp.full((rows, 1), NEG_INF, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
            jnp.zeros((rows, d), jnp.float32))


def online_softmax_update(carry, s, v):
    """Folds one fp32 logits block ``s`` [rows, bk] (and values ``v`` [bk, D]) into the carry."""
    m_prev, l_prev, acc_prev = carry
    m_new = jnp.maximum(m_prev, s.max(axis=1, keepdims=True))
    # A row with nothing kept so far has max -inf; shifting by 0 keeps exp() at 0, not NaN.
    m_safe = jnp.where(m_new == NEG_INF, 0.0, m_new)
    p = jnp.exp(s - m_safe)
    alpha = jnp.exp(m_prev - m_safe)
    l_new = alpha * l_prev + p.sum(axis=1, keepdims=True)
    acc_new = alpha * acc_prev + matmul(p.astype(v.dtype), v)
    return m_new, l_new, acc_new


def online_softmax_finalize(m, l, acc):
    """Output rows and their log-sum-exp; rows with nothing kept give 0 and lse = +inf.

    +inf (not -inf) makes the backward's ``exp(s - lse)`` exactly 0 on such rows.
    """
    empty = l == 0.0
    out = acc / jnp.where(empty, 1.0, l)
    lse = jnp.where(empty, jnp.inf, m + jnp.log(jnp.where(empty, 1.0, l)))
    return out, lse
