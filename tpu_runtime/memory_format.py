"""Layouts other than the dense one: channels-last formats and the layouts ``preserve_format`` keeps.

A tpu tensor's value is always the dense array of its shape; a channels-last tensor is one whose wrapper
reports channels-last strides over that value (an *opaque* layout, as torch.compile's strided outputs:
:func:`~tpu_runtime.tensor.wrap_strided`), so ``is_contiguous(memory_format=torch.channels_last)`` and
``stride()`` answer as on the CPU for the tensors converted to the format (``.to``, ``.contiguous``,
``clone``, ``empty``/``empty_like``/``empty_strided``, ``model.to(memory_format=...)``) and for their
``detach``/``nn.Parameter``, and their views report the CPU's layouts too (``x[:, :, 1:]``); ``as_strided``
on them or their views indexes the storage in the order the layout gives, writes included (the storage's
``placed`` layout, :mod:`tpu_runtime.strided`). ``preserve_format`` (the default of ``.to``, ``.cpu()``,
``clone`` and the ``*_like`` factories) keeps the source's layout as torch does, whatever the permutation:
a copy of ``x.permute(0, 2, 3, 1)`` reports the same strides, so permuting it back gives a tensor ``.view()``
takes, as on the CPU, and ``empty_strided`` with a permuted dense layout reports it (``.to("tpu")`` of a
permuted CPU tensor allocates so). The results of other ops are dense (the CPU's kernels would carry the
layout on), which changes no value.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import (is_non_overlapping_and_dense_or_false, make_channels_last_2d_strides_for,
                                 make_channels_last_3d_strides_for)
from torch.utils._python_dispatch import _disable_current_modes

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
    ``channels_last``/``channels_last_3d``; for ``preserve_format`` (or none given) those torch's ``empty_like``
    gives a tensor laid out as ``src`` (its own when it is dense in some order); ``None``: dense."""
    if memory_format in _FORMATS:
        if len(shape) != _FORMATS[memory_format][0]:
            return None
        return channels_last_strides(shape)
    if memory_format in (None, torch.preserve_format) and src is not None and tuple(src.shape) == shape:
        return preserved_strides(shape, tuple(src.stride()))
    return None


_PRESERVED: dict[tuple, tuple | None] = {}


def preserved_strides(shape: tuple, strides: tuple) -> tuple | None:
    """The strides ``torch.empty_like`` (``preserve_format``) gives a tensor of ``shape`` laid out with ``strides``
    when they differ from the dense ones, else ``None``."""
    key = (shape, strides)
    if key not in _PRESERVED:
        dense = dense_strides(shape)
        if strides == dense:
            out = None
        else:
            with _disable_current_modes(), torch._C._DisableTorchDispatch():
                meta = torch.empty_strided(shape, strides, device="meta")
                # (the CPU's empty_like keeps a dense layout's strides as they are, size-1 dimensions' too,
                # where the meta kernel recomputes those)
                out = strides if is_non_overlapping_and_dense_or_false(meta) else tuple(torch.empty_like(meta).stride())
            out = None if out == dense else out
        if len(_PRESERVED) > 4096:
            _PRESERVED.clear()
        _PRESERVED[key] = out
    return _PRESERVED[key]


def with_strides(t: TpuTensor, strides: tuple | None) -> TpuTensor:
    """``t`` itself when ``strides`` is ``None``, else a tensor sharing its storage that reports ``strides``."""
    if strides is None or t._chain or t._strides is not None:
        return t
    return opaque_tensor(t._storage, t._spec, strides)


def empty_layout(func: Any, args: tuple, kwargs: dict, out: TpuTensor) -> TpuTensor:
    """``out`` (a new ``empty``/``empty_strided`` tensor) reporting the channels-last strides asked for."""
    shape = out._spec[0]
    if func is torch.ops.aten.empty_strided.default:  # a layout dense in some order is reported; others: dense
        strides = tuple(int(s) for s in args[1])
        return with_strides(out, strides if preserved_strides(shape, strides) == strides else None)
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
    if type(out) is TpuTensor and type(x) is TpuTensor and (x._opaque or x._strides is not None
                                                             or "memory_format" in kwargs) \
            and func._schema.name.endswith("_like"):
        return with_strides(out, requested(kwargs.get("memory_format"), out._spec[0], x))
    return out
