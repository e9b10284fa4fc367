"""Decompositions of PyTorch's fused transformer inference fast paths.

``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` take a fused "fast
path" in inference (eval + no_grad, batch_first) on CPU, CUDA and PrivateUse1
devices: ``aten._native_multi_head_attention`` and
``aten._transformer_encoder_layer_fwd``. Neither has a lowering nor a
decomposition in PyTorch, so they are written here with the ATen ops the module
would use on its slow path (linear, view, matmul, softmax, layer_norm, gelu/relu),
each of which dispatches back to the device. ``nn.TransformerEncoder``'s packed
(nested tensor) batch is stood for by the padded batch carrying its mask
(:func:`nested_tensor_from_mask`). Masks arrive already merged into
additive float masks (``MultiheadAttention.merge_masks``): ``mask_type`` 1 is a
``[B, S]`` key-padding mask, 0 and 2 broadcast over ``[B, H, L, S]``.
"""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

aten = torch.ops.aten


def _attention(query: Any, key: Any, value: Any, embed_dim: int, num_heads: int, qkv_weight: Any, qkv_bias: Any,
               proj_weight: Any, proj_bias: Any, mask: Any, mask_type: Any) -> tuple:
    b, lq, _ = query.shape
    s = key.shape[1]
    d = embed_dim // num_heads
    wq, wk, wv = qkv_weight.chunk(3)
    bq, bk, bv = qkv_bias.chunk(3) if qkv_bias is not None else (None, None, None)
    q = F.linear(query, wq, bq).view(b, lq, num_heads, d).transpose(1, 2)
    k = F.linear(key, wk, bk).view(b, s, num_heads, d).transpose(1, 2)
    v = F.linear(value, wv, bv).view(b, s, num_heads, d).transpose(1, 2)
    scores = torch.matmul(q, k.transpose(-2, -1)) * (1.0 / math.sqrt(d))
    if mask is not None:
        if mask.dtype == torch.bool:
            mask = torch.zeros(mask.shape, dtype=scores.dtype, device=mask.device).masked_fill(mask, float("-inf"))
        scores = scores + (mask.view(b, 1, 1, s) if mask_type == 1 else mask)
    attn = torch.softmax(scores, dim=-1)
    out = torch.matmul(attn, v).transpose(1, 2).reshape(b, lq, embed_dim)
    return F.linear(out, proj_weight, proj_bias), attn


def native_multi_head_attention(func: Any, args: tuple, kwargs: dict) -> tuple:
    """_native_multi_head_attention(query, key, value, embed_dim, num_head, qkv_weight, qkv_bias, proj_weight,
    proj_bias, mask=None, need_weights=True, average_attn_weights=True, mask_type=None) -> (Tensor, Tensor)"""
    names = ("query", "key", "value", "embed_dim", "num_head", "qkv_weight", "qkv_bias", "proj_weight",
             "proj_bias", "mask", "need_weights", "average_attn_weights", "mask_type")
    a = dict(zip(names, args), **kwargs)
    out, attn = _attention(a["query"], a["key"], a["value"], a["embed_dim"], a["num_head"], a["qkv_weight"],
                           a["qkv_bias"], a["proj_weight"], a["proj_bias"], a.get("mask"), a.get("mask_type"))
    if not a.get("need_weights", True):
        return out, None  # (an undefined tensor, as the CPU kernel returns: None in python)
    return out, (attn.mean(dim=1) if a.get("average_attn_weights", True) else attn)


def transformer_encoder_layer_fwd(func: Any, args: tuple, kwargs: dict) -> Any:
    """_transformer_encoder_layer_fwd(src, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
    use_gelu, norm_first, eps, norm_weight_1, norm_bias_1, norm_weight_2, norm_bias_2, ffn_weight_1, ffn_bias_1,
    ffn_weight_2, ffn_bias_2, mask=None, mask_type=None) -> Tensor"""
    names = ("src", "embed_dim", "num_heads", "qkv_weight", "qkv_bias", "proj_weight", "proj_bias", "use_gelu",
             "norm_first", "eps", "norm_weight_1", "norm_bias_1", "norm_weight_2", "norm_bias_2", "ffn_weight_1",
             "ffn_bias_1", "ffn_weight_2", "ffn_bias_2", "mask", "mask_type")
    a = dict(zip(names, args), **kwargs)
    e = a["embed_dim"]

    def norm(x: Any, i: int) -> Any:
        return F.layer_norm(x, (e,), a[f"norm_weight_{i}"], a[f"norm_bias_{i}"], a["eps"])

    def attend(x: Any) -> Any:
        return _attention(x, x, x, e, a["num_heads"], a["qkv_weight"], a["qkv_bias"], a["proj_weight"],
                          a["proj_bias"], a.get("mask"), a.get("mask_type"))[0]

    def ffn(x: Any) -> Any:
        h = F.linear(x, a["ffn_weight_1"], a["ffn_bias_1"])
        h = F.gelu(h) if a["use_gelu"] else F.relu(h)
        return F.linear(h, a["ffn_weight_2"], a["ffn_bias_2"])

    x = a["src"]
    packed = getattr(x, "_packed_rows", None)  # a batch nested_tensor_from_mask packed: its padded keys are masked
    if packed is not None and a.get("mask") is None:
        a["mask"], a["mask_type"] = ~packed, 1
    if a["norm_first"]:
        x = x + attend(norm(x, 1))
        x = x + ffn(norm(x, 2))
    else:
        x = norm(x + attend(x), 1)
        x = norm(x + ffn(x), 2)
    return x if packed is None else _padded(x, packed)


