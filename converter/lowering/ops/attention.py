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
from converter.lowering.helpers import kernel_choice, opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten

_HIGHEST = jax.lax.Precision.HIGHEST


def _unsupported(ctx, reason: str) -> UnsupportedOpError:
    return UnsupportedOpError(str(aten.scaled_dot_product_attention.default), ctx.target, ctx.location, reason=reason)


def _deterministic(args: dict) -> bool:
    return not args.get("dropout_p")


@lowering(aten.scaled_dot_product_attention.default, composite=_deterministic)
def lower_scaled_dot_product_attention_default(ctx, query, key, value, attn_mask=None, dropout_p=0.0,
                                               is_causal=False, *, scale=None, enable_gqa=False):
    """scaled_dot_product_attention(Tensor query, Tensor key, Tensor value, Tensor? attn_mask=None, float dropout_p=0., bool is_causal=False, *, float? scale=None, bool enable_gqa=False) -> Tensor

    Composite ``aten.scaled_dot_product_attention`` (Pallas flash-attention kernels and
    exporters take it whole; inline when ``dropout_p > 0``). Body: ``einsum`` q·kᵀ at precision HIGHEST (float32 for
    float16/bfloat16), ``* scale`` (default ``1/sqrt(E)``), the top-left aligned causal
    ``tril`` mask, a bool mask (False → -inf) or additive float mask, a softmax whose
    fully masked rows give 0 (like torch's CPU kernels, not NaN), and ``einsum`` with v.
    ``enable_gqa`` repeats each KV head ``Hq/Hkv`` times (``repeat_interleave``).
    ``dropout_p > 0`` drops attention weights with a key from ``ctx.next_key()`` (torch
    applies it even in eval mode; values differ from torch's RNG like every random op,
    the statistics match) and makes ``kernels.dispatch`` record the reference with the
    reason: the Pallas kernel has no dropout.

    Raises:
        UnsupportedOpError: ``is_causal`` together with ``attn_mask`` (torch rejects it too).
    """
    if is_causal and attn_mask is not None:
        raise _unsupported(ctx, "is_causal=True together with an explicit attn_mask")
    dtype = ctx.out_dtype or query.dtype
    # Backend choice (kernels.dispatch): Pallas flash attention on TPU/GPU, this
    # reference body on CPU; option kernels="pallas"|"reference" forces one. The
    # choice and its reason are recorded in kernels.dispatch.choices().
    static = query.ndim == 4 and key.ndim == 4 and all(isinstance(d, int) for d in query.shape + key.shape)
    choice = kernel_choice(ctx, "flash_attention", static=static,
                           why_not_static="not 4-D [B, H, L, E] with static shapes: reference body",
                           head_dim=query.shape[-1], dtype=query.dtype, dropout_p=dropout_p)
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
    p = _weights(q, k, attn_mask, is_causal, scale)
    if dropout_p > 0:  # torch drops attention weights whenever dropout_p > 0, even in eval()
        keep = jax.random.bernoulli(ctx.next_key(), 1.0 - dropout_p, p.shape) if dropout_p < 1 else False
        p = jnp.where(keep, p / jnp.asarray(max(1.0 - dropout_p, 1e-30), acc), jnp.zeros((), acc))
    out = jnp.einsum("...ls,...sv->...lv", p, v, precision=_HIGHEST)
    return out.astype(dtype)


def _weights(q, k, attn_mask, is_causal, scale):
    """The attention weights ``softmax(q·kᵀ * scale + mask)`` in ``q``'s dtype (fully masked rows give 0)."""
    return _softmax(_scores(q, k, attn_mask, is_causal, scale))


def _softmax(s):
    """``softmax(s)`` over the last axis, the row's maximum subtracted first (fully masked rows give 0). Not
    ``exp(s - logsumexp(s))``: in a row masked with a large finite number (``finfo.min``, as Hugging Face
    masks) ``max + log(n)`` rounds back to ``max``, and every weight would come out 1."""
    return _softmax_lse(s)[0]


def _softmax_lse(s):
    """:func:`_softmax` of ``s`` and each row's ``logsumexp`` as PyTorch's CPU flash kernel gives it: ``max +
    log(sum)``, a fully masked row's maximum taken as 0 and its sum as 1 (so its logsumexp is 0, not ``-inf``)."""
    if s.shape[-1] == 0:  # no keys: no weights (the output is a sum over none: zeros, as torch gives)
        return s, jnp.zeros(s.shape[:-1], s.dtype)
    acc = s.dtype
    m = jnp.max(s, axis=-1, keepdims=True)
    m = jnp.where(jnp.isfinite(m), m, jnp.zeros((), acc))
    p = jnp.exp(s - m)
    denom = jnp.sum(p, axis=-1, keepdims=True)
    denom = jnp.where(denom == 0, jnp.ones((), acc), denom)
    return p / denom, (m + jnp.log(denom))[..., 0]


def _scores(q, k, attn_mask, is_causal, scale):
    """``q·kᵀ * scale`` with the causal mask and ``attn_mask`` applied (a bool mask: False → -inf; a float
    one added), in ``q``'s dtype."""
    acc = q.dtype
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
    return s


