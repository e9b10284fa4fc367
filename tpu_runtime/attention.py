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
off (``torch.nn.attention.sdpa_kernel``), and while ``torch.compile`` traces.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
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
    if (dropout_p or not torch._C._get_overrideable_sdp_enabled() or query.dim() != 4 or key.dim() != 4
            or value.dim() != 4
            or any(t is not None and (type(t) is not TpuTensor or t._fake is not None or t.is_nested) for t in tensors)
            or not _cpu_flash(query, key, value, attn_mask)):
        return aten.scaled_dot_product_attention.default.decompose(query, key, value, attn_mask, dropout_p, is_causal,
                                                                   scale=scale, enable_gqa=enable_gqa)
    _check(query, key, value, attn_mask, is_causal, enable_gqa)
    if attn_mask is not None and attn_mask.dtype == torch.bool:  # as torch's composite: False → -inf
        attn_mask = torch.where(attn_mask, 0.0, float("-inf")).to(query.dtype)
    if enable_gqa and query.size(-3) != key.size(-3):  # each key/value head serves query.size(-3) // heads queries
        repeats = query.size(-3) // key.size(-3)
        key, value = key.repeat_interleave(repeats, dim=-3), value.repeat_interleave(repeats, dim=-3)
    return aten._scaled_dot_product_fused_attention_overrideable(query, key, value, attn_mask, 0.0, is_causal, False,
                                                                 scale=scale)[0]


def _cpu_flash(query: Any, key: Any, value: Any, attn_mask: Any) -> bool:
    """Whether torch on the CPU takes its fused kernel for these inputs (its output then has the query's layout;
    its math path's is dense): one head size, unit last strides, no mask that requires a gradient."""
    return (query.size(-1) == key.size(-1) == value.size(-1) and query.stride(-1) == key.stride(-1) == value.stride(-1)
            == 1 and (attn_mask is None or not attn_mask.requires_grad))


_CHECKED: set = set()


def _check(query: Any, key: Any, value: Any, attn_mask: Any, is_causal: bool, enable_gqa: bool) -> None:
    """Raise torch's error for a call its composite refuses (shapes, dtypes, a mask with ``is_causal``)."""
    sig = tuple((tuple(t.shape), t.dtype) if t is not None else None for t in (query, key, value, attn_mask)) \
        + (is_causal, enable_gqa)
    if sig in _CHECKED:
        return
    with _disable_current_modes(), torch._C._DisableTorchDispatch():
        meta = [None if t is None else torch.empty(tuple(t.shape), dtype=t.dtype, device=_META)
                for t in (query, key, value, attn_mask)]
        aten.scaled_dot_product_attention.default.decompose(*meta, 0.0, is_causal, enable_gqa=enable_gqa)
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


#: Special routes of :mod:`tpu_runtime.dispatch`: ``_fused_sdp_choice`` (asked by torch's composite: its math
#: decomposition) and the fused op.
HANDLERS: dict[Any, Callable] = {
    aten._fused_sdp_choice.default: lambda func, args, kwargs: int(SDPBackend.MATH),
    aten._scaled_dot_product_fused_attention_overrideable.default: fused_attention,
}

__all__ = ["HANDLERS", "sdpa"]
