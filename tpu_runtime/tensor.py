"""``TpuTensor``: a torch tensor on the ``tpu`` device whose data is a JAX array.

A wrapper subclass (``_make_wrapper_subclass``): torch sees its shape, dtype and
device and runs autograd above it; every ATen op on it reaches
``__torch_dispatch__`` and is routed to the lowering table by
:mod:`tpu_runtime.dispatch`.

Memory model (functionalization by hand):

* a :class:`Storage` holds one value: a ``jax.Array`` on ``jax.devices()[0]``, a
  pending value of the fused graph, or ``None`` (allocated by ``empty``, not yet
  written; reads as zeros);
* a tensor is a storage plus a *view chain*: the view ops (``view``, ``slice``,
  ``permute``, ``select``, …) that lead from the storage's value to the tensor's
  value. Base tensors and their ``detach()`` aliases have an empty chain;
* an in-place op computes out of place and writes the result back: into the
  storage directly, or through the chain with a scatter (see
  :mod:`tpu_runtime.values`); every write bumps the storage version, and views
  recompute their value lazily when the version they saw is stale.
"""

from __future__ import annotations

import copy
import gc
import itertools
import math
from typing import Any

import torch

#: The torch device every TpuTensor reports.
DEVICE = torch.device("tpu", 0)


class Storage:
    """The shared value behind a base tensor and all of its views (``spec``: its shape, dtype)."""

    __slots__ = ("value", "version", "spec", "handle", "twin", "placed", "range", "__weakref__")

    def __init__(self, value: Any, spec: tuple):
        self.value = value
        self.version = 0
        self.spec = spec
        self.handle = None  # the torch storage object standing for it (see storage_handle)
        self.twin = None  # the same address for its tensors' flattened payloads (compile_tensors.storage_twin)
        # where the elements of its (dense) value sit in the storage torch sees: ``None``, in order from 0;
        # else ``(strides, offset)``, the layout an opaque tensor reports (channels-last, compiled outputs)
        self.placed = None
        self.range = None  # (smallest, largest, version) of its values, when known: see note_range

    def note_range(self, low: int, high: int) -> None:
        """Remember that every element of the value lies in ``[low, high]``, until the next write (an index's
        values as uploaded, ``values.upload_into``, or made by ``arange``: :func:`tpu_runtime.bounds.check` reads
        them)."""
        self.range = (low, high, self.version)

    def known_range(self) -> tuple | None:
        """``(low, high)`` as :meth:`note_range` noted them, or ``None`` (none noted, or written since)."""
        r = self.range
        return r[:2] if r is not None and r[2] == self.version else None


#: Addresses of storage handles: a 64 GiB range each (see storage_handle).
_ADDRESSES = itertools.count(1)


def compiling() -> bool:
    """Whether torch.compile is tracing (dynamo's tracing context is set): storages are then its own."""
    return torch._guards.TracingContext.try_get() is not None


def storage_handle(storage: Storage) -> torch.UntypedStorage:
    """The ``torch.UntypedStorage`` that ``t.untyped_storage()`` gives for every tpu tensor over ``storage``.

    A tensor subclass's own storage has no data pointer (reading it raises), and each view has one of its own,
    so checkpoint code that tells tensors apart or finds tied ones by ``untyped_storage().data_ptr()``
    (safetensors, Hugging Face's ``save_pretrained``) failed. This one, made on first use, has the storage's
    size in bytes and an address of its own, shared by every view of it, as on the CPU. The address is a
    number only: the handle owns no memory, and nothing reads a tpu storage's data (the tensors hold it)."""
    if storage.handle is None:
        shape, dtype = storage.spec
        storage.handle = address_only_storage(math.prod(shape) * dtype.itemsize)
    return storage.handle


def address_only_storage(nbytes: int) -> torch.UntypedStorage:
    """A tpu ``torch.UntypedStorage`` of ``nbytes`` bytes with an address of its own that owns no memory."""
    address = (next(_ADDRESSES) % (1 << 26)) << 36
    return torch._C._construct_storage_from_data_pointer(address, DEVICE, nbytes)


