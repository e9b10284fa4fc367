"""The CPU's refusals of a call on tpu tensors, asked of PyTorch itself: the same call on CPU tensors of the inputs'
shapes (ones, zeros) raises, and that error is raised for the tpu tensors, with the op and the user's line as a note.

A call refused for its dtypes (:func:`raise_unsupported_dtype`: ``softmax`` of an int tensor), one whose lowering or
meta kernel failed (:func:`raise_as_on_cpu`, :func:`raise_cpu_refusal`), and the calls of :data:`CPU_CHECKED`, which
the CPU's kernel refuses and its meta kernel takes (XLA would compute something). Each is asked once per plan (a new
call signature).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable

import torch

from converter.errors import caller_location
from tpu_runtime.plans import _META, _fill, _templates
from tpu_runtime.tensor import TpuTensor

#: Inputs larger than this (elements in all) are not rebuilt on the CPU to reproduce an error.
_REPRO_NUMEL = 1 << 22


_aten = torch.ops.aten


def _integer_arange(args: tuple, kwargs: dict) -> bool:
    """An ``arange`` into an integer dtype with a fractional bound or step (the CPU truncates them first)."""
    dtype = kwargs.get("dtype") or (kwargs["out"].dtype if "out" in kwargs else None)
    return dtype is not None and not dtype.is_floating_point and not dtype.is_complex \
        and any(type(a) is float and not a.is_integer() for a in args)


#: Ops whose CPU kernel refuses calls their meta kernel takes (XLA would compute something) → whether a call may be
#: one: such a call signature is run once on CPU tensors of zeros (:func:`raise_as_on_cpu`) and the CPU's error
#: raised. A convolution's negative padding (XLA crops), ``masked_scatter``'s uint8 mask, ``histogramdd``'s bins of
#: another count than the dims, ``arange``'s step that truncates to 0 in an integer dtype, a bool ``cumsum``/``cumprod``
#: ``dtype=`` (the CPU has no bool kernel for them).
CPU_CHECKED: dict[Any, Callable[[tuple, dict], bool]] = {
    _aten.convolution.default: lambda args, kwargs: any(p < 0 for p in args[4]),
    _aten.masked_scatter.default: lambda args, kwargs: args[1].dtype != torch.bool,
    _aten._histogramdd_bin_edges.default: lambda args, kwargs: True,
    _aten.arange.start_out: _integer_arange,
    _aten.arange.start_step: _integer_arange,
    _aten.cumsum.default: lambda args, kwargs: kwargs.get("dtype") is torch.bool,
    _aten.cumprod.default: lambda args, kwargs: kwargs.get("dtype") is torch.bool,
}


def raise_as_on_cpu(func: Any, args: tuple, kwargs: dict, dyn: bool | None, error: Exception | None) -> None:
    """Raise what PyTorch on the CPU raises for this call, if it refuses it (shapes that do not match, a dim out
    of range): the same exception type and message a user's ``except`` expects; the op and the user's line are
    added as a note. Returns when the meta failure is the runtime's own (no meta kernel, a data-dependent shape),
    or when the CPU's refusal is not of ``error``'s type or a kindred one (:data:`_KINDRED`; ``None``: any refusal
    is raised; so is it after an arithmetic error in torch's Python meta function itself: ``upsample_bicubic2d``'s
    to an empty size divides by it)."""
    if isinstance(error, NotImplementedError):  # no meta kernel, or a data-dependent output shape
        return
    if isinstance(error, ArithmeticError):
        error = None
    templates = _templates(func, args, kwargs, dyn)
    if sum(x.numel() for x in templates[2] if isinstance(x, torch.Tensor)) > _REPRO_NUMEL:
        return
    try:
        _on_cpu(func, templates, torch.zeros, shrink=False, quiet=False)
    except Exception as e:  # noqa: BLE001 (re-raised as it is)
        if error is not None and (isinstance(e, NotImplementedError) or not isinstance(e, _KINDRED.get(
                type(error), type(error)))):
            return  # (a CPU_CHECKED call, error None: the CPU's missing kernel is its refusal too)
        e.add_note(f"(raised for the tpu tensors of {func} at {caller_location()})")
        raise e.with_traceback(None) from None


#: A meta kernel's error type → the CPU errors raised for it (the meta's ``RuntimeError`` of an empty reduction
#: ``amax(0)`` of a (0, 3) tensor is the CPU kernel's ``IndexError``: a dim check too).
_KINDRED = {RuntimeError: (RuntimeError, IndexError)}


#: Dtypes whose support :func:`raise_unsupported_dtype` asks the CPU about (float16/bfloat16 are not: the CPU lacks
#: kernels for some of them that accelerators have).
_PROBED = frozenset({torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64, torch.uint16,
                     torch.uint32, torch.uint64, torch.complex64, torch.complex128})
#: Inputs up to this many elements in all are rebuilt at their shapes by the probe; larger ones with size-1 dims.
_PROBE_NUMEL = 1 << 14
#: Ops whose integer inputs accelerators take where the CPU refuses them: ``histc`` (CUDA's kernel counts integer
#: data; transformers' mixture-of-experts layers count tokens per expert with ``histc`` of int32 expert ids on
#: every device but the CPU). Not probed: they run.
_ACCELERATOR_DTYPES = frozenset({torch.ops.aten.histc.default})


def raise_unsupported_dtype(func: Any, args: tuple, kwargs: dict, dyn: bool | None) -> None:
    """Raise what PyTorch on the CPU raises when it refuses this call for the dtype of its integer, bool or complex
    inputs (``softmax`` of an int tensor: ``NotImplementedError``; ``sign`` of a complex one; ``fill_`` of an int8
    tensor with 1e10): the same call on CPU tensors of ones fails, and succeeds with those inputs as float32. XLA
    would compute such a call (an int softmax truncated to 0, a bool matmul); the error's type is the CPU's, so an
    ``except NotImplementedError`` catches it as on the CPU. Asked once per plan (a new call signature)."""
    if func in _ACCELERATOR_DTYPES:
        return
    templates = _templates(func, args, kwargs, dyn)
    tensors = [x for x in templates[2] if isinstance(x, TpuTensor)]
    if not any(x.dtype in _PROBED for x in tensors) and not _overflows(tensors, args, kwargs):
        return
    if func._schema.name.endswith("_backward") and not any(x.dtype.is_complex for x in tensors):
        # a backward op's integer inputs are the indices or targets its forward took, and its CPU kernel trusts
        # them to fit its other inputs' shapes: on made-up data (ones, shrunk shapes) it may read out of bounds
        # (``_ctc_loss_backward`` crashed the process)
        return
    e = dtype_refusal(func, templates)
    if e is None:
        return
    if "without overflow" in str(e):  # (a python number the floating tensor's dtype cannot hold)
        e.add_note(f"(raised for the tpu tensors of {func} at {caller_location()}, as on the CPU)")
    else:
        e.add_note(f"(raised for the tpu tensors of {func} at {caller_location()}: the CPU refuses their dtypes)")
    raise e.with_traceback(None) from None


def dtype_refusal(func: Any, templates: tuple) -> Exception | None:
    """The CPU's error for a call (``templates``: :func:`_templates`'s, or stand-ins of the same form whose device
    inputs are meta tensors: :func:`tpu_runtime.graph_checks.meta_templates`) whose dtypes it refuses: the call
    fails on CPU tensors of ones and succeeds with the :data:`_PROBED` inputs (or one of them: an index stays an
    int) as float32; also a python number that does not fit a floating input ("without overflow"). ``None`` when
    the CPU takes the call or refuses it for another reason."""
    try:
        _on_cpu(func, templates)
    except Exception as e:  # noqa: BLE001 (returned as it is when the dtypes are the cause)
        if "without overflow" in str(e):
            return e
        probed = [i for i, x in enumerate(templates[2]) if _stands_in(x) and x.dtype in _PROBED]
        for as_float in [tuple(probed)] + ([(i,) for i in probed] if len(probed) > 1 else []):
            try:
                _on_cpu(func, templates, as_float=as_float)
            except Exception:  # noqa: BLE001 (refused for another reason too)
                continue
            return e
    return None


def _stands_in(x: Any) -> bool:
    """Whether a template's input is a device tensor the CPU probes rebuild (a tpu tensor, or a meta stand-in)."""
    return isinstance(x, TpuTensor) or (isinstance(x, torch.Tensor) and x.is_meta)


