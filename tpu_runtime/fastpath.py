"""Decompositions of PyTorch's fused transformer inference fast paths.

``nn.MultiheadAttention`` and ``nn.TransformerEncoderLayer`` take a fused "fast
path" in inference (eval + no_grad, batch_first) on CPU, CUDA and PrivateUse1
devices: ``aten._native_multi_head_attention`` and
``aten._transformer_encoder_layer_fwd``. Neither has a lowering nor a
decomposition in PyTorch, so they are written here with the ATen ops the module
would use on its slow path (linear, view, matmul, softmax, layer_norm, gelu/relu),
each of which dispatches back to the device. Masks arrive already merged into
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
    if a["norm_first"]:
        x = x + attend(norm(x, 1))
        return x + ffn(norm(x, 2))
    x = norm(x + attend(x), 1)
    return norm(x + ffn(x), 2)


def nested_tensor_from_mask_left_aligned(func: Any, args: tuple, kwargs: dict) -> bool:
    """_nested_tensor_from_mask_left_aligned(Tensor t, Tensor mask) -> bool: ``False``.

    ``nn.TransformerEncoder`` (eval, with a padding mask) asks whether it may pack the batch
    into a nested tensor; the tpu device has no nested tensors, so the answer is no and the
    encoder runs its padded path: PyTorch's own path in training mode or with
    ``enable_nested_tensor=False`` (valid positions equal the nested path's; padded positions
    hold the padded path's values where the nested path would give zeros).
    """
    return False


#: Special handlers by op, for the dispatcher.
HANDLERS = {
    aten._nested_tensor_from_mask_left_aligned.default: nested_tensor_from_mask_left_aligned,
    aten._native_multi_head_attention.default: native_multi_head_attention,
    aten._transformer_encoder_layer_fwd.default: transformer_encoder_layer_fwd,
}


def decompositions() -> dict:
    """The fused fast paths as AOTAutograd decompositions (``torch.compile`` of an eval
    ``nn.TransformerEncoderLayer`` / ``nn.MultiheadAttention`` under ``no_grad`` traces them)."""
    ops = (aten._native_multi_head_attention.default, aten._transformer_encoder_layer_fwd.default)
    return {op: (lambda op: lambda *args, **kwargs: HANDLERS[op](op, args, kwargs))(op) for op in ops}
