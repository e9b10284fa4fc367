"""``as_strided`` on tpu tensors: views that index their storage, and its bounds check.

A tpu tensor's value is a dense array; ``as_strided`` indexes the storage when the tensor reports its true
layout there (:mod:`tpu_runtime.layout`), else the tensor's own dense values, and a compiled graph's output
that reports a layout over a storage it does not hold maps each position back to its element (a copy).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from converter.lowering.ops.shape import strided_elements
from tpu_runtime import dispatch as _dispatch  # (circular: used at call time only)
from tpu_runtime.adjusted import _row_route
from tpu_runtime.tensor import TpuTensor

aten = torch.ops.aten


def as_strided(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)
    -> Tensor(a)``: a view that reports its true layout in its storage (:mod:`tpu_runtime.layout`)
    has it index the storage, as on the CPU (AOTAutograd rebuilds a compiled function's output that
    aliases such an input this way), from its own storage offset when none is given; any other
    tensor reports the dense strides of its own values, which its strides index.

    Raises:
        RuntimeError: the view reaches past the end of the storage (torch's message, at the call).
    """
    x = args[0]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    if type(x) is TpuTensor and x._opaque:
        return _opaque_as_strided(x, args[1], args[2], offset)
    if type(x) is TpuTensor and x._strides is not None:
        shape, dtype = x._storage.spec
        args = (TpuTensor(x._storage, shape, dtype), args[1], args[2], x._offset if offset is None else offset)
        kwargs = {}
    _check_bounds(args[0], args[1], args[2], args[3] if len(args) > 3 else kwargs.get("storage_offset"))
    return _dispatch._route(func, args, kwargs, _row_route(func))


def _check_bounds(x: Any, size: Any, stride: Any, offset: Any) -> None:
    """Refuse, as torch's ``setStorage`` does, a layout that reaches past the ``numel`` elements ``as_strided``
    indexes in ``x`` (its storage, for a tensor made of it above); symbolic sizes (torch.compile) are not checked."""
    offset = 0 if offset is None else offset
    values = (*size, *stride, offset)
    if type(x) is not TpuTensor or not all(type(v) is int for v in values):
        return
    if offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    held = math.prod(x._spec[0]) if x._chain else math.prod(x._storage.spec[0])
    need = 0 if 0 in size else offset + 1 + sum((n - 1) * s for n, s in zip(size, stride))
    if need > held:
        item = x.dtype.itemsize
        raise RuntimeError(f"setStorage: sizes {list(size)}, strides {list(stride)}, storage offset {offset}, and "
                           f"itemsize {item} requiring a storage size of {need * item} are out of bounds for storage "
                           f"of size {held * item}")


def _opaque_as_strided(x: TpuTensor, size: Any, stride: Any, offset: Any) -> TpuTensor:
    """``as_strided`` of a compiled graph's output that reports a view's layout over a storage it does not
    hold (only its own dense values, :func:`~tpu_runtime.tensor.wrap_strided`): each storage position read
    is mapped back to the element of ``x`` stored there (a copy, not a view).

    Raises:
        RuntimeError: a position no element of ``x`` holds.
    """
    picked = strided_elements(tuple(x.shape), tuple(x.stride()), x.storage_offset(), tuple(int(s) for s in size),
                              tuple(int(s) for s in stride), x.storage_offset() if offset is None else int(offset))
    if (picked < 0).any():
        raise RuntimeError(f"as_strided{list(size), list(stride), offset} of a tpu tensor of shape {list(x.shape)} "
                           f"and strides {list(x.stride())} reads storage it does not hold (the output of a compiled "
                           "function): clone() it first")
    flat = _dispatch._route(aten.view.default, (TpuTensor(x._storage, *x._storage.spec), [-1]), {})
    return _dispatch._route(aten.index.Tensor, (flat, [torch.from_numpy(picked)]), {})


__all__ = ["as_strided"]