def nested_tensor_from_mask_left_aligned(func: Any, args: tuple, kwargs: dict) -> bool:
    """_nested_tensor_from_mask_left_aligned(Tensor t, Tensor mask) -> bool

    Whether every row of ``mask`` (``[B, S]``, true where a position holds data) is a run of trues followed by
    falses: ``nn.TransformerEncoder`` (eval, with a padding mask) asks it before packing the batch (a read of the
    device: a sync point in fused eager, as the CPU's answer is read on CUDA)."""
    mask = args[1]
    return bool((mask[:, 1:] <= mask[:, :-1]).all()) if mask.shape[1] > 1 else True


def nested_tensor_from_mask(func: Any, args: tuple, kwargs: dict) -> Any:
    """_nested_tensor_from_mask(Tensor t, Tensor mask, bool mask_check=True) -> Tensor

    The tpu device has no strided nested tensors; ``nn.TransformerEncoder``'s packed batch is stood for by the
    padded one, ``t`` ``[B, S, E]`` with its padded rows zeroed, that carries the mask (``[B, S]``, true where a row
    holds data): the encoder layers' fused op (:func:`transformer_encoder_layer_fwd`) masks those keys and keeps the
    mask on its result, and :func:`to_padded_tensor` gives the encoder's output as the CPU's packed path does
    (zeros at padded positions; the valid ones equal the padded path's).

    Raises:
        RuntimeError: ``mask_check`` and a row of the mask is not left-aligned (as the CPU kernel raises).
    """
    t, mask = args[0], args[1]
    if kwargs.get("mask_check", args[2] if len(args) > 2 else True) and \
            not nested_tensor_from_mask_left_aligned(func, (t, mask), {}):
        raise RuntimeError("Mask tensor must be left-aligned: each row of the mask must be trues followed by falses")
    return _padded(t, mask)


def _padded(t: Any, mask: Any) -> Any:
    """``t`` with the rows ``mask`` leaves out zeroed, carrying ``mask`` (see :func:`nested_tensor_from_mask`)."""
    out = t.masked_fill(~mask.unsqueeze(-1), 0)
    out._packed_rows = mask
    return out


def to_padded_tensor(func: Any, args: tuple, kwargs: dict) -> Any:
    """to_padded_tensor(Tensor self, float padding, SymInt[]? output_size=None) -> Tensor

    The padded form of a batch :func:`nested_tensor_from_mask` packed: ``padding`` at the positions its mask
    leaves out, zero-padded further up to ``output_size``.

    Any other tensor is the dispatcher's op without a kernel (:func:`tpu_runtime.fallback.missing`: an error,
    or the opted-in CPU fallback).
    """
    self = args[0]
    mask = getattr(self, "_packed_rows", None)
    if mask is None:
        from tpu_runtime.fallback import missing

        return missing(func, args, kwargs)
    padding = kwargs.get("padding", args[1] if len(args) > 1 else 0.0)
    size = kwargs.get("output_size", args[2] if len(args) > 2 else None)
    out = self.masked_fill(~mask.unsqueeze(-1), padding)
    if size is not None and tuple(size) != tuple(out.shape):
        out = F.pad(out, [p for d in reversed(range(out.dim())) for p in (0, int(size[d]) - out.shape[d])],
                    value=padding)
    return out


#: Special handlers by op, for the dispatcher.
HANDLERS = {
    aten._nested_tensor_from_mask_left_aligned.default: nested_tensor_from_mask_left_aligned,
    aten._nested_tensor_from_mask.default: nested_tensor_from_mask,
    aten.to_padded_tensor.default: to_padded_tensor,
    aten._native_multi_head_attention.default: native_multi_head_attention,
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
}


def decompositions() -> dict:
    """The fused fast paths as AOTAutograd decompositions (``torch.compile`` of an eval
    ``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` under ``no_grad`` traces them)."""
    ops = (aten._native_multi_head_attention.default, aten._transformer_encoder_layer_fwd.default)
    return {op: (lambda op: lambda *args, **kwargs: HANDLERS[op](op, args, kwargs))(op) for op in ops}
