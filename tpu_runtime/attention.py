"""``F.scaled_dot_product_attention`` on tpu tensors: one fused op, laid out as on the CPU.

torch's SDPA composite picks its backend through a C++ dispatch stub a Python backend cannot register, so
on a PrivateUse1 device it always takes the math decomposition: a dozen ops forward and as many backward,
and a dense output. :func:`sdpa` takes the call at the AutogradPrivateUse1 key instead and, where torch on
the CPU takes its fused kernel, runs ``aten._scaled_dot_product_fused_attention_overrideable`` (the op torch
defines for PrivateUse1 backends: one lowering-table op, and one backward op through its autograd formula;
grouped-query key/value heads are repeated first), whose output is laid out as the query, as the CPU's is
(``q = x.view(B, L, H, E).transpose(1, 2)`` gives an output whose ``.transpose(1, 2).view(B, L, H * E)``
works, as on the CPU; the dense output refused that view).

torch's composite runs as before where the CPU takes its math path (head sizes that differ, a mask that
requires a gradient, a last stride other than 1: a dense output), with dropout, for inputs other than 4-D
``(B, H, L, E)`` (the fused op's meta kernel assumes four dims), a CPU mask, the overrideable backend turned
off (``torch.nn.attention.sdpa_kernel``), and while ``torch.compile`` traces; under ``torch.inference_mode()``
the autograd keys are skipped, so the composite runs there too (a dense output; the same values).
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._prims_common import make_contiguous_strides_for
from torch.nn.attention import SDPBackend
from torch.utils._python_dispatch import _disable_current_modes

from tpu_runtime.memory_format import with_strides
from tpu_runtime.tensor import TpuTensor, dense_strides

aten = torch.ops.aten
_META = torch.device("meta")


def sdpa(query: Any, key: Any, value: Any, attn_mask: Any = None, dropout_p: float = 0.0, is_causal: bool = False,
         scale: float | None = None, enable_gqa: bool = False) -> Any:
    """``aten::scaled_dot_product_attention`` for tpu tensors (registered at the AutogradPrivateUse1 key, above
    torch's composite): the fused overrideable op when it can run the call, else torch's composite (the math
    decomposition). The call is first checked as torch checks it (its composite on meta tensors, once per
    signature), so a bad call raises torch's own error. While ``torch.compile`` traces, the composite runs."""
    tensors = (query, key, value, attn_mask)
    fused = (not dropout_p and (torch._C._get_flash_sdp_enabled() or torch._C._get_overrideable_sdp_enabled())
             and query.dim() == 4 and key.dim() == 4 and value.dim() == 4
             and not any(t is not None and (type(t) is not TpuTensor or t._fake is not None or t.is_nested)
                         for t in tensors)
             and _cpu_flash(query, key, value, attn_mask, enable_gqa))
    if not fused:
        if not torch._C._get_math_sdp_enabled():
            raise RuntimeError("No viable backend for scaled_dot_product_attention was found. This is likely due to "
                               "turning off both the math kernel and the fused kernels.")
        return aten.scaled_dot_product_attention.default.decompose(query, key, value, attn_mask, dropout_p, is_causal,
                                                                   scale=scale, enable_gqa=enable_gqa)
    _check(query, key, value, attn_mask, enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:  # as torch's composite: False → -inf
        attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
    if query.size(1) != key.size(1):  # grouped-query heads: each key/value head serves several query heads
        repeats = query.size(1) // key.size(1)
        key, value = key.repeat_interleave(repeats, dim=1), value.repeat_interleave(repeats, dim=1)
    return aten._scaled_dot_product_fused_attention_overrideable(query, key, value, attn_mask, 0.0, is_causal, False,
                                                                 scale=scale)[0]


def _cpu_flash(query: Any, key: Any, value: Any, attn_mask: Any, enable_gqa: bool) -> bool:
    """Whether torch on the CPU takes its fused kernel for these 4-D inputs, its checks in its order (its output
    then has the query's layout; its math path's is dense): one batch size; one head count, or with
    ``enable_gqa`` key/value heads that divide the query's; a mask that needs no gradient and broadcasts as
    ``(L, S)`` or ``(B, H, L, S)`` (its size(-2) is read first: a 0-d or 1-d mask raises torch's IndexError);
    one head size; non-empty sequences; unit last strides."""
    b, h, n = query.size(0), query.size(1), query.size(2)
    if key.size(0) != b or value.size(0) != b:
        return False
    if not (key.size(1) == value.size(1) == h or (enable_gqa and key.size(1) == value.size(1)
                                                  and h % key.size(1) == 0)):
        return False
    if attn_mask is not None:
        if attn_mask.requires_grad:
            return False
        if attn_mask.size(-2) not in (n, 1) or attn_mask.size(-1) not in (key.size(2), 1):
            return False
        if attn_mask.dim() == 4:
            if attn_mask.size(0) not in (1, b) or attn_mask.size(1) not in (1, h):
                return False
        elif attn_mask.dim() != 2:
            return False
    return (query.size(-1) == key.size(-1) == value.size(-1) and n > 0 and key.size(2) > 0
            and query.stride(-1) == key.stride(-1) == value.stride(-1) == 1)


_CHECKED: set = set()


def _check(query: Any, key: Any, value: Any, attn_mask: Any, enable_gqa: bool) -> None:
    """Raise torch's error for a call its composite refuses (shapes, dtypes), once per signature. (The CPU's fused
    kernel takes ``is_causal`` with a mask, which its math path refuses: the check runs without it.)"""
    sig = tuple((tuple(t.shape), t.dtype) if t is not None else None for t in (query, key, value, attn_mask)) \
        + (enable_gqa,)
    if sig in _CHECKED:
        return
    with _disable_current_modes(), torch._C._DisableTorchDispatch():
        meta = [None if t is None else torch.empty(tuple(t.shape), dtype=t.dtype, device=_META)
                for t in (query, key, value, attn_mask)]
        aten.scaled_dot_product_attention.default.decompose(*meta, 0.0, False, enable_gqa=enable_gqa)
    _CHECKED.add(sig)


def fused_attention(func: Any, args: tuple, kwargs: dict) -> tuple:
    """``aten::_scaled_dot_product_fused_attention_overrideable``: its lowering-table row, the output reporting
    the layout torch's meta kernel gives it (the query's)."""
    from tpu_runtime.execute import run_op

    results = run_op(func, args, kwargs)
    out = results[0]
    strides = _query_layout(args[0], tuple(out.shape))
    if strides == dense_strides(tuple(out.shape)):
        return results
    return (with_strides(out, strides), *results[1:])


def fused_attention_backward(func: Any, args: tuple, kwargs: dict) -> tuple:
    """``aten::_scaled_dot_product_fused_attention_overrideable_backward``: its lowering-table row, each gradient
    laid out as torch's CPU fused kernel lays it out whatever the input's layout: ``(B, L, H, E)`` transposed to
    ``(B, H, L, E)``."""
    from tpu_runtime.execute import run_op

    results = run_op(func, args, kwargs)
    return tuple(_heads_layout(g) for g in results)


def _heads_layout(grad: Any) -> Any:
    """A 4-D ``(B, H, N, E)`` ``grad`` reporting the strides of ``torch.empty(B, N, H, E).transpose(1, 2)``."""
    if type(grad) is not TpuTensor or grad.dim() != 4:
        return grad
    b, h, n, e = grad.shape
    s = make_contiguous_strides_for((b, n, h, e))
    strides = (s[0], s[2], s[1], s[3])
    return grad if strides == dense_strides((b, h, n, e)) else with_strides(grad, strides)


_LAYOUTS: dict = {}


def _query_layout(q: torch.Tensor, shape: tuple) -> tuple:
    """The strides torch's meta kernel gives an attention output of ``shape`` for a query laid out as ``q``."""
    key = (tuple(q.shape), tuple(q.stride()), shape)
    strides = _LAYOUTS.get(key)
    if strides is None:
        with _disable_current_modes(), torch._C._DisableTorchDispatch():
            mq = torch.empty_strided(tuple(q.shape), tuple(q.stride()), dtype=q.dtype, device=_META)
            mv = torch.empty(shape[:-2] + (1, shape[-1]), dtype=q.dtype, device=_META)
            mk = torch.empty(shape[:-2] + (1, q.shape[-1]), dtype=q.dtype, device=_META)
            strides = _LAYOUTS[key] = tuple(aten._scaled_dot_product_fused_attention_overrideable(mq, mk, mv)[0].stride())
    return strides


def _cpu_forward(query: Any, key: Any, value: Any, attn_bias: Any = None, dropout_p: float = 0.0,
                 is_causal: bool = False, return_debug_mask: bool = False, *, scale: float | None = None) -> tuple:
    """The CPU's reference of the fused attention op (debug eager compares with it): torch's CPU flash kernel, its
    output and ``logsumexp``, the op's other outputs left out (nothing to compare them with)."""
    out, lse = aten._scaled_dot_product_flash_attention_for_cpu(query, key, value, dropout_p, is_causal,
                                                                attn_mask=attn_bias, scale=scale)
    return out, lse, None, None, None, None, None, None, None


def _cpu_backward(grad_out: Any, query: Any, key: Any, value: Any, attn_bias: Any, grad_input_mask: list, *rest: Any,
                  scale: float | None = None) -> tuple:
    """The CPU's reference of the fused attention op's backward: the gradients of torch's math path, in CPU ops
    (the CPU flash kernel's own backward rounds a row masked with ``finfo.min`` to 1.0 off; the debug executor runs
    below autograd, so the formula is written out), for the inputs ``grad_input_mask`` asks for."""
    is_causal = rest[7]
    scale = query.size(-1) ** -0.5 if scale is None else scale
    s = query @ key.transpose(-2, -1) * scale
    if is_causal:
        s = s.masked_fill(~torch.ones(s.shape[-2:], dtype=torch.bool).tril(), float("-inf"))
    if attn_bias is not None:
        s = s + attn_bias
    p = aten._safe_softmax(s, -1)  # (the math path's softmax: a fully masked row gives zeros)
    dp = grad_out @ value.transpose(-2, -1)
    ds = p * (dp - (dp * p).sum(-1, keepdim=True))
    grads = (ds @ key * scale, ds.transpose(-2, -1) @ query * scale, p.transpose(-2, -1) @ grad_out,
             None if attn_bias is None else ds.sum_to_size(attn_bias.shape))
    return tuple(g if m else None for g, m in zip(grads, grad_input_mask))


#: PyTorch CPU references of the fused attention ops, which have no CPU kernel (debug eager compares with them).
CPU_REFERENCES = {
    aten._scaled_dot_product_fused_attention_overrideable.default: _cpu_forward,
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: _cpu_backward,
}

#: Special routes of :mod:`tpu_runtime.dispatch`: ``_fused_sdp_choice`` (asked by torch's composite: its math
#: decomposition) and the fused op.
HANDLERS: dict[Any, Callable] = {
    # reached here (below the autograd keys) in inference mode, which skips them
    aten.scaled_dot_product_attention.default: lambda func, args, kwargs: sdpa(*args, **kwargs),
    aten._fused_sdp_choice.default: lambda func, args, kwargs: int(SDPBackend.MATH),
    aten._scaled_dot_product_fused_attention_overrideable.default: fused_attention,
    aten._scaled_dot_product_fused_attention_overrideable_backward.default: fused_attention_backward,
}

__all__ = ["CPU_REFERENCES", "HANDLERS", "sdpa"]