def _on_cpu(func: Any, templates: tuple, make: Callable = torch.ones, as_float: tuple = (), shrink: bool = True,
            quiet: bool = True) -> None:
    """``func`` on CPU tensors made by ``make`` (ones, zeros) in place of a call's tpu tensors (``templates``:
    :func:`_templates`'s): of their shapes, or (``shrink``) of size-1 dimensions past :data:`_PROBE_NUMEL` elements
    in all; the inputs at the positions ``as_float`` as float32. ``quiet``: its warnings are not shown (the user's
    call gives its own)."""
    targs, tkwargs, ins = templates
    small = not shrink or sum(x.numel() for x in ins if _stands_in(x)) <= _PROBE_NUMEL
    cpu = [make(tuple(x.shape) if small else (1,) * x.dim(), dtype=torch.float32 if i in as_float else x.dtype)
           if _stands_in(x) else x for i, x in enumerate(ins)]
    fill = {k: (torch.device("cpu") if v is _META else v) for k, v in _fill(tkwargs, cpu).items()}
    with warnings.catch_warnings():
        if quiet:
            warnings.simplefilter("ignore")
        func(*_fill(targs, cpu), **fill)


def _overflows(tensors: list, args: tuple, kwargs: dict) -> bool:
    """Whether a python number among the call's arguments is finite and beyond the range of a floating input's dtype
    (``f16.fill_(1e10)``: the CPU refuses it; XLA would write ``inf``), or complex next to real tensors (``clamp(x,
    min=1j)``: the CPU refuses to convert it; XLA would compare real parts; ``x + 1j`` it accepts)."""
    if any(type(a) is complex for a in (*args, *kwargs.values())) and not all(x.dtype.is_complex for x in tensors):
        return True
    numbers = [abs(a) for a in (*args, *kwargs.values()) if type(a) in (int, float) and math.isfinite(a)]
    if not numbers:
        return False
    top = max(numbers)
    return any(top > torch.finfo(x.dtype).max for x in tensors if x.dtype.is_floating_point)