#: The instance-dict descriptor of tensors (TpuTensor's own ``__dict__`` property reads and writes through it).
_DICT = torch.Tensor.__dict__["__dict__"]


class TpuTensor(torch.Tensor):
    """A tensor on the ``tpu`` device (see the module docstring).

    Attributes:
        _storage: the :class:`Storage` it reads and writes.
        _chain: the view steps from the storage's value to this tensor (``()`` for a base).
        _spec: ``(shape, dtype)``, the hashable part of every cache key.
        _cached, _seen: a view's last computed value and the storage version it saw.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl
    # Defaults of a base tensor as class attributes: one less attribute write each per op.
    _chain: tuple = ()
    _cached: Any = None
    _seen: int = -1
    _fake: Any = None  # set only on the tensors torch.compile traces (tpu_runtime.compile_tensors)
    _payload_stride: Any = None  # the strides its payload reports, when a traced graph expects others
    _prefix: bool = False  # a view made by ``resize_``: the first elements of its storage (tpu_runtime.resize)
    _strides: Any = None  # a view whose layout in its storage is known: its strides there (tpu_runtime.layout)
    _offset: int = 0  # ... and its storage offset
    _opaque: bool = False  # reports a layout its dense value does not have (opaque_tensor)
    _traced_view: bool = False  # a tracing tensor whose layout is not known: it reports dense (compile_tensors)

    @property
    def __dict__(self) -> dict:  # (reads: the instance dict, as any tensor's)
        return _DICT.__get__(self)

    @__dict__.setter
    def __dict__(self, new: dict) -> None:
        # ``torch.utils.swap_tensors`` (``model.to("tpu")`` swaps each parameter in place) gives this object,
        # already of this class, the new tensor's dict: the attributes its user set on the parameter it
        # replaces (``p._no_weight_decay``) stay, and so do its gradient hooks, as ``param.data = ...`` keeps
        # them for CUDA (see _carry_hooks).
        for k, v in _DICT.__get__(self).items():
            if k not in _INTERNAL and k not in new:
                new[k] = v
        _carry_hooks(self, new)
        _DICT.__set__(self, new)

    @staticmethod
    def __new__(cls, storage: Storage, shape: tuple, dtype: torch.dtype, chain: tuple = (),
                requires_grad: bool = False) -> "TpuTensor":
        r = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device=DEVICE, requires_grad=requires_grad,
                                                storage_size=_storage_size(shape, dtype))
        r._storage = storage
        if chain:
            r._chain = chain
        r._spec = (shape, dtype)
        return r

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        if len(types) > 1 and not _HANDLES[0](func):  # another subclass's op (a nested tensor's): its turn
            return NotImplemented
        return _DISPATCH[0](func, args, kwargs or {})

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        from tpu_runtime.values import to_cpu

        if self._fake is not None:  # traced by torch.compile: no data
            return f"TpuTensor(traced, {self._fake!r})"
        text = repr(to_cpu(self))
        extra = f", device='{DEVICE}'"
        if self.grad_fn is not None:
            extra += f", grad_fn=<{type(self.grad_fn).__name__}>"
        elif self.requires_grad:
            extra += ", requires_grad=True"
        prefix = "Parameter containing:\n" if isinstance(self, torch.nn.Parameter) else ""  # (as nn.Parameter's repr)
        return prefix + text[:-1] + extra + ")"

    def __format__(self, spec: str) -> str:
        if self.dim() == 0:
            return self.item().__format__(spec)
        return super().__format__(spec)

    @property
    def data(self) -> "TpuTensor":
        """A detached alias (as ``torch.Tensor.data``)."""
        return torch._C.TensorBase.data.__get__(self)

    @data.setter
    def data(self, new: torch.Tensor) -> None:
        # ``t.data = new`` shallow-copies torch's metadata in C++; carry our storage too.
        torch._C.TensorBase.data.__set__(self, new)
        self._storage, self._chain, self._spec = new._storage, new._chain, new._spec
        self._cached, self._seen, self._strides, self._offset = new._cached, new._seen, new._strides, new._offset
        self._opaque = new._opaque

    def backward(self, gradient: Any = None, retain_graph: Any = None, create_graph: bool = False,
                 inputs: Any = None) -> None:
        """``torch.Tensor.backward``, run on the calling thread.

        PyTorch runs the backward of a non-CPU device on a worker thread of its own; for
        this device every backward op is Python (``__torch_dispatch__``, under the GIL),
        so that thread adds only a hand-off and a cold core (measured: the MLP step of
        ``examples/train.py`` in fused eager is ~1.2x faster on the calling thread). The
        switch is ``torch.autograd.set_multithreading_enabled(False)`` for this call only,
        as CPU tensors always run; ``torch.autograd.backward``/``grad`` called directly keep
        PyTorch's device thread (same results, slower).

        In fused eager the end of the backward pass is a sync point: the forward + backward
        graph starts running (without waiting for it) while Python records the optimizer
        step, as strict eager's asynchronous dispatch overlaps each op with the next one's
        Python (measured, paired: the ``mlp-wide`` training step of ``benchmarks/bench_eager.py``
        1.43x faster, minGPT 1.06-1.11x, the tiny MLP unchanged). Its start is one too, when asked
        for (``TPU_FUSED_SPLIT_FLOPS``: :data:`tpu_runtime.eager.fused.SPLIT_FLOPS`) and the forward
        recorded so far does that much work: the device then runs the forward while Python records the backward.

        An exception a backward hook raised is raised here, as on the CPU (the engine itself ends with a
        ``SystemError``: see :func:`tpu_runtime.device._device_type`).
        """
        from tpu_runtime.eager import executor

        if isinstance(gradient, torch.Tensor) and gradient.device != self.device and gradient.dim():
            # (the engine checks a gradient's device for plain tensors only: a CPU one would run the backward
            # on the CPU and leave CPU .grads on tpu parameters)
            raise RuntimeError(f"invalid gradient at index 0 - expected device {self.device} but got "
                               f"{gradient.device}")
        from tpu_runtime.device import rescued_engine_errors

        begin = getattr(executor(), "before_backward", None)
        if begin is not None:
            begin()
        with rescued_engine_errors(), torch.autograd.set_multithreading_enabled(False):
            torch.Tensor.backward(self, gradient, retain_graph, create_graph, inputs)
        executor().sync("backward")

    def tolist(self) -> Any:
        """The data as (nested) python lists (a sync point)."""
        from tpu_runtime.values import to_cpu

        return to_cpu(self).tolist()

    def numpy(self, *, force: bool = False) -> Any:
        """As for CUDA tensors: ``force=True`` copies to the host (detached, a sync point);
        otherwise torch's TypeError pointing at ``.cpu()`` (also what ``np.asarray`` raises)."""
        if not force:
            raise TypeError(f"can't convert {self.device} device type tensor to numpy. Use Tensor.cpu() to copy "
                            "the tensor to host memory first.")
        return self.detach().cpu().resolve_conj().resolve_neg().numpy()

    def __deepcopy__(self, memo: dict) -> "TpuTensor":
        # As torch's: a parameter's copy is a new parameter of the values (no .grad, no attributes); a
        # tensor's also copies its .grad and the Python attributes set on it.
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) support the deepcopy "
                               "protocol at the moment.  If you were attempting to deepcopy a module, this may be "
                               "because of a torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        if id(self) in memo:
            return memo[id(self)]
        if getattr(self, "_is_param", False):
            with torch.no_grad():
                new = self.clone()
            new.requires_grad_(self.requires_grad)
            memo[id(self)] = new
            new._is_param = True
            return new
        new = _copied_storage_alias(self, memo)
        new.requires_grad_(self.requires_grad)
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = copy.deepcopy(self.grad, memo)
        for name, value in _user_state(self).items():
            setattr(new, name, copy.deepcopy(value, memo))
        return new

    def __reduce_ex__(self, proto: int) -> tuple:
        from tpu_runtime.serialization import reduce_tensor  # (it imports this module)

        return reduce_tensor(self)

    # Declaring the flatten protocol makes ``nn.Module.to()`` / ``.half()`` swap parameters
    # in place (``torch.utils.swap_tensors``) instead of re-wrapping them: a parameter keeps
    # its identity, so tied weights stay tied and optimizers keep their references, and
    # the C++ ``.data =`` shallow copy (which would not carry our Python-side storage) is
    # never used. It is also how torch.compile traces tpu tensors: the one inner tensor is
    # a payload standing for this tensor (see :mod:`tpu_runtime.compile_tensors`).
    def __tensor_flatten__(self) -> tuple:
        from tpu_runtime.compile_tensors import payload_stride

        return ["_payload"], payload_stride(self)

    def __coerce_same_metadata_as_tangent__(self, expected_meta: Any, expected_type: Any = None) -> torch.Tensor:
        from tpu_runtime.compile_tensors import coerce_tangent

        return coerce_tangent(self, expected_meta, expected_type)

    @property
    def _dynamo_static_indices(self) -> set:
        """The dims ``torch.compile`` keeps static (``torch._dynamo.mark_static`` adds to them): every dim of a
        parameter, as dynamo keeps a plain ``nn.Parameter``'s (``force_parameter_static_shapes``, which checks for
        the class itself: a tpu parameter is a tpu tensor flagged ``_is_param``). Without them, an optimizer step
        compiled again for parameters of other shapes made them dynamic and dynamo built a graph that read a
        parameter's inner tensor before the parameter (a second model's ``torch.compile(opt.step)`` failed)."""
        d = self.__dict__
        marks = d.get("_static_dims")
        if marks is None:
            param = d.get("_is_param", False) and torch._dynamo.config.force_parameter_static_shapes
            marks = d["_static_dims"] = set(range(self.dim())) if param else set()
        return marks

    @_dynamo_static_indices.setter
    def _dynamo_static_indices(self, marks: set) -> None:
        self.__dict__["_static_dims"] = marks

    @property
    def _payload(self) -> torch.Tensor:
        from tpu_runtime.compile_tensors import payload

        return payload(self)

    @_payload.setter
    def _payload(self, value: torch.Tensor) -> None:
        # AOTAutograd's tangent coercion puts back a traced tensor's inner fake made contiguous (the tangent of
        # an output that is a view of an intermediate, with dynamic shapes); a concrete tensor's is its value
        if self._fake is None:
            raise AttributeError("the payload of a concrete tpu tensor is its value: it cannot be replaced")
        self._fake = value

    def untyped_storage(self) -> torch.UntypedStorage:
        """The storage ``self`` views: one handle per device storage, shared by its views (:func:`storage_handle`)."""
        if self._fake is not None or compiling():
            return torch.Tensor.untyped_storage(self)  # torch.compile fakes it (as a tensor subclass's storage)
        return storage_handle(self._storage)

    def data_ptr(self) -> int:
        """The address of the first element within :meth:`untyped_storage`'s (a number only, as its)."""
        if self._fake is not None or compiling():
            return torch.Tensor.data_ptr(self)
        return storage_handle(self._storage).data_ptr() + self.storage_offset() * self.element_size()

    def _view_func_unsafe(self, new_base: torch.Tensor, symint_visitor_fn: Any = None,
                          tensor_visitor_fn: Any = None) -> torch.Tensor:
        """This view made again from ``new_base`` (how torch.compile fakes an input view; see ``replay_view``)."""
        from tpu_runtime.compile_tensors import replay_view

        return replay_view(self, new_base, symint_visitor_fn, tensor_visitor_fn)

    @staticmethod
    def __tensor_unflatten__(inner: dict, ctx: Any, outer_size: Any, outer_stride: Any) -> "TpuTensor":
        from tpu_runtime.compile_tensors import unflatten

        return unflatten(inner, ctx, outer_size, outer_stride)


