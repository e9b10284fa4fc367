"""Helpers shared by the Pallas kernels: platform, padding, compiler params.

Every kernel wrapper asks :func:`platform` which lowering it is building for and
derives its static choices (block sizes, schedule, padding) from the answer:

* ``"tpu"``  — Mosaic TPU. Blocks obey the (8, 128) tiling rule; reductions over
  a grid axis accumulate in VMEM scratch ("grid" schedule).
* ``"gpu"``  — Triton. jax 0.10.2 lowers a bare ``pallas_call`` on CUDA to
  *Mosaic GPU* (``jax_pallas_use_mosaic_gpu`` defaults to True), so every kernel
  passes ``pltriton.CompilerParams`` explicitly to select the Triton lowering.
  Triton needs power-of-two array sizes in loads/stores and a 16-wide minimum
  for ``dot``; grid steps run in parallel, so reductions loop inside the kernel
  ("loop" schedule).
* ``"interpret"`` — ``pallas_call(interpret=True)``: any backend, used by tests.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental.pallas import tpu as pltpu
from jax.experimental.pallas import triton as pltriton

#: jax.default_backend() names → the three families the kernels distinguish.
_BACKEND_FAMILY = {"tpu": "tpu", "gpu": "gpu", "cuda": "gpu", "rocm": "gpu", "cpu": "cpu"}


class PallasUnavailableError(RuntimeError):
    """A compiled (non-interpret) Pallas kernel was requested on a backend without a lowering."""


def backend() -> str:
    """The accelerator family of JAX's default backend.

    Returns:
        ``"tpu"``, ``"gpu"`` or ``"cpu"``. Platforms JAX may add later (for
        example a plugin) count as ``"cpu"``: no Pallas lowering is assumed.
    """
    return _BACKEND_FAMILY.get(jax.default_backend().lower(), "cpu")


def platform(interpret: bool) -> str:
    """Which Pallas lowering a kernel call builds for.

    Args:
        interpret: the kernel's ``interpret`` flag.

    Returns:
        ``"interpret"``, ``"tpu"`` or ``"gpu"``.

    Raises:
        PallasUnavailableError: ``interpret`` is False on a backend that cannot
            compile Pallas (CPU).
    """
    if interpret:
        return "interpret"
    family = backend()
    if family == "cpu":
        raise PallasUnavailableError(
            f"Pallas kernels compile only on TPU (Mosaic) or GPU (Triton); the default "
            f"JAX backend is {jax.default_backend()!r}. Pass interpret=True, or call the "
            f"kernel through kernels.dispatch, which picks the reference on CPU.")
    return family


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative Python ints."""
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    """``a`` rounded up to a multiple of ``b``."""
    return cdiv(a, b) * b


def next_pow2(n: int) -> int:
    """The smallest power of two >= ``n`` (1 for n <= 1)."""
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def pad_axis(x: jax.Array, axis: int, size: int, value=0) -> jax.Array:
    """Pads ``x`` at the end of ``axis`` up to ``size`` (a no-op when already there)."""
    extra = size - x.shape[axis]
    if extra == 0:
        return x
    widths = [(0, 0)] * x.ndim
    widths[axis] = (0, extra)
    return jnp.pad(x, widths, constant_values=value)


def fit_block(block: int, length: int, *, minimum: int) -> int:
    """Shrinks a block to the (power-of-two rounded) length it tiles.

    A 40-long sequence with a 128 block gets a 64 block, not 128 rows of padding.
    Keeps power-of-two blocks power-of-two (Triton) and >= ``minimum`` (the TPU
    sublane tile, Triton's 16-wide dot).
    """
    return max(minimum, min(block, next_pow2(length)))


def check_block(name: str, block: int, plat: str) -> None:
    """Validates a user-given block size for ``plat``.

    Raises:
        ValueError: not a positive multiple of 8, or not a power of two on GPU.
    """
    if not isinstance(block, int) or block <= 0 or block % 8:
        raise ValueError(f"{name}={block!r} must be a positive multiple of 8")
    if plat == "gpu" and block & (block - 1):
        raise ValueError(f"{name}={block} must be a power of two for the Triton lowering")


def compiler_params(plat: str, *, semantics: tuple[str, ...] = (), num_warps: int = 4,
                    num_stages: int = 2):
    """Backend compiler parameters for ``pallas_call``.

    Args:
        plat: the value of :func:`platform`.
        semantics: TPU dimension semantics per grid axis ("parallel"/"arbitrary").
        num_warps: Triton warps per program.
        num_stages: Triton software-pipelining stages.

    Returns:
        ``pltpu.CompilerParams`` on TPU, ``pltriton.CompilerParams`` on GPU (this
        is what selects Triton over Mosaic GPU), ``None`` in interpret mode.
    """
    if plat == "tpu":
        return pltpu.CompilerParams(dimension_semantics=semantics or None)
    if plat == "gpu":
        return pltriton.CompilerParams(num_warps=num_warps, num_stages=num_stages)
    return None


def dot_precision(dtype) -> lax.Precision:
    """fp32 operands get full fp32 products (TPU's default would be one bf16 pass)."""
    return lax.Precision.HIGHEST if jnp.dtype(dtype) == jnp.float32 else lax.Precision.DEFAULT


def matmul(a: jax.Array, b: jax.Array, *, trans_b: bool = False) -> jax.Array:
    """2-D ``a @ b`` (or ``a @ b.T``) with fp32 accumulation."""
    contract = ((1,), (1 if trans_b else 0,))
    return lax.dot_general(a, b, (contract, ((), ())), preferred_element_type=jnp.float32,
                           precision=dot_precision(a.dtype))


def iota2(shape: tuple[int, int], dim: int, start=0) -> jax.Array:
    """A 2-D int32 iota along ``dim`` offset by ``start`` (Mosaic wants vector ops >= 2-D)."""
    return start + lax.broadcasted_iota(jnp.int32, shape, dim)
