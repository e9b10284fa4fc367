"""Giving a tpu tensor another shape in place: ``resize_``, ``resize_as_``, ``set_`` and ``out=``
tensors of the wrong shape.

A :class:`~tpu_runtime.tensor.TpuTensor` is a wrapper subclass whose sizes live in C++;
:func:`rebind` changes them as ``t.data = new`` does (torch's shallow copy of the metadata)
and points the tensor at ``new``'s storage and view chain, so every Python reference to
``t`` (a parameter, an ``out=`` buffer) sees the new shape.

``resize_`` keeps torch's storage semantics for a base tensor: the tensor reads the first
``numel`` elements of its storage in order, so shrinking keeps the storage (the tensor becomes
a prefix view of it, and growing back within the storage brings the old elements back);
growing beyond the storage copies the elements into a larger one whose new elements are
zeros (torch leaves them uninitialized). Views taken before a growing ``resize_`` keep the
old storage (in torch they follow the tensor's reallocated storage). A view whose layout in its
storage is known (a slice, a transpose: :mod:`tpu_runtime.layout`) is laid out again from its storage
offset, as torch does, within its storage; growing it beyond its storage, or resizing a view whose
layout is not known (of a dtype view), raises. A channels-last tensor (and its views) reads its storage
in channels-last order, as torch does.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch

from tpu_runtime.tensor import TpuTensor, alias, dense_strides, new_tensor
from tpu_runtime.values import read

aten = torch.ops.aten


def rebind(t: TpuTensor, new: TpuTensor) -> TpuTensor:
    """Make ``t`` report ``new``'s shape and share its storage and view chain; returns ``t``."""
    torch._C.TensorBase.data.__set__(t, new)  # sizes and strides, in C++
    t._storage, t._chain, t._spec = new._storage, new._chain, new._spec
    t._cached, t._seen = new._cached, new._seen
    t._prefix, t._strides, t._offset, t._opaque = new._prefix, new._strides, new._offset, new._opaque
    return t


def resize(t: TpuTensor, size: Any) -> TpuTensor:
    """``t.resize_(size)`` for a tpu tensor (see the module docstring).

    Raises:
        RuntimeError: a negative size, or ``t`` is a view other than a prefix of its storage.
    """
    size = tuple(int(s) for s in size)
    if size == t._spec[0]:
        return t
    if any(s < 0 for s in size):
        raise RuntimeError(f"Trying to create tensor with negative dimension: {list(size)}")
    storage, n = t._storage, math.prod(size)
    shape, dtype = storage.spec
    held = math.prod(shape)
    # a view whose layout is known is laid out again from its storage offset, within the storage
    offset = t._offset if t._chain and not t._prefix and t._strides is not None else 0
    if t._chain and not t._prefix and (t._strides is None or offset + n > held):
        raise RuntimeError(f"resize_ of a view of a tpu tensor (shape {list(t.shape)}) to {list(size)} is not "
                           "supported" + (" beyond its storage" if t._strides is not None else "")
                           + ": resize the tensor it views, or make the view contiguous with .clone()")
    if storage.placed is not None and (t._opaque or t._strides is not None):
        return rebind(t, _placed_resize(t, size, n, held))
    base = TpuTensor(storage, shape, dtype)  # the whole storage, in order
    if offset + n <= held:
        new = base.reshape(-1)[offset:offset + n].view(size)
        new._prefix = bool(new._chain) and not offset
    elif storage.value is None:  # never written: reads as zeros, at any size
        new = new_tensor(None, size, dtype)
    else:
        grown = torch.cat([base.reshape(-1), torch.zeros(n - held, dtype=dtype, device=t.device)])
        new = new_tensor(read(grown.view(size)), size, dtype)
    return rebind(t, new)


def _placed_resize(t: TpuTensor, size: tuple, n: int, held: int) -> TpuTensor:
    """``t`` (of a storage whose value is placed in another order: channels-last) resized to ``size``: its
    storage read in storage order from ``t``'s offset, a view through the placement within the storage,
    else a copy grown with zeros."""
    from tpu_runtime.strided import _placed_as_strided

    offset = t.storage_offset()
    if offset + n <= held:
        return _placed_as_strided(t, size, dense_strides(size), offset)
    flat = _placed_as_strided(t, (held,), (1,), 0)
    grown = torch.cat([flat, torch.zeros(offset + n - held, dtype=flat.dtype, device=t.device)])
    return new_tensor(read(grown[offset:].view(size)), size, flat.dtype)


def resize_out(out: TpuTensor, shape: tuple, op: Any) -> None:
    """Resize an ``out=`` tensor of another shape to ``shape``, warning as torch does when it had elements."""
    if out.numel() != 0:
        warnings.warn(f"{op}: an output with one or more elements was resized since it had shape {list(out.shape)}, "
                      f"which does not match the required output shape {list(shape)}. This behavior is deprecated, "
                      "and in a future PyTorch release outputs will not be resized unless they have zero elements. "
                      "You can explicitly reuse an out tensor t by resizing it, inplace, to zero elements with "
                      "t.resize_(0).", UserWarning, stacklevel=2)
    resize(out, shape)


def _resize_(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """resize_(Tensor(a!) self, SymInt[] size, *, MemoryFormat? memory_format=None) -> Tensor(a!)"""
    return resize(args[0], args[1])


def _resize_as_(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """resize_as_(Tensor(a!) self, Tensor the_template, *, MemoryFormat? memory_format=None) -> Tensor(a!)"""
    return resize(args[0], args[1].shape)


def _set_source(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """set_.source_Tensor(Tensor(a!) self, Tensor source) -> Tensor(a!): ``self`` becomes an alias of ``source``.

    Raises:
        RuntimeError: ``source`` is not a tpu tensor of ``self``'s dtype (as torch's check).
    """
    self, source = args[0], args[1]
    if not isinstance(source, TpuTensor) or source.dtype != self.dtype:
        raise RuntimeError(f"Could not set tensor of type {self.dtype} on the tpu device to a tensor of type "
                           f"{source.dtype} on {source.device}")
    return rebind(self, alias(source))


def _set_empty(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """set_(Tensor(a!) self) -> Tensor(a!): ``self`` becomes an empty tensor with a storage of its own."""
    return rebind(args[0], new_tensor(None, (0,), args[0].dtype))


#: Dispatcher entries (see :mod:`tpu_runtime.dispatch`).
def _is_set_to(func: Any, args: tuple, kwargs: dict) -> bool:
    """is_set_to(Tensor self, Tensor tensor) -> bool: the same storage, offset, sizes and strides."""
    a, b = args[0], args[1] if len(args) > 1 else kwargs["tensor"]
    return (type(a) is TpuTensor and type(b) is TpuTensor and a._storage is b._storage and a.shape == b.shape
            and a.stride() == b.stride() and a.storage_offset() == b.storage_offset())


HANDLERS: dict[Any, Callable] = {
    aten.is_set_to.default: _is_set_to,
    aten.resize_.default: _resize_,
    aten.resize_as_.default: _resize_as_,
    aten.set_.source_Tensor: _set_source,
    aten.set_.default: _set_empty,
}
