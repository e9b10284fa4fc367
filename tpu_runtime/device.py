"""The ``tpu`` device: PrivateUse1 renamed, its backend hooks, and its factory kernels.

:func:`register` (called once by ``import tpu_runtime``) does what a C++ backend
would do, from Python, with PyTorch's documented registration APIs:

* ``torch.utils.rename_privateuse1_backend("tpu")`` and
  ``generate_methods_for_privateuse1_backend()`` (``Tensor.tpu()``, ``is_tpu``…);
* ``torch._register_device_module("tpu", tpu_runtime.torch_tpu)``: ``torch.tpu``
  (``is_available``, ``manual_seed_all`` so ``torch.manual_seed`` seeds the device…);
* a PrivateUse1 hooks object and device guard, which the autograd engine needs
  to run backward on the device;
* ``pin_memory`` for the tpu device (a plain CPU copy: nothing to pin for JAX), so
  ``DataLoader(pin_memory=True)`` keeps working once tpu is the current accelerator;
* ``torch.cond``, ``scan`` and ``map`` kernels for tpu tensors (:mod:`tpu_runtime.control_flow`);
* ``torch.autocast("tpu")`` kernels on the AutocastPrivateUse1 key (:mod:`tpu_runtime.autocast`);
* ``torch.library`` kernels on the PrivateUse1 key for the entry points that take
  no tpu tensor (``torch.empty(..., device="tpu")``, ``arange``, ``full``,
  ``rand``…): they create :class:`~tpu_runtime.tensor.TpuTensor` objects, whose
  every later op goes through ``__torch_dispatch__``; plus ``_copy_from`` and
  ``_local_scalar_dense``, which PyTorch calls on the backend with the Python key
  excluded (inside ``torch.tensor(..., device="tpu")``, and ``torch.tensor([a[0], a[1]])``
  reading each tpu scalar).

Nothing global is patched: these are registrations into PyTorch's extension points.
"""

from __future__ import annotations

import contextlib
import functools
from typing import Any, Iterator

import jax
import torch

_STATE: dict[str, Any] = {"registered": False, "library": None}

#: Factory ops (no tensor input) that get a PrivateUse1 kernel routing them to the runtime.
#: Others (``zeros``, ``ones``, ``full``, ``randn``, ``scalar_tensor``…) decompose in PyTorch
#: into ``empty`` + an in-place fill that reaches ``__torch_dispatch__``; ``arange``,
#: ``eye`` and ``randperm`` would need ``resize_``, so they are routed directly.
#: Factories with no tensor input whose values torch computes in a fixed way (window functions,
#: triangle indices): made by torch on the CPU and uploaded (:func:`tpu_runtime.dispatch._host_factory`).
HOST_FACTORIES = (
    "hann_window", "hann_window.periodic", "hamming_window", "hamming_window.periodic",
    "hamming_window.periodic_alpha", "hamming_window.periodic_alpha_beta", "blackman_window",
    "blackman_window.periodic", "bartlett_window", "bartlett_window.periodic", "kaiser_window",
    "kaiser_window.periodic", "kaiser_window.beta", "tril_indices", "triu_indices", "fft_fftfreq", "fft_rfftfreq",
)

FACTORIES = (
    "empty.memory_format", "empty_strided", "arange", "arange.start", "arange.start_step",
    "full", "rand", "randn", "randint", "randint.low", "randperm", "randperm.generator", "scalar_tensor", "eye", "eye.m",
    "_copy_from", "_copy_from_and_resize", "_efficientzerotensor", "_local_scalar_dense", *HOST_FACTORIES,
)


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """What PyTorch's C++ side asks a PrivateUse1 backend."""

    def is_available(self) -> bool:
        return True

    def has_primary_context(self, device_index: int) -> bool:
        return True

    def is_built(self) -> bool:
        return True


_PRIVATEUSE1 = torch._C._autograd.DeviceType.PrivateUse1