def _carry_hooks(old: torch.Tensor, new_dict: dict) -> None:
    """Register ``old``'s gradient hooks (``register_hook``, ``register_post_accumulate_grad_hook``) on the tensor
    that owns ``new_dict``, mid-swap. ``swap_tensors`` leaves the Python hook dicts on ``old``, but the hooks autograd
    calls live on its C++ tensor, which the swap trades for the new one's: registered on the new tensor first,
    they come with it. That tensor is found as the referrer of its dict (a scan of the heap, for a parameter
    with hooks only)."""
    hooks, post = old._backward_hooks, getattr(old, "_post_accumulate_grad_hooks", None)
    if not hooks and not post:
        return
    owners = [o for o in gc.get_referrers(new_dict) if isinstance(o, torch.Tensor) and o is not old]
    if len(owners) != 1 or not owners[0].requires_grad:
        return
    if hooks:
        owners[0]._backward_hooks = hooks
    if post:
        owners[0]._post_accumulate_grad_hooks = post


def new_tensor(value: Any, shape: tuple, dtype: torch.dtype) -> TpuTensor:
    """A base tensor owning a fresh storage holding ``value``."""
    return TpuTensor(Storage(value, (shape, dtype)), shape, dtype)


_MAKE = torch.Tensor._make_wrapper_subclass
#: ``_make_wrapper_subclass``'s arguments are given by position on the per-op paths (``size, strides, storage_offset,
#: memory_format, dtype, layout, device``): parsing keywords cost ~0.3 µs of its ~1.1 µs per tensor (measured).
_STRIDED = torch.strided


