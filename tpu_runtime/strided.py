"""``as_strided`` on tpu tensors: views that index their storage, and its bounds check.

A tpu tensor's value is a dense array; ``as_strided`` indexes the storage when the tensor reports its true
layout there (:mod:`tpu_runtime.layout`), else the tensor's own dense values. A storage whose value an opaque
tensor places in another order (channels-last; a compiled graph's output that reports a view's layout over a
storage it does not hold) is indexed through that placement: the view gathers the element stored at each
position it reads, and writes through it scatter back.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from converter.lowering.ops.shape import strided_elements
from tpu_runtime import dispatch as _dispatch  # (circular: used at call time only)
from tpu_runtime.adjusted import _row_route
from tpu_runtime.cache import CACHE
from tpu_runtime.plans import custom_plan
from tpu_runtime.tensor import TpuTensor, view_tensor

aten = torch.ops.aten


def as_strided(func: Any, args: tuple, kwargs: dict) -> Any:
    """``aten::as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None)
    -> Tensor(a)``: a view that reports its true layout in its storage (:mod:`tpu_runtime.layout`)
    has it index the storage, as on the CPU (AOTAutograd rebuilds a compiled function's output that
    aliases such an input this way), from its own storage offset when none is given; any other
    tensor reports the dense strides of its own values, which its strides index. A storage whose
    value is not in storage order (an opaque tensor's: channels-last) is indexed where its elements
    are placed (:func:`_placed_as_strided`).

    Raises:
        RuntimeError: the view reaches past the end of the storage (torch's message, at the call).
    """
    x = args[0]
    offset = args[3] if len(args) > 3 else kwargs.get("storage_offset")
    if type(x) is TpuTensor and (x._opaque or x._strides is not None) and x._storage.placed is not None:
        return _placed_as_strided(x, args[1], args[2], x.storage_offset() if offset is None else offset)
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


def _placed_as_strided(x: TpuTensor, size: Any, stride: Any, offset: Any) -> TpuTensor:
    """``as_strided`` of a tensor whose storage value is placed in its storage by the layout of an opaque
    tensor (:attr:`~tpu_runtime.tensor.Storage.placed`: a channels-last tensor, a compiled graph's output
    that reports a view's layout): a view that gathers the elements stored at the positions it reads, so a
    write through it reaches them (``cl.as_strided((3,), (1,)).fill_(0)`` zeroes the first three channels
    of the first pixel, as on the CPU).

    Raises:
        RuntimeError: a position no element of the storage's value is placed at (a compiled output holds
            only the view's elements), or one of the sizes is symbolic.
    """
    storage = x._storage
    (shape, dtype), (placed, at) = storage.spec, storage.placed
    if not all(type(v) is int for v in (*size, *stride, offset)):
        raise RuntimeError(f"as_strided of a tpu tensor of shape {list(x.shape)} and strides {list(x.stride())} "
                           "with symbolic sizes is not supported: clone() it first")
    size, stride = tuple(int(s) for s in size), tuple(int(s) for s in stride)
    key = ("placed as_strided", storage.spec, storage.placed, size, stride, offset)
    plan = _PLANS.get(key)
    if plan is None:
        picked = strided_elements(shape, placed, at, size, stride, offset)
        if (picked < 0).any():
            raise RuntimeError(f"as_strided{list(size), list(stride), offset} of a tpu tensor of shape "
                               f"{list(x.shape)} and strides {list(x.stride())} reads storage it does not hold "
                               "(the output of a compiled function): clone() it first")
        flat = picked.reshape(-1).astype(np.int32 if picked.size < 2**31 else np.int64)

        def gather(v: Any) -> tuple:
            return (v.reshape(-1)[flat].reshape(size),)

        plan = _PLANS[key] = custom_plan(key, "as_strided", gather, ((size, dtype),))
        plan.raw, plan.view, plan.op = gather, True, aten.as_strided.default
    return view_tensor(storage, (size, dtype), ((plan, 0),), stride, offset)


_PLANS: dict[tuple, Any] = {}
CACHE.on_clear(_PLANS.clear)


def _storage_numel(t: torch.Tensor) -> int:
    """The elements of ``t``'s storage (a tpu tensor's: its base's)."""
    return math.prod(t._storage.spec[0]) if isinstance(t, TpuTensor) else t.untyped_storage().nbytes() // t.itemsize


def same_storage_numel(func: Any, args: tuple, kwargs: dict) -> bool:
    """``aten::_has_same_storage_numel(Tensor self, Tensor other) -> bool`` (forward AD's ``make_dual`` check):
    whether both tensors' storages hold as many elements."""
    return _storage_numel(args[0]) == _storage_numel(args[1])


def zeros_laid_out_as(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """``aten::_new_zeros_with_same_feature_meta(Tensor self, Tensor other, *, int self_num_batch_dims=0) -> Tensor``
    (forward AD's tangent of a view primal, of a dual written into a view, or of a tangent laid out otherwise than its
    primal): zeros in a storage of as many elements as ``other``'s, viewed with its sizes, strides and offset;
    ``self``'s first ``self_num_batch_dims`` dims are prepended, each slice a storage of its own after the last."""
    self, other = args[0], args[1]
    batch = kwargs.get("self_num_batch_dims", args[2] if len(args) > 2 else 0)
    sizes, strides = list(self.shape[:batch]) + list(other.shape), list(other.stride())
    numel = _storage_numel(other)
    for size in reversed(self.shape[:batch]):
        strides.insert(0, numel)
        numel *= size
    zeros = torch.zeros(numel, dtype=other.dtype, device=other.device)
    return zeros.as_strided(sizes, strides, other.storage_offset())


#: ATen ops this module runs (merged into the dispatcher's special routes).
HANDLERS = {
    aten.as_strided.default: as_strided,
    aten._has_same_storage_numel.default: same_storage_numel,
    aten._new_zeros_with_same_feature_meta.default: zeros_laid_out_as,
}


__all__ = ["as_strided", "same_storage_numel", "zeros_laid_out_as", "HANDLERS"]
