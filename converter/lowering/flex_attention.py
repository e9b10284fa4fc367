"""``torch.nn.attention.flex_attention`` → attention whose scores pass through the user's ``score_mod`` and ``mask_mod``.

torch.export keeps the call as the ``flex_attention`` higher-order op with ``score_mod`` and the block mask's
``mask_mod`` as sub-``GraphModule``\\ s of scalar code (one score, and the batch, head, query and key indices). They
are lowered with the same table, vectorized with ``jax.vmap`` over every score, as torch's own math implementation
vectorizes them with ``torch.vmap``: the scores are ``q @ kᵀ · scale`` in float32 (float64 for float64 inputs),
``score_mod`` where ``mask_mod`` holds and ``-inf`` elsewhere, a softmax that gives zeros for a fully masked row,
and the values' weighted sum; grouped-query heads are repeated, a batch of one key/value broadcast. The block mask's
sparsity (which blocks to skip) is a kernel's speed-up, not a change of values: every score is masked by ``mask_mod``
itself. The log-sum-exp and row maxima outputs are in base 2, as torch's op returns them.
"""

from __future__ import annotations

import math
from typing import Any

import jax
import jax.numpy as jnp
import torch

from converter.lowering.dtypes import to_jax_dtype

flex_attention_op = torch.ops.higher_order.flex_attention


def lower_flex_attention(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> tuple:
    """flex_attention(Tensor query, Tensor key, Tensor value, GraphModule score_mod, Any[] block_mask, float scale,
    Dict kernel_options, Tensor[] score_mod_other_buffers, Tensor[] mask_mod_other_buffers) -> (Tensor, Tensor, Tensor)

    See the module docstring; returns the output, the log-sum-exp and the row maxima (base 2).
    """  # noqa: E501 (the first line is the schema)
    from converter.lowering.control_flow import _runner

    q, k, v, score_mod, block_mask, scale = args[:6]
    score_buffers = tuple(args[7]) if len(args) > 7 else ()
    mask_buffers = tuple(args[8]) if len(args) > 8 else ()
    metas = node.meta.get("val")
    work = jnp.float64 if q.dtype == jnp.float64 else jnp.float32
    groups = q.shape[1] // k.shape[1]
    k, v = (jnp.repeat(t, groups, axis=1) if groups > 1 else t for t in (k, v))
    k, v = (jnp.broadcast_to(t, (q.shape[0], *t.shape[1:])) for t in (k, v))
    scores = jnp.matmul(q.astype(work), jnp.swapaxes(k.astype(work), -1, -2)) * scale
    index = to_jax_dtype(torch.int64)
    grids = jnp.meshgrid(*(jnp.arange(n, dtype=index) for n in scores.shape), indexing="ij")
    flat = [g.reshape(-1) for g in grids]
    score_fn, mask_fn = _runner(score_mod, ctx, node), _runner(block_mask[-1], ctx, node)
    modded = jax.vmap(lambda s, b, h, m, n: score_fn((s, b, h, m, n, *score_buffers))[0])(scores.reshape(-1), *flat)
    keep = jax.vmap(lambda b, h, m, n: mask_fn((b, h, m, n, *mask_buffers))[0])(*flat)
    post = jnp.where(keep.reshape(scores.shape), modded.reshape(scores.shape).astype(work), -jnp.inf)
    masked_row = jnp.all(post == -jnp.inf, axis=-1)
    lse = jnp.where(masked_row, -jnp.inf, jax.nn.logsumexp(jnp.where(masked_row[..., None], 0.0, post), axis=-1))
    peak = jnp.max(post, axis=-1)
    probs = jnp.where(masked_row[..., None], 0.0, jnp.exp(post - jnp.where(masked_row, 0.0, lse)[..., None]))
    out = jnp.matmul(probs.astype(q.dtype), v.astype(q.dtype))
    results = (out, lse / math.log(2), peak / math.log(2))
    return tuple(r.astype(to_jax_dtype(m.dtype)) for r, m in zip(results, metas))
