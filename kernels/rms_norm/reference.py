"""Plain-jnp RMS norm over the last dimension (torch.nn.functional.rms_norm)."""

from __future__ import annotations

import jax
import jax.numpy as jnp


def default_eps(dtype) -> float:
    """torch's ``eps=None``: the machine epsilon of the input dtype."""
    return float(jnp.finfo(dtype).eps)


def rms_norm_reference(x: jax.Array, weight: jax.Array | None = None, *,
                       eps: float | None = None) -> jax.Array:
    """``x / sqrt(mean(x**2, -1) + eps) * weight``, computed in fp32.

    Args:
        x: [..., N] input.
        weight: optional [N] scale.
        eps: added to the mean square; ``finfo(x.dtype).eps`` when None (torch).

    Returns:
        Array of ``x``'s shape and dtype.
    """
    eps = default_eps(x.dtype) if eps is None else eps
    xf = x.astype(jnp.float32)
    y = xf * jax.lax.rsqrt(jnp.mean(xf * xf, axis=-1, keepdims=True) + eps)
    if weight is not None:
        y = y * weight.astype(jnp.float32)
    return y.astype(x.dtype)
