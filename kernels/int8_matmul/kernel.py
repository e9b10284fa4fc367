"""int8 weight-only matmul in Pallas: dequantize a weight block on chip, fp32 accumulate.

The weight travels from HBM as int8 (half the bytes of bf16, a quarter of
fp32), is converted to the activation dtype block by block, and the
per-output-channel scale is applied once to the fp32 accumulator.

Schedules as in flash attention: "loop" (GPU/Triton, interpret) walks K inside
one program; "grid" (TPU/Mosaic) makes K the innermost "arbitrary" grid axis
with a VMEM accumulator.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl
from jax.experimental.pallas import tpu as pltpu

from kernels._common import (check_block, compiler_params, fit_block, matmul, pad_axis, platform,
                             round_up)
from kernels.int8_matmul.reference import check_int8_matmul_args

#: (block_m, block_n, block_k) per platform when the caller gives none.
DEFAULT_BLOCKS = {"tpu": (256, 256, 512), "gpu": (64, 128, 64), "interpret": (128, 128, 128)}
DEFAULT_SCHEDULE = {"tpu": "grid", "gpu": "loop", "interpret": "loop"}
#: Smallest (m, n, k) block: TPU lane/sublane tiles (int8 packs 32 sublanes); Triton dot is 16-wide.
_MIN_BLOCK = {"tpu": (16, 128, 128), "gpu": (16, 16, 16), "interpret": (8, 8, 8)}
_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class _Config:
    block_m: int
    block_n: int
    block_k: int
    schedule: str
    platform: str
    out_dtype: jnp.dtype


def _dequant_dot(x, w_int8):
    return matmul(x, w_int8.astype(x.dtype))


def _int8_matmul_loop_kernel(x_ref, w_ref, s_ref, o_ref, *, cfg: _Config):
    bk = cfg.block_k

    def body(j, acc):
        cols = pl.ds(pl.multiple_of(j * bk, bk), bk)
        return acc + _dequant_dot(x_ref[:, cols], w_ref[cols, :])

    acc = lax.fori_loop(0, x_ref.shape[1] // bk, body,
                        jnp.zeros((cfg.block_m, cfg.block_n), _F32))
    o_ref[...] = (acc * s_ref[...].astype(_F32)).astype(o_ref.dtype)


def _int8_matmul_grid_kernel(x_ref, w_ref, s_ref, o_ref, acc_ref, *, cfg: _Config):
    j = pl.program_id(2)

    @pl.when(j == 0)
    def _init():
        acc_ref[...] = jnp.zeros(acc_ref.shape, _F32)

    acc_ref[...] += _dequant_dot(x_ref[...], w_ref[...])

    @pl.when(j == pl.num_programs(2) - 1)
    def _done():
        o_ref[...] = (acc_ref[...] * s_ref[...].astype(_F32)).astype(o_ref.dtype)


def _forward(x2, w, s2, cfg: _Config):
    m, k = x2.shape
    n = w.shape[1]
    bm, bn, bk = cfg.block_m, cfg.block_n, cfg.block_k
    out_shape = jax.ShapeDtypeStruct((m, n), cfg.out_dtype)
    if cfg.schedule == "loop":
        grid, semantics, scratch = (m // bm, n // bn), ("parallel", "parallel"), []
        kernel = _int8_matmul_loop_kernel
        in_specs = [pl.BlockSpec((bm, k), lambda i, j: (i, 0)),
                    pl.BlockSpec((k, bn), lambda i, j: (0, j)),
                    pl.BlockSpec((1, bn), lambda i, j: (0, j))]
        out_spec = pl.BlockSpec((bm, bn), lambda i, j: (i, j))
    else:
        grid, semantics = (m // bm, n // bn, k // bk), ("parallel", "parallel", "arbitrary")
        kernel, scratch = _int8_matmul_grid_kernel, [pltpu.VMEM((bm, bn), _F32)]
        in_specs = [pl.BlockSpec((bm, bk), lambda i, j, kk: (i, kk)),
                    pl.BlockSpec((bk, bn), lambda i, j, kk: (kk, j)),
                    pl.BlockSpec((1, bn), lambda i, j, kk: (0, j))]
        out_spec = pl.BlockSpec((bm, bn), lambda i, j, kk: (i, j))
    return pl.pallas_call(
        functools.partial(kernel, cfg=cfg), out_shape=out_shape, grid=grid, in_specs=in_specs,
        out_specs=out_spec, scratch_shapes=scratch, interpret=cfg.platform == "interpret",
        name="int8_matmul",
        compiler_params=compiler_params(cfg.platform, semantics=semantics, num_warps=4,
                                        num_stages=3))(x2, w, s2)


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _int8_matmul(x2, w, s2, cfg: _Config):
    return _forward(x2, w, s2, cfg)


def _int8_matmul_fwd(x2, w, s2, cfg: _Config):
    return _forward(x2, w, s2, cfg), (x2, w, s2)


def _int8_matmul_bwd(cfg: _Config, residuals, dy):
    # Weight-only quantization is for inference; these gradients (for
    # fine-tuning adapters upstream, or the scales) are plain XLA matmuls.
    x2, w, s2 = residuals
    dyf = dy.astype(_F32)
    wf = w.astype(_F32)
    dx = jnp.matmul(dyf * s2.astype(_F32), wf.T, precision=lax.Precision.HIGHEST)
    acc = jnp.matmul(x2.astype(_F32), wf, precision=lax.Precision.HIGHEST)
    ds = jnp.sum(dyf * acc, axis=0, keepdims=True)
    return dx.astype(x2.dtype), None, ds.astype(s2.dtype)


_int8_matmul.defvjp(_int8_matmul_fwd, _int8_matmul_bwd)


def int8_matmul(x: jax.Array, w_int8: jax.Array, scales: jax.Array, *,
                block_m: int | None = None, block_n: int | None = None,
                block_k: int | None = None, out_dtype=None, interpret: bool = False,
                schedule: str | None = None) -> jax.Array:
    """int8 weight-only matmul ``(x @ w_int8) * scales`` as a Pallas kernel.

    The weight is [K, N] (in_features, out_features) — the transpose of a torch
    ``nn.Linear.weight``; :func:`quantize_per_channel` produces it. Blocks of
    the weight are converted to ``x.dtype`` on chip and multiplied with fp32
    accumulation; the [N] scales multiply the accumulator. Differentiable in
    ``x`` and ``scales`` (backward in XLA); the int8 weight gets no gradient.

    Args:
        x: [..., K] activations (float32 or bfloat16).
        w_int8: [K, N] int8 weight.
        scales: [N] per-output-channel scales.
        block_m: rows of x per block (static); per-platform default.
        block_n: output columns per block (static); per-platform default.
        block_k: contraction depth per step (static); per-platform default.
        out_dtype: result dtype; ``x.dtype`` when None.
        interpret: run in Pallas interpret mode (any backend).
        schedule: "loop" or "grid"; None picks the platform default (Triton
            supports "loop" only).

    Returns:
        [..., N] array of ``out_dtype``.

    Raises:
        ValueError: mismatched shapes, bad block sizes or schedule.
        TypeError: wrong dtypes.
        kernels._common.PallasUnavailableError: ``interpret=False`` on CPU.
    """
    check_int8_matmul_args(x, w_int8, scales)
    plat = platform(interpret)
    schedule = schedule or DEFAULT_SCHEDULE[plat]
    if schedule not in ("loop", "grid") or (plat == "gpu" and schedule == "grid"):
        raise ValueError(f"schedule {schedule!r} is not available on {plat}")
    k, n = w_int8.shape
    lead = x.shape[:-1]
    m = math.prod(lead)
    out_dtype = jnp.dtype(out_dtype or x.dtype)
    if not m * n * k:  # an empty batch, weight or contraction: no block to run (a sum over no K is 0)
        return jnp.zeros((*lead, n), out_dtype)
    blocks = []
    for name, given, default, size, minimum in zip(
            ("block_m", "block_n", "block_k"), (block_m, block_n, block_k),
            DEFAULT_BLOCKS[plat], (m, n, k), _MIN_BLOCK[plat]):
        block = given or default
        check_block(name, block, plat)
        blocks.append(fit_block(block, max(size, 1), minimum=minimum))
    bm, bn, bk = blocks
    cfg = _Config(block_m=bm, block_n=bn, block_k=bk, schedule=schedule, platform=plat,
                  out_dtype=out_dtype)
    # Zero padding of K adds nothing to the dot; padded rows/columns are sliced off.
    x2 = pad_axis(pad_axis(x.reshape(m, k), 0, round_up(m, bm)), 1, round_up(k, bk))
    w = pad_axis(pad_axis(w_int8, 0, round_up(k, bk)), 1, round_up(n, bn))
    s2 = pad_axis(scales.reshape(1, n), 1, round_up(n, bn))
    return _int8_matmul(x2, w, s2, cfg)[:m, :n].reshape(*lead, n)


def unsupported_reason(*, backend: str, dtype=None, weight_dtype=None) -> str | None:
    """Why the Pallas int8 matmul cannot take a configuration, or None if it can.

    Args:
        backend: "tpu", "gpu" or "cpu".
        dtype: activation dtype.
        weight_dtype: weight dtype (must be int8).

    Returns:
        A one-line reason, or None.
    """
    del backend
    if weight_dtype is not None and jnp.dtype(weight_dtype) != jnp.int8:
        return f"weight dtype {jnp.dtype(weight_dtype).name} is not int8"
    if dtype is not None and jnp.dtype(dtype) not in (jnp.dtype(jnp.float32),
                                                      jnp.dtype(jnp.bfloat16)):
        return f"activation dtype {jnp.dtype(dtype).name} not in (float32, bfloat16)"
    return None