#: The exception a backward hook raised, as :func:`_device_type` found it pending (see there); read and
#: cleared by :func:`take_hook_error`.
_HOOK_ERROR: list = []


#: How many :func:`rescued_engine_errors` calls are running (a rescued exception is raised by one of them).
_RESCUERS = [0]


def _device_type(_type: Any = _PRIVATEUSE1, _exhausted: Any = iter(frozenset()), _found: list = _HOOK_ERROR) -> Any:
    """The guard's device type, and a rescue for the exception of a failed backward hook.

    C++ asks for the type on every device/stream query of the guard (~700 per minGPT training step),
    also from the stream guard's no-exception destructor while the exception a tensor or node hook
    raised unwinds the autograd engine: PyTorch leaves that exception in Python's error indicator, and
    returning a value from a call made with the indicator set fails, which in that destructor is
    ``std::terminate`` (the process aborted). Iterating an exhausted iterator makes the interpreter
    check the indicator without a call: a pending exception is raised here and caught, kept for
    :func:`rescued_engine_errors` (``TpuTensor.backward``, the dynamo backend) to raise in place of the
    ``SystemError`` the engine then ends with. With no rescuer running (``torch.autograd.grad``, which this
    runtime does not wrap) the exception and its traceback are printed as Python reports one it cannot
    raise, before the ``SystemError``. (A static
    function with default arguments: no bound method and no global lookup per call.)"""
    try:
        for _ in _exhausted:
            pass
    except BaseException as e:  # noqa: BLE001 - whatever the hook raised
        _found[:] = [e]
        if not _RESCUERS[0]:
            _report_unraisable(e)
    return _type


def _report_unraisable(error: BaseException) -> None:
    """Print ``error`` and its traceback to ``sys.stderr`` as Python reports an exception it cannot raise
    ("Exception ignored in: …"; see :func:`_device_type`); never raises."""
    try:
        import sys
        import traceback

        print("Exception ignored in: a backward hook on the tpu device (torch.autograd.grad then fails with a "
              "SystemError)", file=sys.stderr)
        traceback.print_exception(error, file=sys.stderr)
    except BaseException:  # noqa: BLE001 - reporting must not fail inside the engine
        pass


def take_hook_error() -> BaseException | None:
    """The exception a backward hook raised that :func:`_device_type` rescued (cleared), or ``None``."""
    if not _HOOK_ERROR:
        return None
    return _HOOK_ERROR.pop()


@contextlib.contextmanager
def rescued_engine_errors() -> Iterator[None]:
    """Run a call into the autograd engine, raising the exception :func:`_device_type` rescued (a hook's, or an op's
    on the tpu device's backward thread) in place of the bare ``SystemError`` the engine then ends with."""
    take_hook_error()  # (a stale one, left by a torch.autograd.grad call)
    _RESCUERS[0] += 1
    try:
        yield
    except SystemError:
        error = take_hook_error()
        if error is None:
            raise
        raise error from None
    finally:
        _RESCUERS[0] -= 1


class _Guard(torch._C._acc.DeviceGuard):
    """The device guard the autograd engine uses for tpu tensors (one device)."""

    type_ = staticmethod(_device_type)


def _pin_target(device: Any) -> bool:
    """Whether a pin-memory call (``device`` given, or the current accelerator) is for the tpu device."""
    if device is None:
        acc = torch.accelerator.current_accelerator()
        return acc is not None and acc.type == "tpu"
    return torch.device(device).type == "tpu"


_AFTER_BACKEND_SELECT = torch._C._dispatch_keyset_full_after(torch._C.DispatchKey.BackendSelect)


def _pin_memory(keyset: Any, self: torch.Tensor, device: Any = None) -> torch.Tensor:
    """``_pin_memory`` for the tpu device: a contiguous CPU copy (JAX copies from pageable
    memory; there is no pinned allocator to ask). Any other device: PyTorch's own kernel."""
    if _pin_target(device):
        return self.clone(memory_format=torch.contiguous_format)
    return torch.ops.aten._pin_memory.default.redispatch(keyset & _AFTER_BACKEND_SELECT, self, device)