def _storage_size(shape: tuple, dtype: torch.dtype) -> int | None:
    """The storage bytes a wrapper reports: torch's (``None``), or one element's for an empty tensor.

    torch.compile fakes a tensor whose storage has no bytes by resizing the fake's storage to zero,
    which for a PrivateUse1 device needs C++ hooks (``resizePrivateUse1Bytes``) that a Python
    backend cannot register; an empty tpu tensor's (never read) storage therefore reports one element.
    """
    return None if 0 not in shape else dtype.itemsize


def _empty(shape: tuple, dtype: torch.dtype) -> "TpuTensor":
    return _MAKE(TpuTensor, shape, dtype=dtype, device=DEVICE, storage_size=dtype.itemsize)


#: Attributes the runtime keeps on a tpu tensor (everything else in its ``__dict__`` was set by the user).
_INTERNAL = frozenset({"_storage", "_chain", "_spec", "_cached", "_seen", "_fake", "_payload_stride", "_prefix",
                       "_strides", "_offset", "_opaque", "_traced_view", "_is_param", "_payload", "_static_dims"})


def _user_state(t: TpuTensor) -> dict:
    """The Python attributes set on ``t`` by its user (what torch copies and pickles with a tensor)."""
    return {k: v for k, v in t.__dict__.items() if k not in _INTERNAL}


