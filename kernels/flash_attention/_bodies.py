"""Flash-attention kernel bodies and the block math they share (see kernel.py).

Row statistics are [rows, 1] columns; lse/delta rows are stored ``lanes`` wide
(128 on TPU, the lane tile; 1 elsewhere) and read back as ``[:, :1]``.
"""

from __future__ import annotations

import dataclasses

import jax.numpy as jnp
from jax import lax
from jax.experimental import pallas as pl

from kernels._common import iota2, matmul
from kernels._softmax import (NEG_INF, online_softmax_finalize, online_softmax_init,
                              online_softmax_update)

_F32 = jnp.float32


@dataclasses.dataclass(frozen=True)
class Config:
    """Everything static about one call; hashable so it can be a nondiff arg."""

    scale: float
    causal: bool
    block_q: int
    block_k: int
    len_q: int  # true (unpadded) lengths
    len_k: int
    groups: int  # query heads per key/value head
    schedule: str
    platform: str
    lanes: int  # trailing width of the lse/delta rows (TPU lane tile, else 1)
    bias_bcast: tuple[bool, bool, bool, bool] | None  # size-1 dims of the bias; None = no bias
    num_warps: int

    @property
    def has_bias(self) -> bool:
        return self.bias_bcast is not None

    @property
    def interpret(self) -> bool:
        return self.platform == "interpret"


# --------------------------------------------------------------------------- block math


def _logits(q, k, bias, cfg: Config, q_start, k_start):
    """Scaled, biased, masked logits of one [bq, bk] block, fp32, -inf where dropped."""
    s = matmul(q, k, trans_b=True) * cfg.scale
    if bias is not None:
        s = s + bias.astype(_F32)
    pad_keys = cfg.len_k % cfg.block_k != 0
    if cfg.causal or pad_keys:
        cols = iota2(s.shape, 1, k_start)
        keep = cols < cfg.len_k if pad_keys else None
        if cfg.causal:
            tril = cols <= iota2(s.shape, 0, q_start)
            keep = tril if keep is None else keep & tril
        s = jnp.where(keep, s, NEG_INF)
    return s


def _bwd_block(q, k, v, bias, do, lse, delta, cfg, q_start, k_start):
    """Recomputed probabilities and dS of one block (dS unscaled), both fp32.

    dK/dV contract them over query rows as ``p.T @ dO``: transposing the fp32
    block before the cast is the form Mosaic handles best.
    """
    p = jnp.exp(_logits(q, k, bias, cfg, q_start, k_start) - lse)
    ds = p * (matmul(do, v, trans_b=True) - delta)
    return p, ds


def _num_kv_blocks(q_start, cfg: Config, nk: int):
    """Key blocks a query block reads: all, or (causal) up to its last row."""
    if not cfg.causal:
        return nk
    return jnp.minimum(nk, lax.div(q_start + cfg.block_q - 1, cfg.block_k) + 1)


def _with_bias(refs, cfg: Config, position: int):
    refs = list(refs)
    if not cfg.has_bias:
        refs.insert(position, None)
    return refs


def _lanes(x, ref):
    return jnp.broadcast_to(x, ref.shape)


# --------------------------------------------------------------------------- "loop" kernels


def fwd_loop_kernel(*refs, cfg: Config):
    q_ref, k_ref, v_ref, bias_ref, o_ref, lse_ref = _with_bias(refs, cfg, 3)
    bq, bk = cfg.block_q, cfg.block_k
    q_start = pl.program_id(2) * bq
    q = q_ref[...]

    def body(j, carry):
        k_start = pl.multiple_of(j * bk, bk)
        cols = pl.ds(k_start, bk)
        bias = None
        if bias_ref is not None:
            bias = bias_ref[...] if cfg.bias_bcast[3] else bias_ref[:, cols]
        s = _logits(q, k_ref[cols, :], bias, cfg, q_start, k_start)
        return online_softmax_update(carry, s, v_ref[cols, :])

    init = online_softmax_init(bq, q.shape[-1])
    nk = k_ref.shape[0] // bk
    carry = lax.fori_loop(0, _num_kv_blocks(q_start, cfg, nk), body, init)
    out, lse = online_softmax_finalize(*carry)
    o_ref[...] = out.astype(o_ref.dtype)
    lse_ref[...] = _lanes(lse, lse_ref)


def dq_loop_kernel(*refs, cfg: Config):
    q_ref, k_ref, v_ref, bias_ref, do_ref, lse_ref, delta_ref, dq_ref = _with_bias(refs, cfg, 3)
    bq, bk = cfg.block_q, cfg.block_k
    q_start = pl.program_id(2) * bq
    q, do = q_ref[...], do_ref[...]
    lse, delta = lse_ref[:, :1], delta_ref[:, :1]

    def body(j, dq):
        k_start = pl.multiple_of(j * bk, bk)
        cols = pl.ds(k_start, bk)
        bias = None
        if bias_ref is not None:
            bias = bias_ref[...] if cfg.bias_bcast[3] else bias_ref[:, cols]
        k = k_ref[cols, :]
        _, ds = _bwd_block(q, k, v_ref[cols, :], bias, do, lse, delta, cfg, q_start, k_start)
        return dq + matmul(ds.astype(k.dtype), k)

    nk = k_ref.shape[0] // bk
    dq = lax.fori_loop(0, _num_kv_blocks(q_start, cfg, nk), body, jnp.zeros(q.shape, _F32))
    dq_ref[...] = (dq * cfg.scale).astype(dq_ref.dtype)