def _is_pinned(keyset: Any, self: torch.Tensor, device: Any = None) -> bool:
    """``is_pinned`` for the tpu device: ``False`` (nothing is pinned for it). Otherwise PyTorch's kernel."""
    if _pin_target(device):
        return False
    return torch.ops.aten.is_pinned.default.redispatch(keyset & _AFTER_BACKEND_SELECT, self, device)


def aten_overload(name: str) -> Any:
    """``torch.ops.aten`` overload from ``"packet.overload"`` (``"packet"``: the default)."""
    packet, _, overload = name.partition(".")
    return getattr(getattr(torch.ops.aten, packet), overload or "default")


def check_index(device: Any) -> None:
    """Refuse a tpu device index other than 0 (as CUDA refuses an invalid ordinal; it was mapped to 0).

    Raises:
        RuntimeError: ``device`` (a ``torch.device`` or ``None``) names another index.
    """
    if device is not None and device.index not in (None, 0):
        raise RuntimeError(f"tpu device {device.index} does not exist: torch.tpu.device_count() is 1 (the runtime "
                           "uses jax.devices()[0]); use device='tpu' or 'tpu:0'")


def _factory(op: Any, *args: Any, **kwargs: Any) -> Any:
    from tpu_runtime.dispatch import dispatch

    check_index(kwargs.get("device"))
    out = dispatch(op, args, kwargs)
    if op._overloadpacket is _ARANGE:
        _note_arange(out, args)
    return out


_ARANGE = torch.ops.aten.arange


def _note_arange(t: Any, args: tuple) -> None:
    """Keep the range of an int64 ``arange`` of python ints with its storage, as an upload's is
    (:func:`tpu_runtime.values.upload_into`): an index check of it (a model's position ids) is then decided at once."""
    shape, dtype = t._spec
    if dtype is torch.int64 and shape[0] and all(type(a) is int for a in args):
        start, _, step = (0, 0, 1) if len(args) == 1 else (args + (1,))[:3]
        last = start + (shape[0] - 1) * step
        t._storage.note_range(min(start, last), max(start, last))


def _register_foreach_type() -> None:
    """Let torch.optim and ``clip_grad_norm_`` take their foreach paths for tpu tensors by default, as
    they do for every PrivateUse1 device whose tensors are plain ``torch.Tensor``: both check the exact
    type against a list that tensor subclasses join (PyTorch's DTensor appends itself the same way).
    Other types are unaffected. Without it each optimizer step ran one op per parameter and update."""
    from torch.optim import optimizer
    from torch.utils import _foreach_utils

    from tpu_runtime.tensor import TpuTensor

    for types in (optimizer._foreach_supported_types, _foreach_utils._foreach_supported_types):
        if TpuTensor not in types:
            types.append(TpuTensor)


def opaque_to_dynamo(fn: Any) -> Any:
    """Mark ``fn`` (a Python kernel torch's dispatcher calls) as code dynamo never compiles, nor any function it
    calls; returns ``fn``.

    Under ``torch.compile`` a frame dynamo skips (a graph break in a loop) runs eagerly with dynamo's frame hook
    still on, so each Python function it calls is compiled as user code of its own: the dispatcher's call of a
    runtime kernel too, whose real tpu tensors dynamo cannot trace (DeBERTa's ``matmul`` failed that way). The
    mark is the one ``torch.compiler.disable(recursive=True)`` gives (skip this frame and every frame it calls)
    without its wrapper: set on the code object through dynamo's C hook, it costs nothing per call and needs no
    ``import torch._dynamo`` (most of a second)."""
    code = getattr(fn, "func", fn).__code__  # (a functools.partial: its function's)
    _EVAL_FRAME.set_code_exec_strategy(code, _EVAL_FRAME._FrameExecStrategy(_EVAL_FRAME._FrameAction.SKIP,
                                                                             _EVAL_FRAME._FrameAction.SKIP))
    return fn


