"""Plain-jnp int8 weight-only matmul and the per-channel quantizer that feeds it.

Weight layout is [K, N] (in_features, out_features): ``y = x @ dequant(w)``.
A torch ``nn.Linear.weight`` ([N, K]) is transposed once when quantized.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax


def quantize_per_channel(w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """Symmetric int8 quantization with one scale per output channel.

    Args:
        w: [K, N] float weight.

    Returns:
        ``(w_int8, scales)``: [K, N] int8 in [-127, 127] and [N] float32 with
        ``w ≈ w_int8 * scales``. An all-zero column gets scale 1.

    Raises:
        ValueError: ``w`` is not 2-D.
    """
    if w.ndim != 2:
        raise ValueError(f"expected a [K, N] weight, got shape {w.shape}")
    wf = w.astype(jnp.float32)
    amax = jnp.max(jnp.abs(wf), axis=0)
    scales = jnp.where(amax == 0.0, 1.0, amax / 127.0)
    q = jnp.clip(jnp.round(wf / scales), -127, 127).astype(jnp.int8)
    return q, scales


def check_int8_matmul_args(x, w_int8, scales) -> None:
    """Validates shapes and dtypes of an int8 weight-only matmul.

    Raises:
        ValueError: mismatched shapes.
        TypeError: non-int8 weight or non-float activations/scales.
    """
    if w_int8.dtype != jnp.int8:
        raise TypeError(f"w_int8 must be int8, got {w_int8.dtype}")
    if not jnp.issubdtype(x.dtype, jnp.floating) or not jnp.issubdtype(scales.dtype,
                                                                        jnp.floating):
        raise TypeError(f"x and scales must be float, got {x.dtype} and {scales.dtype}")
    if w_int8.ndim != 2 or x.ndim < 1 or x.shape[-1] != w_int8.shape[0]:
        raise ValueError(f"x {x.shape} @ w [K, N] {w_int8.shape}: inner dims differ")
    if scales.shape != (w_int8.shape[1],):
        raise ValueError(f"scales {scales.shape} must be [N] = [{w_int8.shape[1]}]")


def int8_matmul_reference(x: jax.Array, w_int8: jax.Array, scales: jax.Array, *,
                          out_dtype=None) -> jax.Array:
    """``(x @ w_int8) * scales`` with the weight dequantized in fp32.

    Args:
        x: [..., K] float activations.
        w_int8: [K, N] int8 weight.
        scales: [N] per-output-channel scales.
        out_dtype: result dtype; ``x.dtype`` when None.

    Returns:
        [..., N] array.

    Raises:
        ValueError, TypeError: see :func:`check_int8_matmul_args`.
    """
    check_int8_matmul_args(x, w_int8, scales)
    acc = jnp.matmul(x.astype(jnp.float32), w_int8.astype(jnp.float32),
                     precision=lax.Precision.HIGHEST)
    return (acc * scales.astype(jnp.float32)).astype(out_dtype or x.dtype)
