"""Channels-last layouts: ``x.to(memory_format=torch.channels_last)`` reports the CPU's strides.

A tpu tensor's value is always the dense array of its shape; a channels-last tensor is one whose wrapper
reports channels-last strides over that value (an *opaque* layout, as torch.compile's strided outputs:
:func:`~tpu_runtime.tensor.wrap_strided`), so ``is_contiguous(memory_format=torch.channels_last)`` and
``stride()`` answer as on the CPU for the tensors converted to the format (``.to``, ``.contiguous``,
``clone``, ``empty``/``empty_like``/``empty_strided``, ``model.to(memory_format=...)``) and for their
``detach``/``nn.Parameter``, and their views report the CPU's layouts too (``x[:, :, 1:]``); ``as_strided``
on them or their views indexes the storage in channels-last order, writes included (the storage's
``placed`` layout, :mod:`tpu_runtime.strided`). The results of other ops on them are dense (the CPU's
kernels would carry the format on), which changes no value.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import make_channels_last_2d_strides_for, make_channels_last_3d_strides_for

from tpu_runtime.tensor import TpuTensor, dense_strides, opaque_tensor

_FORMATS = {torch.channels_last: (4, make_channels_last_2d_strides_for),
            torch.channels_last_3d: (5, make_channels_last_3d_strides_for)}


def channels_last_strides(shape: tuple) -> tuple | None:
    """The channels-last strides of a 4-d / 5-d ``shape`` when they differ from the dense ones, else ``None``."""
    for rank, strides_for in _FORMATS.values():
        if len(shape) == rank:
            strides = tuple(strides_for(shape))
            return strides if strides != dense_strides(shape) else None
    return None


def requested(memory_format: Any, shape: tuple, src: Any = None) -> tuple | None:
    """The strides a result of ``shape`` reports for ``memory_format``: channels-last ones for
    ``channels_last``/``channels_last_3d``, ``src``'s for ``preserve_format`` (or none given) when ``src``
    reports channels-last strides; ``None``: dense."""
    if memory_format in _FORMATS:
        if len(shape) != _FORMATS[memory_format][0]:
            return None
        return channels_last_strides(shape)
    if memory_format in (None, torch.preserve_format) and type(src) is TpuTensor and src._opaque:
        strides = channels_last_strides(tuple(src.shape))
        return strides if strides is not None and tuple(src.stride()) == strides else None
    return None


def with_strides(t: TpuTensor, strides: tuple | None) -> TpuTensor:
    """``t`` itself when ``strides`` is ``None``, else a tensor sharing its storage that reports ``strides``."""
    if strides is None or t._chain or t._strides is not None:
        return t
    return opaque_tensor(t._storage, t._spec, strides)


def empty_layout(func: Any, args: tuple, kwargs: dict, out: TpuTensor) -> TpuTensor:
    """``out`` (a new ``empty``/``empty_strided`` tensor) reporting the channels-last strides asked for."""
    shape = out._spec[0]
    if func is torch.ops.aten.empty_strided.default:
        cl = channels_last_strides(shape)
        return with_strides(out, cl if cl is not None and tuple(int(s) for s in args[1]) == cl else None)
    return with_strides(out, requested(kwargs.get("memory_format"), shape))


def clone(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """``clone``: the copy, reporting the channels-last strides its ``memory_format`` asks for (or preserves)."""
    from tpu_runtime.execute import run_op

    out = run_op(func, args, {k: v for k, v in kwargs.items() if k != "memory_format"})
    return with_strides(out, requested(kwargs.get("memory_format"), out._spec[0], args[0]))


def in_format(out: Any, fmt: Any, src: TpuTensor) -> Any:
    """``out`` (``src``'s ``_to_copy``, on the tpu device or another) in the layout the memory format ``fmt``
    gives it."""
    strides = requested(fmt, tuple(out.shape), src)
    if type(out) is TpuTensor:
        return with_strides(out, strides)
    if strides is None:  # torch's own copy on that device takes the format
        keep = fmt is None or fmt is torch.preserve_format
        return out if keep else out.contiguous(memory_format=fmt)
    return torch.empty_strided(out.shape, strides, dtype=out.dtype).copy_(out)


def like(func: Any, args: tuple, kwargs: dict, out: Any) -> Any:
    """``out``, the result of a ``*_like``/``new_*`` op: a ``*_like`` of a channels-last template (or given
    ``memory_format=``) reports that layout, as on the CPU (``new_*`` ones are dense there too)."""
    x = args[0] if args else None
    if type(out) is TpuTensor and type(x) is TpuTensor and (x._opaque or "memory_format" in kwargs) \
            and func._schema.name.endswith("_like"):
        return with_strides(out, requested(kwargs.get("memory_format"), out._spec[0], x))
    return out
