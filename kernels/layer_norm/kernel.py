"""Fused layer norm in Pallas: one pass per row block forward, one fused backward."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from kernels._rows import (RowConfig, column_mask, from_rows, row_call, row_config, sum_partials,
                           to_rows, to_vector, width_unsupported)

_F32 = jnp.float32


def _normalize(x, cfg: RowConfig):
    """(x - mean) * rstd and rstd, with padded columns held at 0."""
    centered = x - jnp.sum(x, axis=1, keepdims=True) / cfg.n
    keep = column_mask(x.shape, cfg)
    if keep is not None:
        centered = jnp.where(keep, centered, 0.0)
    rstd = lax.rsqrt(jnp.sum(centered * centered, axis=1, keepdims=True) / cfg.n + cfg.eps)
    return centered * rstd, rstd


def _unpack(refs, cfg: RowConfig, n_lead: int):
    """Splits refs into (lead..., weight|None, bias|None, rest...)."""
    refs = list(refs)
    lead, refs = refs[:n_lead], refs[n_lead:]
    w = refs.pop(0) if cfg.has_weight else None
    b = refs.pop(0) if cfg.has_bias else None
    return (*lead, w, b, *refs)


def _layer_norm_fwd_kernel(*refs, cfg: RowConfig):
    x_ref, w_ref, b_ref, y_ref = _unpack(refs, cfg, 1)
    y, _ = _normalize(x_ref[...].astype(_F32), cfg)
    if w_ref is not None:
        y = y * w_ref[...].astype(_F32)
    if b_ref is not None:
        y = y + b_ref[...].astype(_F32)
    y_ref[...] = y.astype(y_ref.dtype)


def _layer_norm_bwd_kernel(*refs, cfg: RowConfig):
    x_ref, w_ref, b_ref, dy_ref, dx_ref, *param_refs = _unpack(refs, cfg, 1)
    del b_ref  # the bias does not enter dx
    xhat, rstd = _normalize(x_ref[...].astype(_F32), cfg)
    dy = dy_ref[...].astype(_F32)
    g = dy if w_ref is None else dy * w_ref[...].astype(_F32)
    mean_g = jnp.sum(g, axis=1, keepdims=True) / cfg.n
    mean_gx = jnp.sum(g * xhat, axis=1, keepdims=True) / cfg.n
    dx_ref[...] = (rstd * (g - mean_g - xhat * mean_gx)).astype(dx_ref.dtype)
    if cfg.has_weight:
        param_refs.pop(0)[...] = jnp.sum(dy * xhat, axis=0, keepdims=True)
    if cfg.has_bias:
        param_refs.pop(0)[...] = jnp.sum(dy, axis=0, keepdims=True)


def _params(cfg: RowConfig, w2, b2):
    args = ((w2,) if cfg.has_weight else ()) + ((b2,) if cfg.has_bias else ())
    return args, ["vector"] * len(args)


def _forward(x2, w2, b2, cfg: RowConfig):
    args, kinds = _params(cfg, w2, b2)
    return row_call(functools.partial(_layer_norm_fwd_kernel, cfg=cfg), cfg,
                    inputs=["rows", *kinds], outputs=[("rows", x2.dtype)],
                    name="layer_norm_fwd")(x2, *args)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(3,))
def _layer_norm(x2, w2, b2, cfg: RowConfig):
    return _forward(x2, w2, b2, cfg)


def _layer_norm_fwd(x2, w2, b2, cfg: RowConfig):
    return _forward(x2, w2, b2, cfg), (x2, w2, b2)


def _layer_norm_bwd(cfg: RowConfig, residuals, dy):
    x2, w2, b2 = residuals
    args, kinds = _params(cfg, w2, b2)
    outputs = [("rows", x2.dtype)] + [("partial", _F32)] * len(args)
    dx, *partials = row_call(functools.partial(_layer_norm_bwd_kernel, cfg=cfg), cfg,
                             inputs=["rows", *kinds, "rows"], outputs=outputs,
                             name="layer_norm_bwd")(x2, *args, dy)
    dw = sum_partials(partials.pop(0), w2) if cfg.has_weight else None
    db = sum_partials(partials.pop(0), b2) if cfg.has_bias else None
    return dx, dw, db


_layer_norm.defvjp(_layer_norm_fwd, _layer_norm_bwd)


def layer_norm(x: jax.Array, weight: jax.Array | None = None, bias: jax.Array | None = None, *,
               eps: float = 1e-5, block_rows: int | None = None,
               interpret: bool = False) -> jax.Array:
    """Layer norm over the last dim as a fused Pallas kernel (forward and backward).

    Computes ``(x - mean) / sqrt(var + eps) * weight + bias`` (biased variance,
    as torch) in fp32 per row block; the backward pass (``jax.custom_vjp``) is
    one fused kernel giving dx and per-block partial sums of dweight / dbias.
    A torch ``normalized_shape`` of several trailing dims maps to this by
    flattening them (and the parameters) into one.

    Args:
        x: [..., N] input (float32, bfloat16 or float16).
        weight: optional [N] scale.
        bias: optional [N] shift.
        eps: added to the variance (torch's default 1e-5).
        block_rows: rows per program (static); per-platform default sized so
            a block stays within on-chip memory.
        interpret: run in Pallas interpret mode (any backend).

    Returns:
        Array of ``x``'s shape and dtype.

    Raises:
        ValueError: a 0-d input, bad ``block_rows`` or parameter shape.
        kernels._common.PallasUnavailableError: ``interpret=False`` on CPU.
    """
    cfg = row_config(x, eps=eps, block_rows=block_rows, interpret=interpret,
                     has_weight=weight is not None, has_bias=bias is not None)
    w2 = None if weight is None else to_vector(weight, cfg)
    b2 = None if bias is None else to_vector(bias, cfg)
    if x.size == 0:
        return jnp.asarray(x)  # an empty batch or an empty last dim: nothing to normalize
    return from_rows(_layer_norm(to_rows(x, cfg), w2, b2, cfg), cfg, x.shape)


def unsupported_reason(*, backend: str, hidden: int | None = None, dtype=None) -> str | None:
    """Why the Pallas layer norm cannot take a configuration, or None if it can.

    Args:
        backend: "tpu", "gpu" or "cpu".
        hidden: the normalized (last) dim N.
        dtype: input dtype.

    Returns:
        A one-line reason, or None.
    """
    return width_unsupported(backend, hidden, dtype)
