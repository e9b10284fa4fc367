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
    # torch's "limited support" unsigned types: bitwise ops, shifts, comparisons, ``hash_tensor``'s result
    torch.uint16: jnp.uint16,
    torch.uint32: jnp.uint32,
    torch.uint64: jnp.uint64,
    torch.bool: jnp.bool_,
    torch.complex64: jnp.complex64,
    torch.complex128: jnp.complex128,
    # storage/matmul-input types (``torch._scaled_mm``); torch has no arithmetic on them
    torch.float8_e4m3fn: jnp.float8_e4m3fn,
    torch.float8_e5m2: jnp.float8_e5m2,
    torch.float8_e4m3fnuz: jnp.float8_e4m3fnuz,
    torch.float8_e5m2fnuz: jnp.float8_e5m2fnuz,
}
JAX_TO_TORCH = {np.dtype(v): k for k, v in TORCH_TO_JAX.items()}

#: The float8 dtypes tpu-export takes.
FLOAT8 = (torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz)

#: dtypes NumPy only has through ml_dtypes (no torch.from_numpy): moved as the integer type of their width.
BIT_VIEWS = {torch.bfloat16: (torch.int16, np.int16), **{d: (torch.uint8, np.uint8) for d in FLOAT8}}


def tensor_to_numpy(t: torch.Tensor) -> np.ndarray:
    """A contiguous CPU tensor's data as NumPy (a view of its memory, or of a copy when its negative or conjugate
    bit is set; bfloat16/float8 as ml_dtypes arrays).

    Through DLPack, not ``Tensor.numpy()``: that marks the tensor's storage non-resizable for good, so a
    user's CPU tensor moved to the device (or exported) could no longer be ``resize_``-d or be an ``out=``
    of another size."""
    t = t.resolve_conj().resolve_neg()  # (DLPack exports the raw memory: a lazily negated or conjugated view's
    bits = BIT_VIEWS.get(t.dtype)       # values are made first)
    return np.from_dlpack(t) if bits is None else np.from_dlpack(t.view(bits[0])).view(TORCH_TO_JAX[t.dtype])


def numpy_to_tensor(arr: np.ndarray) -> torch.Tensor:
    """A NumPy array (ml_dtypes ones too) as a CPU tensor sharing its memory."""
    dtype = JAX_TO_TORCH.get(arr.dtype)
    bits = BIT_VIEWS.get(dtype)
    return torch.from_numpy(arr) if bits is None else torch.from_numpy(arr.view(bits[1])).view(dtype)


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


#: c10's ScalarType names, as torch's error messages spell dtypes.
_SCALAR_TYPE_NAMES = {torch.float32: "Float", torch.float64: "Double", torch.float16: "Half", torch.bfloat16: "BFloat16",
                      torch.int64: "Long", torch.int32: "Int", torch.int16: "Short", torch.int8: "Char",
                      torch.uint8: "Byte", torch.bool: "Bool", torch.complex64: "ComplexFloat",
                      torch.complex128: "ComplexDouble"}


def scalar_type_name(dtype) -> str:
    """torch's ScalarType name of ``dtype`` (a torch, JAX or NumPy dtype): ``Float``, ``Long``, ``ComplexFloat``…"""
    if not isinstance(dtype, torch.dtype):
        dtype = JAX_TO_TORCH.get(np.dtype(dtype), dtype)
    return _SCALAR_TYPE_NAMES.get(dtype, str(dtype))


def is_floating(dtype) -> bool:
    """True for floating dtypes (JAX/NumPy dtype)."""
    return jnp.issubdtype(dtype, jnp.floating)


def is_integer(dtype) -> bool:
    """True for integer (not bool) dtypes (JAX/NumPy dtype)."""
    return jnp.issubdtype(dtype, jnp.integer)
