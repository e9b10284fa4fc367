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
permuted CPU tensor allocates so). The results of ops on laid-out tensors report the layout torch's meta
kernel gives them for the inputs' layouts (:func:`laid_out`: an elementwise op follows its inputs, so
``(x.t() * 2).t().view(-1)`` works as on the CPU), a convolution's the channels-last format of its input or
weight, and ``new_empty_strided`` (autograd lays a gradient out as its leaf with it) the strides it is given.
"""

from __future__ import annotations

from typing import Any

import torch
from torch._prims_common import (is_non_overlapping_and_dense_or_false, make_channels_last_2d_strides_for,
                                 make_channels_last_3d_strides_for)
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves

from tpu_runtime.cache import CACHE
from tpu_runtime.plans import META_FUNCTIONS, OpPlan, _fill, _Slot, rebuild
from tpu_runtime.tensor import TpuTensor, dense_strides, opaque_tensor, wrap, wrap_strided

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


#: (plan uid, each tensor input's strides or None) → each output's strides (``None``: dense).
_OUTPUTS: dict[tuple, tuple] = {}
CACHE.on_clear(_OUTPUTS.clear)


def laid_out(plan: OpPlan, ins: list, values: tuple) -> Any:
    """The op's result: ``values`` wrapped, each reporting the strides torch gives that output when its inputs
    are laid out as ``ins`` report (an elementwise op on ``x.t()`` is laid out as ``x.t()``, so
    ``(x.t() * 2).t().view(-1)`` works as on the CPU); from the op's meta kernel, once per input layouts."""
    key = (plan.uid,) + tuple(tuple(x.stride()) if type(x) is TpuTensor and (x._strides is not None or x._opaque)
                              else None for x in ins)
    strides = _OUTPUTS.get(key)
    if strides is None:
        if len(_OUTPUTS) > 8192:
            _OUTPUTS.clear()
        strides = _OUTPUTS[key] = _output_strides(plan, ins)
    outs = [wrap(v, spec) if st is None else wrap_strided(v, spec, st, 0)
            for v, spec, st in zip(values, plan.out_specs, strides)]
    return outs[0] if type(plan.structure) is _Slot else rebuild(plan, outs)


def _output_strides(plan: OpPlan, ins: list) -> tuple:
    """Each output's strides as the op's meta kernel lays it out for inputs laid out as ``ins`` (``None``: dense,
    or not a layout dense in some order)."""
    dense = (None,) * len(plan.out_specs)
    targs, tkwargs = plan.extra.get("targs"), plan.extra.get("tkwargs", {})
    if targs is None or plan.random:
        return dense
    metas = [torch.empty_strided(tuple(x.shape), tuple(x.stride()), dtype=x.dtype, device="meta")
             if isinstance(x, torch.Tensor) else x for x in ins]
    fn = META_FUNCTIONS.get(plan.op, plan.op)
    try:
        with _disable_current_modes(), torch._C._DisableTorchDispatch():
            out = fn(*_fill(targs, metas), **_fill(tkwargs, metas))
    except Exception:  # noqa: BLE001 (a meta kernel that does not take these layouts: dense, as before)
        return dense
    leaves = [t for t in tree_leaves(out) if isinstance(t, torch.Tensor)]
    if len(leaves) != len(plan.out_specs):
        return dense
    if plan.op is torch.ops.aten.convolution.default:
        return (_convolution_format(leaves[0], *_fill(targs[:2], metas)),)
    strides = []
    for t, (shape, _) in zip(leaves, plan.out_specs):
        st = tuple(t.stride())
        keep = tuple(t.shape) == shape and st != dense_strides(shape) and is_non_overlapping_and_dense_or_false(t)
        strides.append(st if keep else None)
    return tuple(strides)


def _convolution_format(out: torch.Tensor, x: torch.Tensor, w: torch.Tensor) -> tuple | None:
    """A convolution's output layout: channels-last when its input or weight is (the CPU's kernels choose the
    format so; the meta kernel answers dense)."""
    return None if convolution_format(out.dim(), x, w) is None else channels_last_strides(tuple(out.shape))


def convolution_format(rank: int, x: torch.Tensor, w: torch.Tensor) -> Any:
    """The memory format of a convolution's output of ``rank`` dims: channels-last (2-d or 3-d) when its input ``x``
    or weight ``w`` is, as the CPU's kernels choose; ``None``: contiguous."""
    for fmt, (r, _) in _FORMATS.items():
        if rank == r and any(t.is_contiguous(memory_format=fmt) and not t.is_contiguous() for t in (x, w)):
            return fmt
    return None


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
    """``clone``: the copy, reporting the channels-last strides its ``memory_format`` asks for (or preserves).

    A tpu tensor's value is an immutable array (a write gives its storage a new one), so the copy is a new
    storage holding the source's value as it reads now: no device work, where a copy op cost one executable in
    strict eager and one node in fused (``x.t().contiguous()`` read the view, then copied it). An in-place write
    into either side leaves the other as it was: it replaces one storage's value, and an array that two storages
    hold is never donated (:func:`tpu_runtime.eager.strict.run_into`, :func:`tpu_runtime.eager.fused._donation`
    count references)."""
    from tpu_runtime.execute import run_op
    from tpu_runtime.values import read

    x = args[0] if args else None
    if type(x) is TpuTensor and x._fake is None and len(args) == 1 and kwargs.keys() <= {"memory_format"}:
        out = wrap(read(x), x._spec)
    else:
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
    """``out``, the result of a ``*_like``/``new_*`` op: a ``*_like`` of a laid-out template (or given
    ``memory_format=``) reports that layout, as on the CPU, and ``new_empty_strided`` the strides it is given
    when they are dense in some order (other ``new_*`` ones are dense there too)."""
    x = args[0] if args else None
    if func is torch.ops.aten.new_empty_strided.default and type(out) is TpuTensor:  # (autograd's gradient
        shape, strides = out._spec[0], tuple(int(s) for s in args[2])      # layout: the parameter's)
        return with_strides(out, strides if preserved_strides(shape, strides) == strides else None)
    if type(out) is TpuTensor and type(x) is TpuTensor and (x._opaque or x._strides is not None
                                                             or "memory_format" in kwargs) \
            and func._schema.name.endswith("_like"):
        return with_strides(out, requested(kwargs.get("memory_format"), out._spec[0], x))
    return out