@lowering(aten._scaled_dot_product_flash_attention_for_cpu_backward.default)
def lower__scaled_dot_product_flash_attention_for_cpu_backward_default(ctx, grad_out, query, key, value, out,
                                                                       logsumexp, dropout_p, is_causal, *,
                                                                       attn_mask=None, scale=None):
    """_scaled_dot_product_flash_attention_for_cpu_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor out, Tensor logsumexp, float dropout_p, bool is_causal, *, Tensor? attn_mask=None, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value)

    The gradient of PyTorch's CPU attention kernel, which AOTAutograd records when ``torch.compile``
    trains ``F.scaled_dot_product_attention`` on CPU tensors (its forward is decomposed). ``jax.vjp`` of
    the reference attention (the weights recomputed, in float32 for float16/bfloat16).

    Raises:
        UnsupportedOpError: ``dropout_p > 0`` (the forward's dropout mask is not an input).
    """  # noqa: E501 (the first line is the exact schema)
    if dropout_p:
        raise UnsupportedOpError(str(aten._scaled_dot_product_flash_attention_for_cpu_backward.default), ctx.target,
                                 ctx.location, reason="dropout_p > 0: the forward's dropout mask is not an input")
    acc = opmath_dtype(query.dtype)

    def attend(q, k, v):
        return jnp.einsum("...ls,...sv->...lv", _weights(q, k, attn_mask, is_causal, scale), v, precision=_HIGHEST)

    _, vjp = jax.vjp(attend, query.astype(acc), key.astype(acc), value.astype(acc))
    gq, gk, gv = vjp(grad_out.astype(acc))
    return gq.astype(query.dtype), gk.astype(key.dtype), gv.astype(value.dtype)


def _fused_unsupported(op, ctx, reason: str) -> UnsupportedOpError:
    return UnsupportedOpError(str(op), ctx.target, ctx.location, reason=reason)


@lowering(aten._scaled_dot_product_fused_attention_overrideable.default)
def lower__scaled_dot_product_fused_attention_overrideable_default(ctx, query, key, value, attn_bias=None,
                                                                   dropout_p=0.0, is_causal=False,
                                                                   return_debug_mask=False, *, scale=None):
    """_scaled_dot_product_fused_attention_overrideable(Tensor query, Tensor key, Tensor value, Tensor? attn_bias=None, float dropout_p=0.0, bool is_causal=False, bool return_debug_mask=False, *, float? scale=None) -> (Tensor output, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, Tensor philox_seed, Tensor philox_offset, Tensor debug_attn_mask)

    The attention kernel PyTorch calls for a PrivateUse1 device whose ``_fused_sdp_choice`` picks the
    overrideable backend (the tpu runtime does for ``F.scaled_dot_product_attention`` without dropout): one
    op instead of the math decomposition's matmuls and softmax, and an output laid out as the query (as
    torch's CPU flash kernel). The reference attention (fully masked rows give 0) and the float32
    ``logsumexp`` of each query row as that kernel gives it (0 for a fully masked row); the philox seed and
    offset are zeros (no dropout).

    Raises:
        UnsupportedOpError: ``dropout_p > 0`` (the backward could not replay the mask).
    """  # noqa: E501 (the first line is the exact schema)
    op = aten._scaled_dot_product_fused_attention_overrideable.default
    if dropout_p:
        raise _fused_unsupported(op, ctx, "dropout_p > 0: its backward could not replay the dropout mask")
    dtype = query.dtype
    acc = opmath_dtype(dtype)
    s = _scores(query.astype(acc), key.astype(acc), attn_bias, is_causal, scale)
    p, lse = _softmax_lse(s)
    out = jnp.einsum("...ls,...sv->...lv", p.astype(acc), value.astype(acc), precision=_HIGHEST)
    if lse.ndim == 2:  # a 3-D (H, L, E) query: the logsumexp has a batch of one
        lse = lse[None]
    zero = jnp.zeros((), jnp.int64)
    return (out.astype(dtype), lse.astype(jnp.float32), None, None, query.shape[-2], key.shape[-2], zero, zero,
            None)


@lowering(aten._scaled_dot_product_fused_attention_overrideable_backward.default)
def lower__scaled_dot_product_fused_attention_overrideable_backward_default(
        ctx, grad_out, query, key, value, attn_bias, grad_input_mask, out, logsumexp, cum_seq_q, cum_seq_k, max_q,
        max_k, dropout_p, is_causal, philox_seed, philox_offset, *, scale=None):
    """_scaled_dot_product_fused_attention_overrideable_backward(Tensor grad_out, Tensor query, Tensor key, Tensor value, Tensor attn_bias, bool[4] grad_input_mask, Tensor out, Tensor logsumexp, Tensor cum_seq_q, Tensor cum_seq_k, SymInt max_q, SymInt max_k, float dropout_p, bool is_causal, Tensor philox_seed, Tensor philox_offset, *, float? scale=None) -> (Tensor grad_query, Tensor grad_key, Tensor grad_value, Tensor grad_attn_bias)

    ``jax.vjp`` of the forward's reference attention (the weights recomputed, in float32 for
    float16/bfloat16) with respect to query, key, value and the additive bias (its gradient summed
    over the dimensions it was broadcast along).

    Raises:
        UnsupportedOpError: ``dropout_p > 0``.
    """  # noqa: E501 (the first line is the exact schema)
    if dropout_p:
        raise _fused_unsupported(aten._scaled_dot_product_fused_attention_overrideable_backward.default, ctx,
                                 "dropout_p > 0: the forward's dropout mask is not an input")
    acc = opmath_dtype(query.dtype)

    def attend(q, k, v, bias):
        return jnp.einsum("...ls,...sv->...lv", _weights(q, k, bias, is_causal, scale), v, precision=_HIGHEST)

    bias = None if attn_bias is None else attn_bias.astype(acc)
    _, vjp = jax.vjp(attend, query.astype(acc), key.astype(acc), value.astype(acc), bias)
    gq, gk, gv, gb = vjp(grad_out.astype(acc))
    gb = None if attn_bias is None else gb.astype(attn_bias.dtype)
    return gq.astype(query.dtype), gk.astype(key.dtype), gv.astype(value.dtype), gb
