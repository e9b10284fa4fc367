"""torch ↔ JAX dtype mapping and torch type-promotion helpers."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import torch

TORCH_TO_JAX = {
    torch.float32: jnp.float32,
    torch.float64: jnp.float64,
    torch.float16: jnp.float16,
    torch.bfloat16: jnp.bfloat16,
    torch.int8: jnp.int8,
    torch.uint8: jnp.uint8,
    torch.int16: jnp.int16,
    torch.int32: jnp.int32,
    torch.int64: jnp.int64,
    torch.bool: jnp.bool_,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
}
JAX_TO_TORCH = {np.dtype(v): k for k, v in TORCH_TO_JAX.items()}


def to_jax_dtype(dtype: torch.dtype | None):
    """Return the JAX dtype for a torch dtype (``None`` passes through)."""
    if dtype is None:
        return None
    try:
        return TORCH_TO_JAX[dtype]
    except KeyError:
        raise TypeError(f"dtype {dtype} is not supported by tpu-export") from None


def to_torch_dtype(dtype) -> torch.dtype:
    """Return the torch dtype for a JAX/NumPy dtype."""
    return JAX_TO_TORCH[np.dtype(dtype)]


def is_floating(dtype) -> bool:
    """True for floating dtypes (JAX/NumPy dtype)."""
    return jnp.issubdtype(dtype, jnp.floating)


def is_integer(dtype) -> bool:
    """True for integer (not bool) dtypes (JAX/NumPy dtype)."""
    return jnp.issubdtype(dtype, jnp.integer)
