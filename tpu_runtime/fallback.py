"""What happens when an op cannot run on the device, and errors inside backward.

Without a lowering, a runtime kernel or a decomposition, an op raises
:class:`~converter.errors.UnsupportedOpError` naming it and the nearest
supported overloads. :func:`set_cpu_fallback` opts in to running such ops (and
ops whose output shape depends on the data) with PyTorch on CPU copies instead;
every use is counted in :func:`fallback_report` (DESIGN.md: no silent fallback).
"""

from __future__ import annotations

import collections
import difflib
from typing import Any

import torch

from converter.errors import UnsupportedOpError, caller_location
from converter.lowering import registry
from tpu_runtime.cpu_semantics import cpu_semantics
from tpu_runtime.tensor import TpuTensor, new_tensor
from tpu_runtime.values import to_cpu, upload, write

_FALLBACK = {"enabled": False, "counts": collections.Counter()}


def set_cpu_fallback(enabled: bool = True) -> None:
    """Opt in (or out) of running ops that have no lowering on CPU.

    Every op that falls back is counted; see :func:`fallback_report`. Off by
    default: without it such an op raises ``UnsupportedOpError``.
    """
    _FALLBACK["enabled"] = bool(enabled)


def fallback_enabled() -> bool:
    """Whether :func:`set_cpu_fallback` is on."""
    return _FALLBACK["enabled"]


def fallback_report() -> dict[str, int]:
    """How many times each op ran on CPU through the fallback, by op name."""
    return dict(_FALLBACK["counts"])


def missing(func: Any, args: tuple, kwargs: dict) -> Any:
    """An op with no way to run on the device: raise, or fall back when opted in.

    Raises:
        UnsupportedOpError: the CPU fallback is off.
    """
    if "sparse" in func._schema.name:  # the fallback cannot help: its result could not be uploaded either
        raise UnsupportedOpError(str(func), "tpu", caller_location(), hint=False,
                                 reason="sparse tensors have no layout on the tpu device (for nn.Embedding and "
                                        "nn.EmbeddingBag, use sparse=False: dense gradients)")
    if func._schema.name.split("::")[-1] in _QUANTIZING:  # (nor can it help here: its result is quantized)
        raise UnsupportedOpError(str(func), "tpu", caller_location(), hint=False,
                                 reason=_NO_QUANTIZED + ": quantize on the CPU "
                                        "(torch.ao.quantization.convert: model.cpu() first, in place, so the "
                                        "observers its qconfig makes are made there too)")
    if not _FALLBACK["enabled"]:
        names = sorted(str(k) for k in registry.registered())
        packet = str(func).rsplit(".", 1)[0]
        nearest = [n for n in names if n.startswith(packet + ".")] or difflib.get_close_matches(str(func), names, 3)
        reason = "no lowering, runtime kernel or decomposition"
        if "_nested_" in func._schema.name:  # the strided nested layout is a C++ tensor implementation
            reason = NO_LAYOUT["NestedTensorPrivateUse1"]
        elif func.namespace not in ("aten", "prims"):  # a custom op registered for other devices only
            reason = ("a custom op with no kernel for the tpu device or for every device (register one with "
                      "torch.library.register_kernel(op, 'tpu', fn), or a row with @lowering)")
        raise UnsupportedOpError(str(func), "tpu", caller_location(), nearest=nearest[:5],
                                 reason=reason + "; tpu_runtime.set_cpu_fallback(True) runs it on CPU (reported)")
    return cpu_fallback(func, args, kwargs)


#: The ops that make quantized tensors from tpu ones (their results could not be on the device).
_QUANTIZING = frozenset({"quantize_per_tensor", "quantize_per_channel", "quantize_per_tensor_dynamic",
                         "_make_per_tensor_quantized_tensor", "_make_per_channel_quantized_tensor"})
#: Why a quantized tensor cannot be on the device.
_NO_QUANTIZED = "quantized tensors (torch.qint8, torch.quint8 ...) have no layout on the tpu device"


#: Dispatch keys of tensor implementations the tpu device has no layout for → what to say instead.
NO_LAYOUT = {
    "SparseCsrPrivateUse1": "sparse compressed tensors (CSR, CSC, BSR, BSC) have no layout on the tpu device: keep "
                            "them on the CPU, or move x.to_dense() instead",
    "NestedTensorPrivateUse1": "nested tensors of the strided layout need a C++ storage on the device; jagged ones "
                               "(torch.nested.nested_tensor(..., layout=torch.jagged)) hold tpu tensors",
    "QuantizedPrivateUse1": _NO_QUANTIZED + ": move x.dequantize(), or export the model with quantize= for LiteRT",
}


def no_layout(key: str, op: Any, *args: Any, **kwargs: Any) -> Any:
    """Any op reaching the device's dispatch ``key`` of a tensor implementation it has no layout for.

    Raises:
        UnsupportedOpError: always, naming the op, the user's line and what works instead.
    """
    raise UnsupportedOpError(str(op), "tpu", caller_location(), hint=False, reason=NO_LAYOUT[key])