_EVAL_FRAME = torch._C._dynamo.eval_frame


def register() -> None:
    """Make ``"tpu"`` a torch device backed by ``jax.devices()[0]`` (idempotent).

    Raises:
        RuntimeError: PrivateUse1 was already renamed to another backend.
    """
    if _STATE["registered"]:
        return
    from tpu_runtime import torch_tpu

    current = torch._C._get_privateuse1_backend_name()
    if current == "privateuseone":
        torch.utils.rename_privateuse1_backend("tpu")
    elif current != "tpu":
        raise RuntimeError(f"the PrivateUse1 backend is already named {current!r}; tpu_runtime needs it as 'tpu'")
    if not hasattr(torch.Tensor, "is_tpu"):
        torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
    torch._register_device_module("tpu", torch_tpu)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    lib = torch.library.Library("aten", "IMPL")
    for name in FACTORIES:
        lib.impl(name, opaque_to_dynamo(functools.partial(_factory, aten_overload(name))), "PrivateUse1")
    # ``x.pin_memory()`` / ``DataLoader(pin_memory=True)`` ask the current accelerator (tpu) for a pinned
    # allocator, which a Python backend cannot provide: these two ops are answered at BackendSelect
    # (every call passes it) for the tpu device and handed on unchanged for any other.
    lib.impl("_pin_memory", opaque_to_dynamo(_pin_memory), "BackendSelect", with_keyset=True)
    lib.impl("is_pinned", opaque_to_dynamo(_is_pinned), "BackendSelect", with_keyset=True)
    from tpu_runtime.dynamic import ctc_loss_lengths

    lib.impl("ctc_loss.Tensor", opaque_to_dynamo(ctc_loss_lengths), "AutogradPrivateUse1")
    from tpu_runtime.attention import sdpa

    lib.impl("scaled_dot_product_attention", opaque_to_dynamo(sdpa), "AutogradPrivateUse1")
    from tpu_runtime.bounds import one_hot

    lib.impl("one_hot", opaque_to_dynamo(one_hot), "AutogradPrivateUse1")
    from tpu_runtime.whole_ops import AUTOGRAD_KERNELS

    for name, kernel in AUTOGRAD_KERNELS.items():
        lib.impl(name, opaque_to_dynamo(kernel), "AutogradPrivateUse1")
    _STATE["library"] = lib
    # ``csr.to("tpu")`` is built by torch's C++ from tpu components and never reaches a tpu kernel: the
    # first op that reaches the device says why it cannot run (instead of torch's layout-check messages); so
    # do strided nested and quantized tensors (instead of the dispatcher's "Could not run ... 'Quantizedtpu'")
    from tpu_runtime.fallback import NO_LAYOUT, no_layout

    sparse = torch.library.Library("_", "IMPL")
    for key in NO_LAYOUT:
        sparse.fallback(opaque_to_dynamo(functools.partial(no_layout, key)), dispatch_key=key)
    _STATE["sparse"] = sparse
    from tpu_runtime import autocast

    _STATE["autocast"] = autocast.register()
    from torch.optim.optimizer import register_optimizer_step_post_hook

    from tpu_runtime.eager import after_optimizer_step

    _STATE["step_hook"] = register_optimizer_step_post_hook(after_optimizer_step)
    # torch.autocast("tpu") without dtype= computes in bfloat16, TPU's matmul type (PrivateUse1's default is float16)
    torch.set_autocast_dtype("tpu", torch.bfloat16)
    _register_foreach_type()
    from tpu_runtime import control_flow, serialization

    control_flow.register()

    serialization.register()
    _STATE["registered"] = True
    jax.devices()  # initialize the JAX backend now, not inside the first op


__all__ = ["register", "FACTORIES", "HOST_FACTORIES", "aten_overload", "check_index"]
