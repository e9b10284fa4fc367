"""``torch.load(..., map_location="tpu")``: checkpoint storages restored onto the tpu device.

``torch.load`` restores each storage of a checkpoint to its location (``map_location``
overrides it) through the deserializers of ``torch.serialization.register_package``; the
built-in one for a PrivateUse1 device calls ``storage.to(device)``, which allocates a storage
on the device in C++ — a Python backend has no allocator there (PyTorch crashed). Ours,
registered ahead of it, restores a ``tpu`` location as a placeholder storage on the device
(an address only, no memory) that carries the CPU storage read from the file; torch then rebuilds each tensor as
``torch.empty(0, device="tpu").set_(placeholder, offset, size, stride)``, and the
dispatcher's ``set_`` from a storage (:func:`set_storage`) uploads that view of the CPU data.

Saving (:func:`reduce_tensor`, a tpu tensor's ``__reduce_ex__``) writes what torch writes for a CUDA tensor: the
storage's bytes, copied to the host once per ``torch.save`` whatever the number of its tensors, tagged ``tpu:0``
(:func:`_tag`), and each tensor as its offset and strides into it, rebuilt by ``torch._utils._rebuild_tensor_v2``
(allowed by ``weights_only=True``; ``map_location="cpu"`` loads it in a process without the tpu device). A tied
weight's two state-dict entries are one storage in the file, as on the CPU, not two. A tensor whose layout in its
storage the runtime does not know (a view reporting dense strides) is saved as a CPU copy of its own, rebuilt by
torch's device-rebuild function. Other writers (the legacy format, plain ``pickle``) get the values as a NumPy
array (:func:`_in_zip_writer`).

Loading: tensors that shared one storage in the file share one on the device
too, as on the CPU: the first tensor of a storage uploads it (the tensor itself when it covers the
storage, else a flat copy it views) and the others view it with their offset and strides, so a write
through one is seen through the others (a tensor reading the storage as another dtype loads as a
copy of its own).
"""

from __future__ import annotations

import collections
import math
import sys
import weakref
from typing import Any, Callable

import torch
from torch._prims_common import make_contiguous_strides_for

from tpu_runtime.resize import rebind
from tpu_runtime.tensor import DEVICE, TpuTensor, _user_state, address_only_storage

aten = torch.ops.aten
_PRIORITY = 9  # ahead of torch's CPU tagger (10; it tags every CPU storage) and PrivateUse1 deserializer (23)


def _tag(obj: Any) -> str | None:
    """Saving: ``tpu:0`` for the host copy of a tpu storage (:func:`_saved_storage`), else None."""
    return str(DEVICE) if getattr(obj, "_tpu_saved", False) else None


#: The host copy of each tpu storage being saved, with the storage version it copied: weak, so it lives as long as
#: the ``torch.save`` writing it holds it (every tensor of the storage in that save finds it).
_HOSTS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _saved_storage(t: TpuTensor) -> torch.TypedStorage | None:
    """The storage ``torch.save`` writes for ``t``: the host copy of its tpu storage, or None where ``t``'s strides
    and offset do not say where its elements sit in it (a view whose layout is not known, a layout its storage's
    value does not have, another dtype, a lazy conjugate or negation)."""
    storage = t._storage
    known = t._strides is not None if t._chain else t._spec == storage.spec
    if not known or t._opaque or storage.placed is not None or t.dtype != storage.spec[1] or t.is_conj() \
            or t.is_neg():
        return None
    entry = _HOSTS.get(storage)
    host = entry[1]() if entry is not None and entry[0] == storage.version else None
    if host is None:
        host = TpuTensor(storage, *storage.spec).cpu().untyped_storage()
        host._tpu_saved = True
        _HOSTS[storage] = (storage.version, weakref.ref(host))
    return torch.TypedStorage(wrap_storage=host, dtype=t.dtype, _internal=True)


def _in_zip_writer() -> bool:
    """Whether ``torch.save``'s zip-file writer is pickling (``torch.serialization._save`` on the stack). Its
    loader restores storages before their tensors; the legacy format's (``_use_new_zipfile_serialization=False``)
    reads their data after the tensors are made (tpu tensors rebuilt from a CPU copy's storage loaded garbage),
    so other writers (that one, plain ``pickle``) get the values themselves."""
    frame = sys._getframe(2)
    for _ in range(8):
        if frame is None:
            return False
        if frame.f_code is _ZIP_WRITER:
            return True
        frame = frame.f_back
    return False


_ZIP_WRITER = torch.serialization._save.__code__