def cpu_fallback(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` with PyTorch on CPU copies; upload the results; count it."""
    _FALLBACK["counts"][str(func)] += 1
    cpu = {}

    def down(x: Any) -> Any:
        if isinstance(x, TpuTensor):
            cpu[id(x)] = to_cpu(x)
            return cpu[id(x)]
        if isinstance(x, torch.device) and x.type == "tpu":
            return torch.device("cpu")
        return x

    with cpu_semantics():  # (a lazy conjugate the CPU op makes is resolved, as at top level)
        out = func(*torch.utils._pytree.tree_map(down, args), **torch.utils._pytree.tree_map(down, kwargs))
    for i, a in enumerate(func._schema.arguments):  # write back arguments the op mutated
        if a.alias_info is not None and a.alias_info.is_write:
            t = args[i] if i < len(args) else kwargs.get(a.name)
            if isinstance(t, TpuTensor):
                write(t, upload(cpu[id(t)]))
                if out is cpu[id(t)]:
                    out = t

    def up(x: Any) -> Any:
        if isinstance(x, torch.Tensor) and not isinstance(x, TpuTensor):
            with cpu_semantics():
                x = x.resolve_conj().resolve_neg()
            return new_tensor(upload(x), tuple(x.shape), x.dtype)
        return x

    return torch.utils._pytree.tree_map(up, out)


# --------------------------------------------------------------------------- errors inside backward

_BACKWARD_ERRORS: list[BaseException] = []


def defer_backward_error(func: Any, args: tuple, kwargs: dict, error: Exception) -> Any:
    """Carry an op's error out of a backward pass.

    An exception raised by ``__torch_dispatch__`` inside the autograd engine
    terminates the process, on whichever thread the engine runs the node
    (PyTorch's Python device guard calls back into Python from ``noexcept`` code
    while it propagates). So the op returns zeros of the right shapes instead,
    and a final callback of the backward pass — which runs on the thread that
    called ``backward()`` — raises the original error there.
    """
    from tpu_runtime.plans import out_meta

    if not _BACKWARD_ERRORS:
        torch.autograd.Variable._execution_engine.queue_callback(_raise_backward_error)
    _BACKWARD_ERRORS.append(error)
    try:
        meta = out_meta(func, args, kwargs)[0]
    except Exception:  # no meta kernel either (nothing may escape the engine): shaped like the input
        meta = like_input(func, args, kwargs)
    return torch.utils._pytree.tree_map(
        lambda m: new_tensor(None, tuple(m.shape), m.dtype) if isinstance(m, torch.Tensor) else m, meta)


def like_input(func: Any, args: tuple, kwargs: dict) -> Any:
    """Stand-in outputs for an op without a meta kernel: each tensor output shaped like the
    op's ``self``/``input`` argument (a backward op's gradient is), else like its first tensor."""
    named = dict(zip((a.name for a in func._schema.arguments), args), **kwargs)
    tensors = [v for v in named.values() if isinstance(v, torch.Tensor)]
    like = named.get("self", named.get("input", tensors[0] if tensors else None))
    if not isinstance(like, torch.Tensor):
        like = torch.empty(0)
    outs = [torch.empty(tuple(like.shape), dtype=like.dtype, device="meta") for r in func._schema.returns
            if isinstance(r.type, torch.TensorType)]
    return outs[0] if len(outs) == 1 else tuple(outs)


def empty_results(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func``'s results, shaped like its empty ``self``/``input`` (a decomposition divided by the size of
    an empty input: a loss's backward, whose gradient is shaped like the input; its meta kernel is the
    same decomposition).

    Raises:
        Exception: that input has elements (the results' values are not known): what the CPU raises for
            the call (interpolate to an output size 0: the decomposition divided by it), else
            ZeroDivisionError."""
    from tpu_runtime.cpu_refusals import raise_as_on_cpu

    meta = like_input(func, args, kwargs)
    if any(m.numel() for m in torch.utils._pytree.tree_leaves(meta) if isinstance(m, torch.Tensor)):
        raise_as_on_cpu(func, args, kwargs, None, None)
        raise ZeroDivisionError(f"{func}: division by zero in its decomposition")
    return torch.utils._pytree.tree_map(
        lambda m: new_tensor(None, tuple(m.shape), m.dtype) if isinstance(m, torch.Tensor) else m, meta)


def _raise_backward_error() -> None:
    errors = list(_BACKWARD_ERRORS)
    _BACKWARD_ERRORS.clear()
    if errors:
        raise errors[0]



__all__ = ["set_cpu_fallback", "fallback_report", "fallback_enabled", "missing", "cpu_fallback", "like_input",
           "empty_results", "defer_backward_error"]
