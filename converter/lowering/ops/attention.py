"""Attention: ``scaled_dot_product_attention`` (preserved composite).

torch.export keeps ``F.scaled_dot_product_attention`` whole. transformers' Llama and
Bert SDPA paths pass a broadcastable ``(B, 1, L, S)`` bool mask and ``scale=`` and
repeat the KV heads themselves (``expand`` + ``view``), so ``enable_gqa`` stays False;
``nn.MultiheadAttention`` decomposes into linear/bmm/softmax instead.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten

_HIGHEST = jax.lax.Precision.HIGHEST


def _unsupported(ctx, reason: str) -> UnsupportedOpError:
    return UnsupportedOpError(str(aten.scaled_dot_product_attention.default), ctx.target, ctx.location, reason=reason)


@lowering(aten.scaled_dot_product_attention.default, composite=True)
def lower_scaled_dot_product_attention_default(ctx, query, key, value, attn_mask=None, dropout_p=0.0,
                                               is_causal=False, *, scale=None, enable_gqa=False):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor

    Composite ``aten.scaled_dot_product_attention`` (Pallas flash-attention kernels and
    exporters take it whole). Body: ``einsum`` q·kᵀ at precision HIGHEST (float32 for
    float16/bfloat16), ``* scale`` (default ``1/sqrt(E)``), the top-left aligned causal
    ``tril`` mask, a bool mask (False → -inf) or additive float mask, a softmax whose
    fully masked rows give 0 (like torch's CPU kernels, not NaN), and ``einsum`` with v.
    ``enable_gqa`` repeats each KV head ``Hq/Hkv`` times (``repeat_interleave``).

    Raises:
        UnsupportedOpError: ``dropout_p > 0`` (attention dropout is random and torch
            applies it even in eval mode; capture with ``dropout_p=0``, as HF models do
            in eval), or ``is_causal`` together with ``attn_mask`` (torch rejects it too).
    """
    if dropout_p > 0:
        raise _unsupported(ctx, f"dropout_p={dropout_p}: attention dropout is not supported; use dropout_p=0 "
                                "(e.g. `dropout_p=self.p if self.training else 0.0`) and export in eval()")
    if is_causal and attn_mask is not None:
        raise _unsupported(ctx, "is_causal=True together with an explicit attn_mask")
    dtype = ctx.out_dtype or query.dtype
    if query.ndim == 4 and key.ndim == 4 and isinstance(query.shape[-1], int):
        # Backend choice (kernels.dispatch): Pallas flash attention on TPU/GPU, this
        # reference body on CPU; option kernels="pallas"|"reference" forces one. The
        # choice and its reason are recorded in kernels.dispatch.choices().
        from kernels import dispatch

        choice = dispatch.choose("flash_attention", force=ctx.options.get("kernels"), head_dim=query.shape[-1],
                                 dtype=query.dtype, dropout_p=dropout_p)
        if choice.impl == "pallas":
            from kernels import flash_attention

            with jax.enable_x64(False):  # the kernels index with int32, as Mosaic/Triton do
                out = flash_attention(query, key, value, mask=attn_mask, causal=is_causal, scale=scale,
                                      interpret=choice.interpret)
            return out.astype(dtype)
    acc = opmath_dtype(dtype)
    q, k, v = query.astype(acc), key.astype(acc), value.astype(acc)
    if enable_gqa and q.ndim >= 3 and k.shape[-3] != q.shape[-3]:
        rep = q.shape[-3] // k.shape[-3]
        k, v = jnp.repeat(k, rep, axis=-3), jnp.repeat(v, rep, axis=-3)
    e = q.shape[-1]
    if scale is None:
        scale = 1.0 / math.sqrt(e) if isinstance(e, int) else 1.0 / jnp.sqrt(jnp.asarray(e, acc))
    s = jnp.einsum("...le,...se->...ls", q, k, precision=_HIGHEST) * jnp.asarray(scale, acc)
    neg = jnp.asarray(-jnp.inf, acc)
    if is_causal:
        L, S = q.shape[-2], k.shape[-2]
        causal = jax.lax.broadcasted_iota(jnp.int32, (L, S), 0) >= jax.lax.broadcasted_iota(jnp.int32, (L, S), 1)
        s = jnp.where(causal, s, neg)
    if attn_mask is not None:
        s = jnp.where(attn_mask, s, neg) if attn_mask.dtype == jnp.bool_ else s + attn_mask.astype(acc)
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros((), acc))
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    p = p / jnp.where(denom == 0, jnp.ones((), acc), denom)
    out = jnp.einsum("...ls,...sv->...lv", p, v, precision=_HIGHEST)
    return out.astype(dtype)