def wrap(value: Any, spec: tuple) -> TpuTensor:
    """:func:`new_tensor` from a ``(shape, dtype)`` spec: the per-op fast path."""
    shape = spec[0]
    r = _empty(shape, spec[1]) if 0 in shape else _MAKE(TpuTensor, shape, None, None, None, spec[1], _STRIDED, DEVICE)
    r._storage = Storage(value, spec)
    r._spec = spec
    return r


def view_tensor(storage: Storage, spec: tuple, chain: tuple, strides: tuple | None = None,
                offset: int = 0) -> TpuTensor:
    """A view of ``storage`` through ``chain`` (non-empty), reporting ``spec``: the per-view fast path.

    With ``strides`` (and ``offset``: the view's true layout in its storage, see
    :mod:`tpu_runtime.layout`) it reports them, as the CPU does; any other view reports the dense
    strides of its shape."""
    shape = spec[0]
    if strides is not None and 0 not in shape:
        if offset:
            r = _MAKE(TpuTensor, shape, strides, offset, None, spec[1], _STRIDED, DEVICE)
            r._offset = offset
        else:
            r = _MAKE(TpuTensor, shape, strides, None, None, spec[1], _STRIDED, DEVICE)
        r._strides = strides
    elif 0 in shape:
        r = _empty(shape, spec[1])
    else:
        r = _MAKE(TpuTensor, shape, None, None, None, spec[1], _STRIDED, DEVICE)
    r._storage = storage
    r._chain = chain
    r._spec = spec
    return r


