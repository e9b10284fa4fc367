"""Plain-jnp scaled dot-product attention with torch SDPA semantics."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
from jax import lax


def check_attention_shapes(q, k, v) -> int:
    """Validates [B, H, L, D] q/k/v shapes and returns the GQA group size Hq // Hkv.

    Raises:
        ValueError: ranks, batch, head dims or head counts do not line up.
    """
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(f"q, k, v must be [B, H, L, D]; got {q.shape}, {k.shape}, {v.shape}")
    if k.shape != v.shape:
        raise ValueError(f"k and v shapes differ: {k.shape} vs {v.shape}")
    (b, hq, _, d), (bk, hkv, _, dk) = q.shape, k.shape
    if b != bk or d != dk:
        raise ValueError(f"q {q.shape} and k {k.shape} disagree on batch or head dim")
    if hkv == 0 or hq % hkv:
        raise ValueError(f"query heads {hq} must be a multiple of key/value heads {hkv}")
    return hq // hkv


def as_4d_mask(mask, shape: tuple[int, int, int, int]) -> jax.Array:
    """Left-pads a mask's rank to 4 and checks it broadcasts to ``shape``.

    Raises:
        ValueError: rank > 4 or a dimension that is neither 1 nor the target.
        TypeError: a mask that is neither boolean nor floating point.
    """
    mask = jnp.asarray(mask)
    if mask.dtype != jnp.bool_ and not jnp.issubdtype(mask.dtype, jnp.floating):
        raise TypeError(f"mask must be boolean or floating point, got {mask.dtype}")
    if mask.ndim > 4:
        raise ValueError(f"mask of shape {mask.shape} has rank > 4")
    mask = mask.reshape((1,) * (4 - mask.ndim) + mask.shape)
    if any(m not in (1, t) for m, t in zip(mask.shape, shape)):
        raise ValueError(f"mask of shape {mask.shape} does not broadcast to [B, Hq, Lq, Lk] = "
                         f"{list(shape)}")
    return mask


def flash_attention_reference(q: jax.Array, k: jax.Array, v: jax.Array, *, mask=None,
                              causal: bool = False, scale: float | None = None,
                              dropout_p: float = 0.0, dropout_rng=None) -> jax.Array:
    """Scaled dot-product attention, computed whole in fp32 (the XLA baseline).

    Semantics follow ``torch.nn.functional.scaled_dot_product_attention``
    (with ``enable_gqa=True``): query head ``i`` reads key/value head
    ``i // (Hq // Hkv)``; a boolean mask keeps ``True``; a float mask is added
    to the scaled logits; ``causal`` keeps ``tril(ones(Lq, Lk))`` (top-left
    aligned). A row whose logits are all masked outputs zeros, as torch's
    ``_safe_softmax`` does.

    Args:
        q: [B, Hq, Lq, D] queries.
        k: [B, Hkv, Lk, D] keys; ``Hq % Hkv == 0``.
        v: [B, Hkv, Lk, D] values.
        mask: optional boolean or additive float mask broadcastable to
            [B, Hq, Lq, Lk].
        causal: apply the top-left aligned causal mask.
        scale: logit scale; ``1 / sqrt(D)`` when None.
        dropout_p: probability of dropping an attention weight (training).
        dropout_rng: PRNG key, required when ``dropout_p > 0``.

    Returns:
        [B, Hq, Lq, D] attention output in ``q.dtype``.

    Raises:
        ValueError: inconsistent shapes, or ``dropout_p > 0`` without a key.
    """
    groups = check_attention_shapes(q, k, v)
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    kf = jnp.repeat(k.astype(jnp.float32), groups, axis=1)
    vf = jnp.repeat(v.astype(jnp.float32), groups, axis=1)
    s = jnp.einsum("bhqd,bhkd->bhqk", q.astype(jnp.float32), kf,
                   precision=lax.Precision.HIGHEST) * scale
    if mask is not None:
        mask = as_4d_mask(mask, (b, hq, lq, lk))
        s = jnp.where(mask, s, -jnp.inf) if mask.dtype == jnp.bool_ else s + mask
    if causal:
        s = jnp.where(jnp.tril(jnp.ones((lq, lk), jnp.bool_)), s, -jnp.inf)
    # Softmax is shift invariant, so the row max carries no gradient; fully
    # masked rows (max = -inf) shift by 0 and give 0 / 0 -> 0, not NaN.
    m = lax.stop_gradient(s.max(axis=-1, keepdims=True, initial=-jnp.inf))  # no keys: -inf too
    e = jnp.exp(s - jnp.where(jnp.isneginf(m), 0.0, m))
    denom = e.sum(axis=-1, keepdims=True)
    p = e / jnp.where(denom == 0.0, 1.0, denom)
    if dropout_p > 0.0:
        if dropout_rng is None:
            raise ValueError("dropout_p > 0 needs dropout_rng")
        keep = jax.random.bernoulli(dropout_rng, 1.0 - dropout_p, p.shape)
        p = jnp.where(keep, p / (1.0 - dropout_p), 0.0)
    out = jnp.einsum("bhqk,bhkd->bhqd", p, vf, precision=lax.Precision.HIGHEST)
    return out.astype(q.dtype)
