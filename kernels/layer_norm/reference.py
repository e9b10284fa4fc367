"""Plain-jnp layer norm over the last dimension (torch.nn.functional.layer_norm)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def layer_norm_reference(x: jax.Array, weight: jax.Array | None = None,
                         bias: jax.Array | None = None, *, eps: float = 1e-5) -> jax.Array:
    """``(x - mean) / sqrt(var + eps) * weight + bias`` over the last dim, in fp32.

    The variance is the biased one (divide by N), as in torch.

    Args:
        x: [..., N] input.
        weight: optional [N] scale.
        bias: optional [N] shift.
        eps: added to the variance.

    Returns:
        Array of ``x``'s shape and dtype.
    """
    xf = x.astype(jnp.float32)
    mean = jnp.mean(xf, axis=-1, keepdims=True)
    centered = xf - mean
    var = jnp.mean(centered * centered, axis=-1, keepdims=True)
    y = centered * jax.lax.rsqrt(var + eps)
    if weight is not None:
        y = y * weight.astype(jnp.float32)
    if bias is not None:
        y = y + bias.astype(jnp.float32)
    return y.astype(x.dtype)