def dense_strides(shape: tuple) -> tuple:
    """The strides of a dense tensor of ``shape`` (size-1 dims count as 1, as torch's do)."""
    strides, acc = [0] * len(shape), 1
    for i in range(len(shape) - 1, -1, -1):
        strides[i] = acc
        acc *= max(shape[i], 1)
    return tuple(strides)


def wrap_strided(value: Any, spec: tuple, stride: tuple, storage_offset: int) -> TpuTensor:
    """:func:`wrap` reporting ``stride`` and ``storage_offset`` instead of the dense layout (the value
    is still the dense array of the view: torch.compile's outputs that are traced as views)."""
    return opaque_tensor(Storage(value, spec), spec, stride, storage_offset)


def opaque_tensor(storage: Storage, spec: tuple, stride: tuple, storage_offset: int = 0) -> TpuTensor:
    """A tensor of ``storage``'s dense value (no view chain) that reports ``stride`` and ``storage_offset``:
    a layout its value does not have (compiled outputs traced as views, channels-last tensors)."""
    r = _MAKE(TpuTensor, spec[0], strides=stride, storage_offset=storage_offset, dtype=spec[1], device=DEVICE,
              storage_size=_storage_size(spec[0], spec[1]))
    r._storage, r._spec, r._opaque = storage, spec, True
    storage.placed = (tuple(stride), storage_offset)
    return r


def alias(t: TpuTensor) -> TpuTensor:
    """A tensor sharing ``t``'s storage and view chain (``detach``, ``alias``; autograd detaches
    every gradient it accumulates and every output it saves: a per-op path too)."""
    spec = t._spec
    if t._strides is not None:
        r = view_tensor(t._storage, spec, t._chain, t._strides, t._offset)
        r._cached, r._seen = t._cached, t._seen
        return r
    if t._opaque:  # keeps the layout it reports (a channels-last tensor's parameter, a compiled output's alias)
        return opaque_tensor(t._storage, spec, t.stride(), t.storage_offset())
    shape = spec[0]
    r = _empty(shape, spec[1]) if 0 in shape else _MAKE(TpuTensor, shape, None, None, None, spec[1], _STRIDED, DEVICE)
    r._storage = t._storage
    r._spec = spec
    if t._chain:
        r._chain, r._cached, r._seen, r._prefix = t._chain, t._cached, t._seen, t._prefix
    return r


def _copied_storage_alias(t: TpuTensor, memo: dict) -> TpuTensor:
    """``t`` over a copy of its storage, made once per storage in a ``deepcopy`` (``memo``): tensors that share
    a storage (a tensor and its views) share the copy, as torch's deepcopy of CPU tensors keeps them."""
    key = ("tpu storage", id(t._storage))
    storage = memo.get(key)
    if storage is None:
        shape, dtype = t._storage.spec
        with torch.no_grad():
            storage = TpuTensor(t._storage, shape, dtype).clone()._storage
        storage.placed = t._storage.placed
        memo[key] = storage
        memo.setdefault(id(memo), []).append(t._storage)  # (as copy's _keep_alive: the id stays this storage's)
    r = alias(t)
    r._storage, r._cached, r._seen = storage, None, -1
    return r


def _first_dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    from tpu_runtime.dispatch import dispatch

    return dispatch(func, args, kwargs)


#: The dispatcher (bound by :mod:`tpu_runtime.dispatch` when it loads; one less call per op).
_DISPATCH: list = [_first_dispatch]
#: ``handles(func)``: whether the dispatcher has a route for ``func`` (bound by :mod:`tpu_runtime.dispatch`).
_HANDLES: list = [lambda func: True]
