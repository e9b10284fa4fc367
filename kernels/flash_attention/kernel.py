"""Flash attention in Pallas: blockwise online-softmax forward, recomputing backward.

The kernel bodies live in ``_bodies.py``; this module builds the
``pallas_call``s, the ``custom_vjp`` and the public wrapper. Two schedules
share the same block math:

* ``"loop"`` (GPU/Triton, default in interpret mode): one program per query
  block (forward, dQ) or key block (dK/dV) loops over the other axis with
  ``lax.fori_loop``. Triton runs grid steps in parallel, so a reduction has to
  live inside one program.
* ``"grid"`` (TPU/Mosaic): the reduction axis is the innermost, "arbitrary"
  grid axis and the running statistics live in VMEM scratch; Mosaic pipelines
  the block DMAs, so K/V never have to fit in VMEM whole.

Backward = three passes: ``delta = rowsum(dO * O)`` (an XLA elementwise
reduction), a dQ kernel over query blocks and a dK/dV kernel over key blocks
(summing the query heads of a GQA group), both recomputing the probabilities
from the saved log-sum-exp.
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

from kernels._common import (check_block, compiler_params, fit_block, next_pow2, pad_axis,
                             platform, round_up)
from kernels._softmax import NEG_INF
from kernels.flash_attention._bodies import (Config, dkdv_grid_kernel, dkdv_loop_kernel,
                                             dq_grid_kernel, dq_loop_kernel, fwd_grid_kernel,
                                             fwd_loop_kernel)
from kernels.flash_attention.reference import as_4d_mask, check_attention_shapes

#: (block_q, block_k) per platform when the caller gives none.
DEFAULT_BLOCKS = {"tpu": (512, 512), "gpu": (64, 64), "interpret": (64, 64)}
DEFAULT_SCHEDULE = {"tpu": "grid", "gpu": "loop", "interpret": "loop"}
_MIN_BLOCK = {"tpu": 16, "gpu": 16, "interpret": 8}
#: Head dims the compiled kernels are written and tuned for (dispatch checks this).
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256
SUPPORTED_DTYPES = (jnp.float32, jnp.bfloat16)

_F32 = jnp.float32


# --------------------------------------------------------------------------- pallas_call wrappers


def _bias_spec(cfg: Config, rows: int, cols: int, index):
    """BlockSpec of the 4-D bias; broadcast (size-1) dims get block 1 and index 0."""
    bb, bh, bqd, bkd = cfg.bias_bcast

    def index_map(*grid):
        b, h, qi, kj = index(*grid)
        return (0 if bb else b, 0 if bh else h, 0 if bqd else qi, 0 if bkd else kj)

    return pl.BlockSpec((None, None, 1 if bqd else rows, 1 if bkd else cols), index_map)


def _last_kv_block(cfg: Config, i):
    """Causal: the last key block query block ``i`` reads (clamping skips its DMAs)."""
    return lax.div((i + 1) * cfg.block_q - 1, cfg.block_k)


def _call(kernel, cfg: Config, grid, in_specs, out_specs, out_shape, scratch, semantics, name):
    return pl.pallas_call(
        functools.partial(kernel, cfg=cfg), out_shape=out_shape, grid=grid,
        in_specs=[s for s in in_specs if s is not None], out_specs=out_specs,
        scratch_shapes=scratch, interpret=cfg.interpret, name=name,
        compiler_params=compiler_params(cfg.platform, semantics=semantics,
                                        num_warps=cfg.num_warps))


@dataclasses.dataclass(frozen=True)
class _QueryMajor:
    """Grid and specs shared by the kernels with one program per query block (fwd, dQ)."""

    grid: tuple[int, ...]
    semantics: tuple[str, ...]
    q: pl.BlockSpec  # also o, dO, dQ
    kv: pl.BlockSpec
    rows: pl.BlockSpec  # lse, delta
    bias: pl.BlockSpec | None


def _query_major(q, k, cfg: Config) -> _QueryMajor:
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    bq, bk, g = cfg.block_q, cfg.block_k, cfg.groups
    nq, nk = lq // bq, lk // bk
    if cfg.schedule == "loop":  # grid (b, h, i); the kernel loops over all of K/V
        grid, semantics = (b, hq, nq), ("parallel",) * 3
        q_index = lambda bi, h, i: (bi, h, i, 0)  # noqa: E731
        kv_spec = pl.BlockSpec((None, None, lk, d), lambda bi, h, i: (bi, lax.div(h, g), 0, 0))
        bias_index, bias_cols = (lambda bi, h, i: (bi, h, i, 0)), lk
    else:  # grid (b, h, i, j); key block j is the innermost, sequential axis
        grid, semantics = (b, hq, nq, nk), ("parallel",) * 3 + ("arbitrary",)
        # Causal: blocks past the diagonal are skipped; clamping repeats the
        # last needed block index, so their DMAs are skipped too.
        kj = (lambda i, j: jnp.minimum(j, _last_kv_block(cfg, i))) if cfg.causal else (
            lambda i, j: j)
        q_index = lambda bi, h, i, j: (bi, h, i, 0)  # noqa: E731
        kv_spec = pl.BlockSpec((None, None, bk, d),
                               lambda bi, h, i, j: (bi, lax.div(h, g), kj(i, j), 0))
        bias_index, bias_cols = (lambda bi, h, i, j: (bi, h, i, kj(i, j))), bk
    return _QueryMajor(
        grid=grid, semantics=semantics, q=pl.BlockSpec((None, None, bq, d), q_index),
        kv=kv_spec, rows=pl.BlockSpec((None, None, bq, cfg.lanes), q_index),
        bias=_bias_spec(cfg, bq, bias_cols, bias_index) if cfg.has_bias else None)


def _fwd(q, k, v, bias, cfg: Config):
    specs = _query_major(q, k, cfg)
    bq, d = cfg.block_q, q.shape[-1]
    if cfg.schedule == "loop":
        kernel, scratch = fwd_loop_kernel, []
    else:
        kernel = fwd_grid_kernel
        scratch = [pltpu.VMEM((bq, cfg.lanes), _F32), pltpu.VMEM((bq, cfg.lanes), _F32),
                   pltpu.VMEM((bq, d), _F32)]
    out_shape = [jax.ShapeDtypeStruct(q.shape, q.dtype),
                 jax.ShapeDtypeStruct((*q.shape[:3], cfg.lanes), _F32)]
    args = (q, k, v) + ((bias,) if cfg.has_bias else ())
    return _call(kernel, cfg, specs.grid, [specs.q, specs.kv, specs.kv, specs.bias],
                 [specs.q, specs.rows], out_shape, scratch, specs.semantics,
                 "flash_attention_fwd")(*args)


def _dq(q, k, v, bias, do, lse, delta, cfg: Config):
    specs = _query_major(q, k, cfg)
    if cfg.schedule == "loop":
        kernel, scratch = dq_loop_kernel, []
    else:
        kernel, scratch = dq_grid_kernel, [pltpu.VMEM((cfg.block_q, q.shape[-1]), _F32)]
    args = (q, k, v) + ((bias,) if cfg.has_bias else ()) + (do, lse, delta)
    in_specs = [specs.q, specs.kv, specs.kv, specs.bias, specs.q, specs.rows, specs.rows]
    return _call(kernel, cfg, specs.grid, in_specs, specs.q,
                 jax.ShapeDtypeStruct(q.shape, q.dtype), scratch, specs.semantics,
                 "flash_attention_dq")(*args)


def _dkdv(q, k, v, bias, do, lse, delta, cfg: Config):
    b, hq, lq, d = q.shape
    hkv, lk = k.shape[1], k.shape[2]
    bq, bk, g = cfg.block_q, cfg.block_k, cfg.groups
    nq, nk = lq // bq, lk // bk
    out_shape = [jax.ShapeDtypeStruct(k.shape, k.dtype), jax.ShapeDtypeStruct(v.shape, v.dtype)]
    if cfg.schedule == "loop":
        # Each program owns one key block of one kv head and walks the query
        # blocks of every query head in its group: view q-side arrays as
        # [B, Hkv, G, Lq, ·] so one block holds the whole group.
        grid, semantics, scratch, kernel = (b, hkv, nk), ("parallel",) * 3, [], dkdv_loop_kernel
        kv_spec = pl.BlockSpec((None, None, bk, d), lambda bi, h, j: (bi, h, j, 0))
        group = lambda x: x.reshape(b, hkv, g, lq, x.shape[-1])  # noqa: E731
        q, do, lse, delta = group(q), group(do), group(lse), group(delta)
        q_spec = pl.BlockSpec((None, None, g, lq, d), lambda bi, h, j: (bi, h, 0, 0, 0))
        lse_spec = pl.BlockSpec((None, None, g, lq, cfg.lanes), lambda bi, h, j: (bi, h, 0, 0, 0))
        bias_spec = None
        if cfg.has_bias:
            bb, bh, bqd, bkd = cfg.bias_bcast
            bias = bias.reshape(bias.shape[0], 1 if bh else hkv, 1 if bh else g, *bias.shape[2:])
            bias_spec = pl.BlockSpec(
                (None, None, 1 if bh else g, 1 if bqd else lq, 1 if bkd else bk),
                lambda bi, h, j: (0 if bb else bi, 0 if bh else h, 0, 0, 0 if bkd else j))
    else:
        grid = (b, hkv, nk, g, nq)
        semantics = ("parallel",) * 3 + ("arbitrary",) * 2
        kernel = dkdv_grid_kernel
        scratch = [pltpu.VMEM((bk, d), _F32), pltpu.VMEM((bk, d), _F32)]
        # Causal: query blocks before the key block are skipped; clamp so their DMAs are too.
        qi = (lambda i, j: jnp.maximum(i, lax.div(j * bk, bq))) if cfg.causal else (
            lambda i, j: i)
        kv_spec = pl.BlockSpec((None, None, bk, d), lambda bi, h, j, gi, i: (bi, h, j, 0))
        q_index = lambda bi, h, j, gi, i: (bi, h * g + gi, qi(i, j), 0)  # noqa: E731
        q_spec = pl.BlockSpec((None, None, bq, d), q_index)
        lse_spec = pl.BlockSpec((None, None, bq, cfg.lanes), q_index)
        bias_spec = _bias_spec(cfg, bq, bk, lambda bi, h, j, gi, i: (
            bi, h * g + gi, qi(i, j), j)) if cfg.has_bias else None
    args = (q, k, v) + ((bias,) if cfg.has_bias else ()) + (do, lse, delta)
    in_specs = [q_spec, kv_spec, kv_spec, bias_spec, q_spec, lse_spec, lse_spec]
    return _call(kernel, cfg, grid, in_specs, [kv_spec, kv_spec], out_shape, scratch, semantics,
                 "flash_attention_dkdv")(*args)


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attention(q, k, v, bias, cfg: Config):
    return _fwd(q, k, v, bias, cfg)[0]


def _attention_fwd(q, k, v, bias, cfg: Config):
    out, lse = _fwd(q, k, v, bias, cfg)
    return out, (q, k, v, bias, out, lse)


def _attention_bwd(cfg: Config, residuals, do):
    q, k, v, bias, out, lse = residuals
    delta = jnp.sum(out.astype(_F32) * do.astype(_F32), axis=-1, keepdims=True)
    delta = jnp.broadcast_to(delta, lse.shape)
    dq = _dq(q, k, v, bias, do, lse, delta, cfg)
    dk, dv = _dkdv(q, k, v, bias, do, lse, delta, cfg)
    return dq, dk, dv, None  # the mask is a constant: no cotangent


_attention.defvjp(_attention_fwd, _attention_bwd)


def flash_attention(q: jax.Array, k: jax.Array, v: jax.Array, *, mask=None,
                    causal: bool = False, scale: float | None = None,
                    block_q: int | None = None, block_k: int | None = None,
                    interpret: bool = False, schedule: str | None = None) -> jax.Array:
    """Memory-efficient scaled dot-product attention as Pallas kernels (fwd + bwd).

    Same semantics as :func:`flash_attention_reference` (torch SDPA with
    ``enable_gqa=True``), computed blockwise with an online softmax in fp32;
    the backward pass (``jax.custom_vjp``) recomputes probabilities block by
    block in Pallas from the saved log-sum-exp. Sequences that are not a
    multiple of the block are padded and the padding masked. Empty inputs give
    what the reference gives: an empty output, or zeros where there are no keys.

    Args:
        q: [B, Hq, Lq, D] queries, float32 or bfloat16.
        k: [B, Hkv, Lk, D] keys, same dtype; ``Hq % Hkv == 0`` (GQA/MQA).
        v: [B, Hkv, Lk, D] values.
        mask: optional mask broadcastable to [B, Hq, Lq, Lk]: boolean (True =
            keep) or additive float. It is treated as a constant: gradients
            flow to q, k, v only.
        causal: keep ``tril(ones(Lq, Lk))`` (torch's top-left alignment).
        scale: logit scale; ``1 / sqrt(D)`` when None.
        block_q: query rows per block (static); per-platform default from
            ``DEFAULT_BLOCKS``, shrunk for short sequences.
        block_k: key rows per block (static), likewise.
        interpret: run the kernels in Pallas interpret mode (any backend).
        schedule: "loop" or "grid" (see module docstring); None picks the
            platform default. Triton (GPU) supports "loop" only.

    Returns:
        [B, Hq, Lq, D] attention output in ``q.dtype``.

    Raises:
        ValueError: inconsistent shapes, bad block sizes or schedule.
        TypeError: non-float inputs or a mask that is neither bool nor float.
        kernels._common.PallasUnavailableError: ``interpret=False`` on CPU.
    """
    groups = check_attention_shapes(q, k, v)
    if q.dtype != k.dtype or q.dtype != v.dtype or not jnp.issubdtype(q.dtype, jnp.floating):
        raise TypeError(f"q, k, v must share one float dtype; got {q.dtype}, {k.dtype}, {v.dtype}")
    b, hq, lq, d = q.shape
    lk = k.shape[2]
    if mask is not None:
        mask = as_4d_mask(mask, (b, hq, lq, lk))
    plat = platform(interpret)
    schedule = schedule or DEFAULT_SCHEDULE[plat]
    if schedule not in ("loop", "grid") or (plat == "gpu" and schedule == "grid"):
        raise ValueError(f"schedule {schedule!r} is not available on {plat} "
                         f"(choose from {'loop' if plat == 'gpu' else 'loop, grid'})")
    if q.size == 0 or lk == 0:  # no block to run: no query rows, or rows that attend to no key (zeros)
        return jnp.zeros(q.shape, q.dtype)
    default_q, default_k = DEFAULT_BLOCKS[plat]
    block_q, block_k = block_q or default_q, block_k or default_k
    check_block("block_q", block_q, plat)
    check_block("block_k", block_k, plat)
    bq = fit_block(block_q, lq, minimum=_MIN_BLOCK[plat])
    bk = fit_block(block_k, lk, minimum=_MIN_BLOCK[plat])
    lq_pad, lk_pad = round_up(lq, bq), round_up(lk, bk)
    if plat == "tpu" and bk % 128 and bk != lk_pad:
        # A key block is the lane (minor) dim of the logits and the bias block.
        raise ValueError(f"block_k={bk} must be a multiple of 128 on TPU unless it spans "
                         f"the whole (padded) key sequence")
    # Triton loads need power-of-two sizes: zero head-dim padding changes no logit.
    d_pad = max(16, next_pow2(d)) if plat == "gpu" else d

    bias, bcast = None, None
    if mask is not None:
        if mask.dtype == jnp.bool_:
            bias_dtype = _F32 if q.dtype == _F32 else q.dtype
            mask = jnp.where(mask, 0.0, NEG_INF).astype(bias_dtype)
        bcast = tuple(s == 1 for s in mask.shape)
        mask = mask if bcast[2] else pad_axis(mask, 2, lq_pad)
        bias = lax.stop_gradient(mask if bcast[3] else pad_axis(mask, 3, lk_pad))

    cfg = Config(scale=float(1.0 / math.sqrt(d) if scale is None else scale),
                 causal=bool(causal), block_q=bq, block_k=bk, len_q=lq, len_k=lk, groups=groups,
                 schedule=schedule, platform=plat, lanes=128 if plat == "tpu" else 1,
                 bias_bcast=bcast, num_warps=4 if d_pad <= 64 else 8)
    pad = lambda x, length: pad_axis(pad_axis(x, 2, length), 3, d_pad)  # noqa: E731
    out = _attention(pad(q, lq_pad), pad(k, lk_pad), pad(v, lk_pad), bias, cfg)
    return out[:, :, :lq, :d]


def unsupported_reason(*, backend: str, head_dim: int | None = None, dtype=None,
                       dropout_p: float = 0.0) -> str | None:
    """Why the Pallas kernel cannot take a configuration, or None if it can.

    Args:
        backend: "tpu", "gpu" or "cpu".
        head_dim: D.
        dtype: q/k/v dtype.
        dropout_p: attention dropout probability; the kernel has no dropout.

    Returns:
        A one-line reason, or None.
    """
    del backend
    if dropout_p:
        return f"dropout_p={dropout_p} > 0 (the Pallas kernel has no dropout)"
    if head_dim is not None and not MIN_HEAD_DIM <= head_dim <= MAX_HEAD_DIM:
        return f"head_dim={head_dim} outside [{MIN_HEAD_DIM}, {MAX_HEAD_DIM}]"
    if dtype is not None and jnp.dtype(dtype) not in [jnp.dtype(t) for t in SUPPORTED_DTYPES]:
        return f"dtype {jnp.dtype(dtype).name} not in (float32, bfloat16)"
    return None
