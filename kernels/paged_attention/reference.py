"""Plain-jnp decode attention over a paged KV cache."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax


def check_paged_args(q, k_pages, v_pages, block_tables, lengths) -> int:
    """Validates paged-attention shapes and returns the GQA group size H // Hkv.

    Raises:
        ValueError: shapes do not line up.
        TypeError: non-integer block tables or lengths.
    """
    if q.ndim != 3 or k_pages.ndim != 4 or k_pages.shape != v_pages.shape:
        raise ValueError(f"expected q [B, H, D] and k/v pages [Hkv, P, S, D] of one shape; got "
                         f"{q.shape}, {k_pages.shape}, {v_pages.shape}")
    b, h, d = q.shape
    hkv = k_pages.shape[0]
    if k_pages.shape[3] != d or hkv == 0 or h % hkv:
        raise ValueError(f"q {q.shape} and pages {k_pages.shape}: head dims differ or "
                         f"{h} heads are not a multiple of {hkv} kv heads")
    if block_tables.ndim != 2 or block_tables.shape[0] != b or lengths.shape != (b,):
        raise ValueError(f"block_tables {block_tables.shape} must be [B, pages] and lengths "
                         f"{lengths.shape} [B] with B = {b}")
    if not (jnp.issubdtype(block_tables.dtype, jnp.integer)
            and jnp.issubdtype(lengths.dtype, jnp.integer)):
        raise TypeError("block_tables and lengths must be integer arrays")
    return h // hkv


def paged_attention_reference(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array,
                              block_tables: jax.Array, lengths: jax.Array, *,
                              scale: float | None = None) -> jax.Array:
    """One decode step of attention over a paged KV cache, gathered whole in fp32.

    Token ``t`` of sequence ``b`` lives in page ``block_tables[b, t // S]`` at
    row ``t % S``; tokens ``t >= lengths[b]`` are ignored. Query head ``i``
    reads kv head ``i // (H // Hkv)``. A sequence of length 0 outputs zeros.

    Args:
        q: [B, H, D] queries (one token per sequence).
        k_pages: [Hkv, num_pages, S, D] key cache.
        v_pages: [Hkv, num_pages, S, D] value cache.
        block_tables: [B, max_pages_per_seq] int32 page ids.
        lengths: [B] int32 tokens per sequence, <= max_pages_per_seq * S.
        scale: logit scale; ``1 / sqrt(D)`` when None.

    Returns:
        [B, H, D] in ``q.dtype``.

    Raises:
        ValueError, TypeError: see :func:`check_paged_args`.
    """
    groups = check_paged_args(q, k_pages, v_pages, block_tables, lengths)
    b, h, d = q.shape
    hkv, _, page, _ = k_pages.shape
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    tokens = block_tables.shape[1] * page

    def gather(pages):  # [Hkv, P, S, D] -> [B, Hkv, T, D]
        seq = pages[:, block_tables].astype(jnp.float32)  # [Hkv, B, maxp, S, D]
        return seq.reshape(hkv, b, tokens, d).transpose(1, 0, 2, 3)

    qg = q.astype(jnp.float32).reshape(b, hkv, groups, d)
    s = jnp.einsum("bhgd,bhtd->bhgt", qg, gather(k_pages), precision=lax.Precision.HIGHEST)
    valid = jnp.arange(tokens)[None, :] < lengths[:, None]
    s = jnp.where(valid[:, None, None, :], s * scale, -jnp.inf)
    m = s.max(axis=-1, keepdims=True, initial=-jnp.inf)  # no cache tokens: -inf too
    e = jnp.exp(s - jnp.where(jnp.isneginf(m), 0.0, m))
    denom = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(denom == 0.0, 1.0, denom)
    out = jnp.einsum("bhgt,bhtd->bhgd", p, gather(v_pages), precision=lax.Precision.HIGHEST)
    return out.reshape(b, h, d).astype(q.dtype)