def dkdv_loop_kernel(*refs, cfg: Config):
    q_ref, k_ref, v_ref, bias_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref = _with_bias(
        refs, cfg, 3)
    bq, bk = cfg.block_q, cfg.block_k
    k_start = pl.program_id(2) * bk
    k, v = k_ref[...], v_ref[...]
    nq = q_ref.shape[1] // bq
    # Causal: query rows before k_start see none of this key block.
    first = lax.div(k_start, bq) if cfg.causal else 0

    def head(g, carry):
        def body(i, carry):
            dk, dv = carry
            q_start = pl.multiple_of(i * bq, bq)
            rows = pl.ds(q_start, bq)
            q, do = q_ref[g, rows, :], do_ref[g, rows, :]
            bias = None
            if bias_ref is not None:
                bias = bias_ref[0 if cfg.bias_bcast[1] else g,
                                slice(None) if cfg.bias_bcast[2] else rows, :]
            p, ds = _bwd_block(q, k, v, bias, do, lse_ref[g, rows, :1], delta_ref[g, rows, :1],
                               cfg, q_start, k_start)
            dv = dv + matmul(p.T.astype(do.dtype), do)
            dk = dk + matmul(ds.T.astype(q.dtype), q)
            return dk, dv

        return lax.fori_loop(first, nq, body, carry)

    zeros = jnp.zeros(k.shape, _F32)
    dk, dv = lax.fori_loop(0, cfg.groups, head, (zeros, zeros))
    dk_ref[...] = (dk * cfg.scale).astype(dk_ref.dtype)
    dv_ref[...] = dv.astype(dv_ref.dtype)


# --------------------------------------------------------------------------- "grid" kernels


def _when_needed(cfg: Config, q_start, k_start):
    """Runs the decorated block step only if (causal) the block has a kept entry."""
    if not cfg.causal:
        return lambda f: f()
    return pl.when(k_start <= q_start + cfg.block_q - 1)


def fwd_grid_kernel(*refs, cfg: Config):
    q_ref, k_ref, v_ref, bias_ref, o_ref, lse_ref, m_sc, l_sc, acc_sc = _with_bias(refs, cfg, 3)
    j = pl.program_id(3)
    q_start, k_start = pl.program_id(2) * cfg.block_q, j * cfg.block_k

    @pl.when(j == 0)
    def _init():
        m_sc[...] = jnp.full(m_sc.shape, NEG_INF, _F32)
        l_sc[...] = jnp.zeros(l_sc.shape, _F32)
        acc_sc[...] = jnp.zeros(acc_sc.shape, _F32)

    @_when_needed(cfg, q_start, k_start)
    def _step():
        bias = None if bias_ref is None else bias_ref[...]
        s = _logits(q_ref[...], k_ref[...], bias, cfg, q_start, k_start)
        m, l, acc = online_softmax_update((m_sc[:, :1], l_sc[:, :1], acc_sc[...]), s, v_ref[...])
        m_sc[...] = _lanes(m, m_sc)
        l_sc[...] = _lanes(l, l_sc)
        acc_sc[...] = acc

    @pl.when(j == pl.num_programs(3) - 1)
    def _done():
        out, lse = online_softmax_finalize(m_sc[:, :1], l_sc[:, :1], acc_sc[...])
        o_ref[...] = out.astype(o_ref.dtype)
        lse_ref[...] = _lanes(lse, lse_ref)


def dq_grid_kernel(*refs, cfg: Config):
    (q_ref, k_ref, v_ref, bias_ref, do_ref, lse_ref, delta_ref, dq_ref,
     dq_sc) = _with_bias(refs, cfg, 3)
    j = pl.program_id(3)
    q_start, k_start = pl.program_id(2) * cfg.block_q, j * cfg.block_k

    @pl.when(j == 0)
    def _init():
        dq_sc[...] = jnp.zeros(dq_sc.shape, _F32)

    @_when_needed(cfg, q_start, k_start)
    def _step():
        bias = None if bias_ref is None else bias_ref[...]
        k = k_ref[...]
        _, ds = _bwd_block(q_ref[...], k, v_ref[...], bias, do_ref[...], lse_ref[:, :1],
                           delta_ref[:, :1], cfg, q_start, k_start)
        dq_sc[...] += matmul(ds.astype(k.dtype), k)

    @pl.when(j == pl.num_programs(3) - 1)
    def _done():
        dq_ref[...] = (dq_sc[...] * cfg.scale).astype(dq_ref.dtype)


def dkdv_grid_kernel(*refs, cfg: Config):
    (q_ref, k_ref, v_ref, bias_ref, do_ref, lse_ref, delta_ref, dk_ref, dv_ref, dk_sc,
     dv_sc) = _with_bias(refs, cfg, 3)
    g, i = pl.program_id(3), pl.program_id(4)
    q_start, k_start = i * cfg.block_q, pl.program_id(2) * cfg.block_k

    @pl.when((g == 0) & (i == 0))
    def _init():
        dk_sc[...] = jnp.zeros(dk_sc.shape, _F32)
        dv_sc[...] = jnp.zeros(dv_sc.shape, _F32)

    @_when_needed(cfg, q_start, k_start)
    def _step():
        bias = None if bias_ref is None else bias_ref[...]
        q, do = q_ref[...], do_ref[...]
        p, ds = _bwd_block(q, k_ref[...], v_ref[...], bias, do, lse_ref[:, :1],
                           delta_ref[:, :1], cfg, q_start, k_start)
        dv_sc[...] += matmul(p.T.astype(do.dtype), do)
        dk_sc[...] += matmul(ds.T.astype(q.dtype), q)

    @pl.when((g == pl.num_programs(3) - 1) & (i == pl.num_programs(4) - 1))
    def _done():
        dk_ref[...] = (dk_sc[...] * cfg.scale).astype(dk_ref.dtype)
        dv_ref[...] = dv_sc[...].astype(dv_ref.dtype)
