"""Fused RMS norm in Pallas: one pass per row block forward, one fused backward."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax import lax

from kernels._rows import (RowConfig, from_rows, row_call, row_config, sum_partials, to_rows,
                           to_vector, width_unsupported)
from kernels.rms_norm.reference import default_eps

_F32 = jnp.float32


def _inv_rms(x, cfg: RowConfig):
    # Padded columns are zeros: they add nothing to the sum; divide by the true width.
    return lax.rsqrt(jnp.sum(x * x, axis=1, keepdims=True) / cfg.n + cfg.eps)


def _rms_norm_fwd_kernel(*refs, cfg: RowConfig):
    x_ref, w_ref, y_ref = refs if cfg.has_weight else (refs[0], None, refs[1])
    x = x_ref[...].astype(_F32)
    y = x * _inv_rms(x, cfg)
    if w_ref is not None:
        y = y * w_ref[...].astype(_F32)
    y_ref[...] = y.astype(y_ref.dtype)


def _rms_norm_bwd_kernel(*refs, cfg: RowConfig):
    if cfg.has_weight:
        x_ref, w_ref, dy_ref, dx_ref, dw_ref = refs
    else:
        (x_ref, dy_ref, dx_ref), w_ref, dw_ref = refs, None, None
    x, dy = x_ref[...].astype(_F32), dy_ref[...].astype(_F32)
    r = _inv_rms(x, cfg)
    xhat = x * r
    g = dy if w_ref is None else dy * w_ref[...].astype(_F32)
    dx = r * (g - xhat * (jnp.sum(g * xhat, axis=1, keepdims=True) / cfg.n))
    dx_ref[...] = dx.astype(dx_ref.dtype)
    if dw_ref is not None:
        dw_ref[...] = jnp.sum(dy * xhat, axis=0, keepdims=True)


def _forward(x2, w2, cfg: RowConfig):
    inputs = ["rows"] + (["vector"] if cfg.has_weight else [])
    args = (x2,) + ((w2,) if cfg.has_weight else ())
    return row_call(functools.partial(_rms_norm_fwd_kernel, cfg=cfg), cfg, inputs=inputs,
                    outputs=[("rows", x2.dtype)], name="rms_norm_fwd")(*args)[0]


@functools.partial(jax.custom_vjp, nondiff_argnums=(2,))
def _rms_norm(x2, w2, cfg: RowConfig):
    return _forward(x2, w2, cfg)


def _rms_norm_fwd(x2, w2, cfg: RowConfig):
    return _forward(x2, w2, cfg), (x2, w2)


def _rms_norm_bwd(cfg: RowConfig, residuals, dy):
    x2, w2 = residuals
    inputs = ["rows"] + (["vector"] if cfg.has_weight else []) + ["rows"]
    outputs = [("rows", x2.dtype)] + ([("partial", _F32)] if cfg.has_weight else [])
    args = (x2,) + ((w2,) if cfg.has_weight else ()) + (dy,)
    grads = row_call(functools.partial(_rms_norm_bwd_kernel, cfg=cfg), cfg, inputs=inputs,
                     outputs=outputs, name="rms_norm_bwd")(*args)
    if not cfg.has_weight:
        return grads[0], None
    return grads[0], sum_partials(grads[1], w2)


_rms_norm.defvjp(_rms_norm_fwd, _rms_norm_bwd)


def rms_norm(x: jax.Array, weight: jax.Array | None = None, *, eps: float | None = None,
             block_rows: int | None = None, interpret: bool = False) -> jax.Array:
    """RMS norm over the last dim as a fused Pallas kernel (forward and backward).

    Computes ``x / sqrt(mean(x**2, -1) + eps) * weight`` in fp32 per row block;
    the backward pass (``jax.custom_vjp``) is one fused kernel giving dx and
    per-block partial sums of dweight.
    A torch ``normalized_shape`` of several trailing dims maps to this by
    flattening them (and the parameters) into one.

    Args:
        x: [..., N] input (float32, bfloat16 or float16).
        weight: optional [N] scale.
        eps: added to the mean square; ``finfo(x.dtype).eps`` when None (torch).
        block_rows: rows per program (static); per-platform default sized so
            a block stays within on-chip memory.
        interpret: run in Pallas interpret mode (any backend).

    Returns:
        Array of ``x``'s shape and dtype.

    Raises:
        ValueError: a 0-d input, bad ``block_rows`` or weight shape.
        kernels._common.PallasUnavailableError: ``interpret=False`` on CPU.
    """
    eps = default_eps(x.dtype) if eps is None else eps
    cfg = row_config(x, eps=eps, block_rows=block_rows, interpret=interpret,
                     has_weight=weight is not None)
    w2 = None if weight is None else to_vector(weight, cfg)
    if x.size == 0:
        return jnp.asarray(x)  # an empty batch or an empty last dim: nothing to normalize
    y2 = _rms_norm(to_rows(x, cfg), w2, cfg)
    return from_rows(y2, cfg, x.shape)


def unsupported_reason(*, backend: str, hidden: int | None = None, dtype=None) -> str | None:
    """Why the Pallas RMS norm cannot take a configuration, or None if it can.

    Args:
        backend: "tpu", "gpu" or "cpu".
        hidden: the normalized (last) dim N.
        dtype: input dtype.

    Returns:
        A one-line reason, or None.
    """
    return width_unsupported(backend, hidden, dtype)