def raise_cpu_refusal(func: Any, args: tuple, kwargs: dict, dyn: bool | None, dtype_only: bool = False,
                      keep: Callable[[str], bool] | None = None) -> None:
    """After the op's lowering (or meta kernel) failed on this call: raise what PyTorch on the CPU raises for it, if it
    refuses it too (``bitwise_and`` of floats: its ``NotImplementedError``), instead of the lowering's error;
    ``dtype_only``: only a refusal of a dtype ("not implemented for 'Float'"); ``keep``: only a refusal whose message
    it accepts. A random op is not asked (it would draw from the CPU's generator)."""
    if torch.Tag.nondeterministic_seeded in func.tags:
        return
    try:
        _on_cpu(func, _templates(func, args, kwargs, dyn))
    except Exception as e:  # noqa: BLE001 (re-raised as it is)
        if "Could not run" in str(e) or (dtype_only and "not implemented for '" not in str(e)) \
                or (keep is not None and not keep(str(e))):
            return  # (no CPU kernel: the lowering's error says more; or perhaps the ones it ran on)
        e.add_note(f"(raised for the tpu tensors of {func} at {caller_location()}, as on the CPU)")
        raise e.with_traceback(None) from None


def _refuse_dtypes(func: Any, args: tuple, kwargs: dict, dyn: bool | None) -> None:
    """:func:`raise_unsupported_dtype`; a random op asks the CPU with its generator's state put back afterwards
    (the CPU's call draws from it): ``uniform_``/``normal_`` of an integer tensor, ``random_`` of a complex one."""
    if torch.Tag.nondeterministic_seeded not in func.tags:
        raise_unsupported_dtype(func, args, kwargs, dyn)
        return
    with torch.random.fork_rng(devices=[]):
        raise_unsupported_dtype(func, args, kwargs, dyn)


__all__ = ["CPU_CHECKED", "dtype_refusal", "raise_as_on_cpu", "raise_cpu_refusal", "raise_unsupported_dtype"]
