"""Lazy modules on the tpu device: ``nn.LazyLinear(4).to("tpu")`` stays lazy, as it does on CUDA.

A lazy module's weights are ``UninitializedParameter`` / ``UninitializedBuffer`` until its
first forward infers their shapes (``materialize``). On CUDA, ``module.to("cuda")`` keeps them
uninitialized: the module's ``_apply`` assigns ``param.data``, which keeps the class. Tpu
tensors are a wrapper subclass, so ``_apply`` swaps each parameter for ``Parameter(p.to("tpu"))``
(``torch.utils.swap_tensors``) and the swapped-in one is an ordinary, empty tpu tensor: the
module then fails on its first input with PyTorch's own shape assertion.

Here the empty tpu tensor made for an uninitialized CPU tensor's ``.to("tpu")`` is given a tpu
class that is also torch's ``UninitializedParameter`` / ``UninitializedBuffer``
(:class:`TpuUninitializedParameter`, :class:`TpuUninitializedBuffer`), so the module's lazy hooks
see it uninitialized and ``materialize`` makes it an ordinary tpu tensor of the inferred shape.
Its ``detach`` (``nn.Parameter(t)``) and dtype copies keep the class; they have no data to copy.

The copy of an empty tensor never reaches the device (PyTorch skips copying zero elements), so
the only call the runtime sees is the ``empty_strided`` that makes the result; which source it
is made for is read from the one frame that knows it: the uninitialized tensor's own
``__torch_function__`` (torch's ``UninitializedTensorMixin``), on the Python stack just above.
That is looked for only when an empty factory result is made, at most a few frames up.
"""

from __future__ import annotations

import sys
from typing import Any

import torch
from torch.nn.parameter import UninitializedBuffer, UninitializedParameter, UninitializedTensorMixin

from converter.errors import caller_location
from tpu_runtime.tensor import TpuTensor, new_tensor

#: The code of the frame that runs an uninitialized tensor's allowed methods (``.to()`` among them).
_TORCH_FUNCTION = UninitializedTensorMixin.__torch_function__.__func__.__code__
#: How far up the stack that frame can be: torch.library's kernel wrapper, the factory, the dispatcher.
_MAX_DEPTH = 12
#: Methods the tpu classes allow besides torch's list: what ``nn.Parameter(t)`` calls on a tensor subclass.
_EXTRA = [torch.Tensor.detach, torch.Tensor.requires_grad_]


class _Copies:
    """What both uninitialized tpu classes copy and pickle as: a new uninitialized one (no data)."""

    def __deepcopy__(self, memo: dict) -> TpuTensor:
        if id(self) not in memo:
            memo[id(self)] = uninitialized(type(self), self.dtype, self.requires_grad)
        return memo[id(self)]

    def __reduce_ex__(self, proto: int) -> tuple:
        return uninitialized, (type(self), self.dtype, self.requires_grad)


class TpuUninitializedParameter(_Copies, UninitializedParameter, TpuTensor):
    """An uninitialized parameter on the tpu device (``materialize`` makes it a tpu parameter).

    Also an :class:`UninitializedParameter`: lazy modules assert that class before they infer shapes.
    """

    cls_to_become = TpuTensor  # its ``_is_param`` flag (set by ``nn.Parameter``) keeps it a Parameter
    _allowed_methods = UninitializedTensorMixin._allowed_methods + _EXTRA


class TpuUninitializedBuffer(_Copies, UninitializedBuffer, TpuTensor):
    """An uninitialized buffer on the tpu device (``materialize`` makes it a tpu tensor).

    Also an :class:`UninitializedBuffer`: torch's ``Tensor.__torch_function__`` converts the result of
    an uninitialized buffer's ``.to()`` to the caller's class unless it already is one.
    """

    cls_to_become = TpuTensor
    _allowed_methods = UninitializedTensorMixin._allowed_methods + _EXTRA


def uninitialized(cls: type, dtype: torch.dtype, requires_grad: bool) -> TpuTensor:
    """A new uninitialized tpu tensor of class ``cls`` (a parameter when ``cls`` is
    :class:`TpuUninitializedParameter`)."""
    t = new_tensor(None, (0,), dtype)
    t.__class__ = cls
    if cls is TpuUninitializedParameter:
        t._is_param = True
    if requires_grad:
        torch.Tensor.requires_grad_(t)
    return t


#: Classes whose instances stay uninitialized through detach / dtype changes on the device.
LAZY_CLASSES = (TpuUninitializedParameter, TpuUninitializedBuffer)


def _uninitialized_class(cls: type) -> type | None:
    if issubclass(cls, UninitializedParameter):
        return TpuUninitializedParameter
    if issubclass(cls, UninitializedBuffer):
        return TpuUninitializedBuffer
    return None


def adopt_if_uninitialized(t: TpuTensor) -> TpuTensor:
    """Give ``t`` (an empty tensor just made) an uninitialized tpu class when it is made for an
    uninitialized tensor's ``.to("tpu")``; return it."""
    frame = sys._getframe(1)
    for _ in range(_MAX_DEPTH):
        if frame is None:
            return t
        if frame.f_code is _TORCH_FUNCTION:
            new = _uninitialized_class(frame.f_locals.get("cls", object))
            if new is not None:
                t.__class__ = new
            return t
        frame = frame.f_back
    return t


def refuse_move(t: TpuTensor, device: torch.device) -> None:
    """Raise when ``t`` (an alias or copy being made on ``device``) is an uninitialized tpu tensor.

    Raises:
        RuntimeError: ``t`` is uninitialized: torch's module ``_apply`` would wrap its CPU copy in
            an ordinary ``Parameter``, and the lazy module would then fail on its first input
            with a shape assertion that does not say why.
    """
    if type(t) in LAZY_CLASSES:
        kind = "parameter" if type(t) is TpuUninitializedParameter else "buffer"
        raise RuntimeError(f"an uninitialized lazy {kind} on the tpu device cannot be moved to {device} (at "
                           f"{caller_location()}): run the lazy module's first forward on the tpu device (which "
                           "materializes it) before moving it")


def keep_class(src: Any, out: TpuTensor) -> TpuTensor:
    """``out`` (an alias or dtype copy of ``src``), uninitialized like ``src`` when it is."""
    if type(src) in LAZY_CLASSES:
        out.__class__ = type(src)
    return out


__all__ = ["TpuUninitializedParameter", "TpuUninitializedBuffer", "LAZY_CLASSES", "adopt_if_uninitialized",
           "keep_class", "refuse_move", "uninitialized"]
