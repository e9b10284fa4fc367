"""Decode attention over a paged KV cache in Pallas.

One program serves one (sequence, kv head): the query heads of the GQA group
are the rows of its [G, D] query block, so each cached page is read once per
kv head. Pages past ``lengths[b]`` are never computed on.

* "loop" (GPU/Triton, interpret): the program holds the kv head's whole page
  pool as a ref (HBM pointers on GPU) and walks the sequence's pages with
  ``fori_loop``, reading page ids from ``block_tables``.
* "grid" (TPU/Mosaic): ``block_tables`` and ``lengths`` are scalar-prefetched
  into SMEM; the page axis is the innermost "arbitrary" grid axis whose index
  map looks the page id up, so Mosaic's pipeline DMAs exactly the pages the
  sequence owns. Steps past the last page repeat its block index (no new DMA)
  and skip compute.
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

from kernels._common import compiler_params, iota2, matmul, next_pow2, pad_axis, platform
from kernels._softmax import (NEG_INF, online_softmax_finalize, online_softmax_init,
                              online_softmax_update)
from kernels.paged_attention.reference import check_paged_args

DEFAULT_SCHEDULE = {"tpu": "grid", "gpu": "loop", "interpret": "loop"}
MAX_HEAD_DIM = 256
_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class _Config:
    scale: float
    page_size: int
    schedule: str
    platform: str
    lanes: int


def _page_step(carry, q, k, v, page_index, length, cfg: _Config):
    """Online-softmax step over one page; rows past ``length`` are masked."""
    s = matmul(q, k, trans_b=True) * cfg.scale
    s = jnp.where(iota2(s.shape, 1, page_index * cfg.page_size) < length, s, NEG_INF)
    return online_softmax_update(carry, s, v)


def _paged_loop_kernel(q_ref, k_ref, v_ref, bt_ref, len_ref, o_ref, *, cfg: _Config):
    length = len_ref[0]
    q = q_ref[...]

    def body(i, carry):
        page = bt_ref[i]
        return _page_step(carry, q, k_ref[page], v_ref[page], i, length, cfg)

    num_pages = lax.div(length + cfg.page_size - 1, cfg.page_size)
    init = online_softmax_init(q.shape[0], q.shape[1])
    out, _ = online_softmax_finalize(*lax.fori_loop(0, num_pages, body, init))
    o_ref[...] = out.astype(o_ref.dtype)


def _paged_grid_kernel(bt_ref, len_ref, q_ref, k_ref, v_ref, o_ref, m_sc, l_sc, acc_sc, *,
                       cfg: _Config):
    del bt_ref  # consumed by the index maps
    p = pl.program_id(2)
    length = len_ref[pl.program_id(0)]

    @pl.when(p == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, NEG_INF, _F32)
        l_sc[...] = jnp.zeros(l_sc.shape, _F32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, _F32)

    @pl.when(p * cfg.page_size < length)
    def _step():
        carry = (m_sc[:, :1], l_sc[:, :1], acc_sc[...])
        m, l, acc = _page_step(carry, q_ref[...], k_ref[...], v_ref[...], p, length, cfg)
        m_sc[...] = jnp.broadcast_to(m, m_sc.shape)
        l_sc[...] = jnp.broadcast_to(l, l_sc.shape)
        acc_sc[...] = acc

    @pl.when(p == pl.num_programs(2) - 1)
    def _done():
        out, _ = online_softmax_finalize(m_sc[:, :1], l_sc[:, :1], acc_sc[...])
        o_ref[...] = out.astype(o_ref.dtype)


def _loop_call(qg, k_pages, v_pages, block_tables, lengths, cfg: _Config):
    b, hkv, g, d = qg.shape
    _, num_pages, page, _ = k_pages.shape
    max_pages = block_tables.shape[1]
    q_spec = pl.BlockSpec((None, None, g, d), lambda bi, h: (bi, h, 0, 0))
    pool_spec = pl.BlockSpec((None, num_pages, page, d), lambda bi, h: (h, 0, 0, 0))
    return pl.pallas_call(
        functools.partial(_paged_loop_kernel, cfg=cfg),
        out_shape=jax.ShapeDtypeStruct(qg.shape, qg.dtype), grid=(b, hkv),
        in_specs=[q_spec, pool_spec, pool_spec,
                  pl.BlockSpec((None, max_pages), lambda bi, h: (bi, 0)),
                  pl.BlockSpec((None, 1), lambda bi, h: (bi, 0))],
        out_specs=q_spec, interpret=cfg.platform == "interpret", name="paged_attention",
        compiler_params=compiler_params(cfg.platform, num_warps=4, num_stages=2),
    )(qg, k_pages, v_pages, block_tables, lengths.reshape(b, 1))


def _grid_call(qg, k_pages, v_pages, block_tables, lengths, cfg: _Config):
    b, hkv, g, d = qg.shape
    _, num_pages, page, _ = k_pages.shape
    max_pages = block_tables.shape[1]

    def page_index(bi, h, p, bt, lens):
        # Past the sequence's last page, repeat it (same block: no DMA); clamp
        # ids so an unused table entry never addresses outside the pool.
        last = jnp.maximum(lax.div(lens[bi] + page - 1, page) - 1, 0)
        page_id = bt[bi * max_pages + jnp.minimum(p, last)]
        return h, jnp.clip(page_id, 0, num_pages - 1), 0, 0

    q_spec = pl.BlockSpec((None, None, g, d), lambda bi, h, p, bt, lens: (bi, h, 0, 0))
    page_spec = pl.BlockSpec((None, None, page, d), page_index)
    grid_spec = pltpu.PrefetchScalarGridSpec(
        num_scalar_prefetch=2, grid=(b, hkv, max_pages),
        in_specs=[q_spec, page_spec, page_spec], out_specs=q_spec,
        scratch_shapes=[pltpu.VMEM((g, cfg.lanes), _F32), pltpu.VMEM((g, cfg.lanes), _F32),
                        pltpu.VMEM((g, d), _F32)])
    return pl.pallas_call(
        functools.partial(_paged_grid_kernel, cfg=cfg),
        out_shape=jax.ShapeDtypeStruct(qg.shape, qg.dtype), grid_spec=grid_spec,
        interpret=cfg.platform == "interpret", name="paged_attention",
        compiler_params=compiler_params(cfg.platform,
                                        semantics=("parallel", "parallel", "arbitrary")),
    )(block_tables.reshape(-1), lengths, qg, k_pages, v_pages)


def paged_attention(q: jax.Array, k_pages: jax.Array, v_pages: jax.Array,
                    block_tables: jax.Array, lengths: jax.Array, *,
                    scale: float | None = None, interpret: bool = False,
                    schedule: str | None = None) -> jax.Array:
    """One decode step of attention over a paged KV cache, as a Pallas kernel.

    Same semantics as :func:`paged_attention_reference`; the online softmax
    runs in fp32 over the sequence's pages only. Forward only (decode).

    Args:
        q: [B, H, D] queries, one token per sequence (float32 or bfloat16).
        k_pages: [Hkv, num_pages, page_size, D] key cache, ``H % Hkv == 0``.
        v_pages: [Hkv, num_pages, page_size, D] value cache.
        block_tables: [B, max_pages_per_seq] int32 page ids; entries past a
            sequence's last page are never read.
        lengths: [B] int32 tokens per sequence, <= max_pages_per_seq * page_size.
        scale: logit scale; ``1 / sqrt(D)`` when None.
        interpret: run in Pallas interpret mode (any backend).
        schedule: "loop" or "grid" (module docstring); None picks the platform
            default. Triton (GPU) supports "loop" only.

    Returns:
        [B, H, D] in ``q.dtype``.

    Raises:
        ValueError: inconsistent shapes, bad schedule, or (GPU) a head dim or
            page size that is not a power of two.
        TypeError: non-integer tables.
        kernels._common.PallasUnavailableError: ``interpret=False`` on CPU.
    """
    groups = check_paged_args(q, k_pages, v_pages, block_tables, lengths)
    plat = platform(interpret)
    schedule = schedule or DEFAULT_SCHEDULE[plat]
    if schedule not in ("loop", "grid") or (plat == "gpu" and schedule == "grid"):
        raise ValueError(f"schedule {schedule!r} is not available on {plat}")
    b, h, d = q.shape
    hkv, _, page, _ = k_pages.shape
    reason = unsupported_reason(backend="cpu" if plat == "interpret" else plat, head_dim=d,
                                page_size=page)
    if reason:
        raise ValueError(f"paged_attention: {reason}")
    if q.size == 0 or not block_tables.shape[1] * page:  # no sequence, or no cache tokens (zeros)
        return jnp.zeros(q.shape, q.dtype)
    cfg = _Config(scale=float(1.0 / math.sqrt(d) if scale is None else scale), page_size=page,
                  schedule=schedule, platform=plat, lanes=128 if plat == "tpu" else 1)
    qg = q.reshape(b, hkv, groups, d)
    if plat == "gpu":  # Triton's dot wants >= 16 power-of-two rows: pad the head group.
        qg = pad_axis(qg, 2, max(16, next_pow2(groups)))
    call = _loop_call if schedule == "loop" else _grid_call
    out = call(qg, k_pages, v_pages, block_tables.astype(jnp.int32), lengths.astype(jnp.int32),
               cfg)
    return out[:, :, :groups].reshape(b, h, d)


def unsupported_reason(*, backend: str, head_dim: int | None = None,
                       page_size: int | None = None, dtype=None) -> str | None:
    """Why the Pallas paged attention cannot take a configuration, or None if it can.

    Args:
        backend: "tpu", "gpu" or "cpu".
        head_dim: D.
        page_size: tokens per page.
        dtype: q/cache dtype.

    Returns:
        A one-line reason, or None.
    """
    if head_dim is not None and head_dim > MAX_HEAD_DIM:
        return f"head_dim={head_dim} > {MAX_HEAD_DIM}"
    if backend == "gpu":
        # Padding would copy the whole cache per step; Triton needs 2^n loads.
        for name, value in (("head_dim", head_dim), ("page_size", page_size)):
            if value is not None and (value < 16 or value & (value - 1)):
                return f"{name}={value} is not a power of two >= 16 (Triton)"
    if dtype is not None and jnp.dtype(dtype) not in (jnp.dtype(jnp.float32),
                                                      jnp.dtype(jnp.bfloat16)):
        return f"dtype {jnp.dtype(dtype).name} not in (float32, bfloat16)"
    return None
