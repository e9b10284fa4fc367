"""``torch.load(..., map_location="tpu")``: checkpoint storages restored onto the tpu device.

``torch.load`` restores each storage of a checkpoint to its location (``map_location``
overrides it) through the deserializers of ``torch.serialization.register_package``; the
built-in one for a PrivateUse1 device calls ``storage.to(device)``, which allocates a storage
on the device in C++ — a Python backend has no allocator there (PyTorch crashed). Ours,
registered ahead of it, restores a ``tpu`` location as a placeholder storage on the device
(an address only, no memory) that carries the CPU storage read from the file; torch then rebuilds each tensor as
``torch.empty(0, device="tpu").set_(placeholder, offset, size, stride)``, and the
dispatcher's ``set_`` from a storage (:func:`set_storage`) uploads that view of the CPU data.

Tensors of a checkpoint saved from tpu tensors are CPU copies with torch's
device-rebuild function (see ``TpuTensor.__reduce_ex__``), so they load with any
``map_location`` as well. Tensors that shared one storage in the file share one on the device
too, as on the CPU: the first tensor of a storage uploads it (the tensor itself when it covers the
storage, else a flat copy it views) and the others view it with their offset and strides, so a write
through one is seen through the others (a tensor reading the storage as another dtype loads as a
copy of its own).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import torch
from torch._prims_common import make_contiguous_strides_for

from tpu_runtime.resize import rebind
from tpu_runtime.tensor import TpuTensor, address_only_storage

aten = torch.ops.aten
_PRIORITY = 19  # ahead of torch's own PrivateUse1 deserializer (23)


def _tag(obj: Any) -> None:
    """Saving: no storage is tagged here (tpu tensors pickle as CPU copies)."""
    return None


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
