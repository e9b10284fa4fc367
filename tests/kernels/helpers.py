"""Shared helpers of the kernel tests: cheap CPU compilation and dtype-aware comparison."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

#: Interpret-mode kernels lower to large XLA programs (a loop over the grid with
#: the kernel body inlined); XLA:CPU's optimizing backend takes seconds on each.
#: These per-executable options (nothing global) cut compile time ~5x without
#: changing what is computed.
FAST_CPU_COMPILE = {
    "xla_backend_optimization_level": 0,
    "xla_llvm_disable_expensive_passes": True,
    "xla_cpu_use_fusion_emitters": False,
}

#: (rtol, atol relative to the reference's max magnitude) per dtype. fp32 is
#: the same math in another order; bf16 kernels round P and dS to bf16 before
#: their matmuls (as flash attention does) while the reference stays fp32.
TOLERANCES = {
    jnp.dtype(jnp.float32): (1e-5, 1e-5),
    jnp.dtype(jnp.bfloat16): (2e-2, 2e-2),
}


def run_jit(fn, *args):
    """jit-compiles ``fn`` with :data:`FAST_CPU_COMPILE` and runs it on ``args``."""
    return jax.jit(fn).lower(*args).compile(FAST_CPU_COMPILE)(*args)


def assert_close(actual, expected, dtype=None, *, what: str = "") -> None:
    """Checks shape and dtype exactly, then values at the tolerance of ``dtype``."""
    dtype = jnp.dtype(dtype or expected.dtype)
    assert actual.shape == expected.shape, f"{what}: shape {actual.shape} != {expected.shape}"
    assert actual.dtype == expected.dtype, f"{what}: dtype {actual.dtype} != {expected.dtype}"
    rtol, atol = TOLERANCES[dtype]
    expected = np.asarray(expected, np.float32)
    scale = max(1.0, float(np.max(np.abs(expected)))) if expected.size else 1.0
    np.testing.assert_allclose(np.asarray(actual, np.float32), expected, rtol=rtol,
                               atol=atol * scale, err_msg=what)


def normal(seed: int, shape, dtype=jnp.float32, *, loc: float = 0.0, scale: float = 1.0):
    """Deterministic normal test data.

    Made in numpy (bf16 via ml_dtypes), not jax.random or eager jnp: every new
    eager shape costs an XLA:CPU compilation, and jax.random's cost seconds.
    """
    data = np.random.default_rng(seed).normal(loc, scale, shape).astype(np.float32)
    return jnp.asarray(data.astype(jnp.dtype(dtype)))


def bernoulli(seed: int, p: float, shape) -> np.ndarray:
    """Deterministic boolean test data, True with probability ``p``."""
    return np.random.default_rng(seed).random(shape) < p