def reduce_tensor(t: TpuTensor) -> tuple:
    """``t.__reduce_ex__``: the storage of ``t`` (:func:`_saved_storage`) and its view of it, rebuilt by torch's own
    functions (see the module docstring); a parameter is rebuilt as one, with the attributes set on it
    (``torch.save(model)`` then ``torch.load`` gives a model whose parameters an optimizer finds), and so is a plain
    tensor's user state."""
    if getattr(t, "_is_param", False):
        state = _user_state(t)
        if state:
            return (torch._utils._rebuild_parameter_with_state,
                    (t.detach(), t.requires_grad, collections.OrderedDict(), state))
        return torch._utils._rebuild_parameter, (t.detach(), t.requires_grad, collections.OrderedDict())
    zip_writer = _in_zip_writer()
    saved = _saved_storage(t) if zip_writer else None
    if saved is not None:
        rebuild = torch._utils._rebuild_tensor_v2
        args = (saved, t.storage_offset(), tuple(t.size()), t.stride(), t.requires_grad, collections.OrderedDict())
    elif zip_writer:  # a CPU copy and torch's rebuild of a storage-less device tensor (it honours map_location)
        rebuild = torch._utils._rebuild_device_tensor_from_cpu_tensor
        args = (t.detach().cpu(), t.dtype, str(DEVICE), t.requires_grad)
    else:  # the values themselves, as torch pickles an XLA tensor (types NumPy lacks widened to float32/complex64)
        cpu = t.detach().cpu()
        if cpu.dtype in (torch.bfloat16, torch.complex32) or cpu.dtype.itemsize == 1 and cpu.dtype.is_floating_point:
            cpu = cpu.to(torch.complex64 if cpu.is_complex() else torch.float32)
        rebuild = torch._utils._rebuild_device_tensor_from_numpy
        args = (cpu.resolve_conj().resolve_neg().numpy(), t.dtype, str(DEVICE), t.requires_grad)
    state = _user_state(t)
    if state:  # the attributes its user set, restored as torch restores a plain tensor's
        return torch._tensor._rebuild_from_type_v2, (rebuild, torch.Tensor, args, state)
    return rebuild, args


def _restore(storage: Any, location: str) -> Any:
    """A storage read from a checkpoint, for ``location``: a placeholder on the tpu device carrying
    it when ``location`` names the tpu device, else ``None`` (the next deserializer's turn).

    Raises:
        RuntimeError: ``location`` names a tpu device index that does not exist.
    """
    if location != "tpu" and not location.startswith("tpu:"):
        return None
    index = int(location.split(":", 1)[1]) if ":" in location else 0
    if index >= torch.tpu.device_count():
        raise RuntimeError(f"Attempting to deserialize object on tpu device {index} but "
                           f"torch.tpu.device_count() is {torch.tpu.device_count()}; use map_location to place "
                           "the storages on another device")
    # (an address of its own: torch.load reuses a restored storage for every tensor of it only when its data
    # pointer is not 0, so the tensors sharing it in the file find one placeholder and share on the device too)
    placeholder = address_only_storage(storage.nbytes())
    placeholder._tpu_host = storage.cpu()
    return placeholder


def set_storage(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """set_.source_Storage_storage_offset(Tensor(a!) self, Storage source, SymInt storage_offset, SymInt[] size,
    SymInt[] stride=[]) -> Tensor(a!) (and ``set_.source_Storage``): ``self`` becomes the ``size``/``stride``
    view of a placeholder storage's CPU data (see the module docstring), uploaded.

    Raises:
        RuntimeError: ``source`` is not a storage that :func:`_restore` made (a Python backend's
            tensors have no device storage to share).
    """
    self, source = args[0], args[1]
    host = getattr(source, "_tpu_host", None)
    if host is None:
        raise RuntimeError(f"set_ of a tpu tensor from a storage on {source.device} is not supported: tpu tensors "
                           "hold JAX arrays, not device storages; use t.copy_(src) or src.to('tpu')")
    offset = int(kwargs.get("storage_offset", args[2] if len(args) > 2 else 0))
    if len(args) > 3 or "size" in kwargs:
        size = tuple(int(s) for s in kwargs.get("size", args[3] if len(args) > 3 else ()))
    else:
        size = (host.nbytes() // self.element_size(),)
    stride = kwargs.get("stride", args[4] if len(args) > 4 else ())
    stride = tuple(int(s) for s in stride) if stride else tuple(make_contiguous_strides_for(size))
    base = getattr(source, "_tpu_base", None)
    if base is not None and base.dtype == self.dtype:  # another tensor of an uploaded storage: a view of it
        return rebind(self, base.as_strided(size, stride, offset))
    n, rest = divmod(host.nbytes(), self.element_size())
    whole = offset == 0 and math.prod(size) == n and stride == tuple(make_contiguous_strides_for(size))
    if base is None and not rest and not whole:  # part of a storage: the storage uploaded, the tensor viewing it
        flat = _upload(host, self, 0, (n,), (1,))
        source._tpu_base = flat
        return rebind(self, flat.as_strided(size, stride, offset))
    out = rebind(self, _upload(host, self, offset, size, stride))
    if base is None and whole:  # the whole storage: later tensors of it view this one
        source._tpu_base = out
    return out


def _upload(host: Any, like: TpuTensor, offset: int, size: tuple, stride: tuple) -> TpuTensor:
    """The ``size``/``stride`` view at ``offset`` of the CPU storage ``host``, read as ``like``'s dtype, on
    ``like``'s device."""
    cpu = torch.empty(0, dtype=like.dtype).set_(host, offset, size, stride)
    if math.prod(size):
        cpu = cpu.clone()
    return cpu.to(like.device)


def register() -> None:
    """Register the deserializer with ``torch.serialization`` (once)."""
    from torch.serialization import _package_registry

    if not any(entry[2] is _restore for entry in _package_registry):
        torch.serialization.register_package(_PRIORITY, _tag, _restore)


#: Dispatcher entries (see :mod:`tpu_runtime.dispatch`).
HANDLERS: dict[Any, Callable] = {
    aten.set_.source_Storage_storage_offset: set_storage,
    aten.set_.source_Storage: set_storage,
}
