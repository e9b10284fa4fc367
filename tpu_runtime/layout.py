"""The strides and storage offset a view of a tpu tensor reports: the CPU's, from torch's own meta kernels.

A tpu tensor's value is always a dense array; its layout is only what it reports to torch. A view
whose layout in its storage is known (the storage itself, and any view op applied to such a view:
permute, view/reshape, slice, select, expand, unsqueeze, squeeze, diagonal, split, ``as_strided``…)
reports exactly what the CPU would (``x[:, 1:3].stride() == (n, 1)``, ``storage_offset() == 1``):
autograd picks gradient formulas by strides, AOTAutograd rebuilds a compiled function's output that
aliases an input with ``input.as_strided(size, stride, storage_offset)`` (which then indexes the
storage, :func:`tpu_runtime.dispatch._as_strided`) and dynamo replays an input view on its base and
checks that the layouts agree. The concrete views (:func:`tpu_runtime.values.make_view`) and the
tensors torch.compile traces (:mod:`tpu_runtime.compile_tensors`) take their layouts from here, so
the two agree.

The layout of a view op's output is computed once per (op, arguments, input layout) by running the
op on a ``meta`` tensor laid out as the input, outside every dispatch mode.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves

_META = torch.device("meta")
aten = torch.ops.aten

#: The view ops whose output is only another layout of its input's elements, of the same dtype (a view
#: op that changes values or dtype, ``_conj``, ``view_as_real``, ``view.dtype``, reports dense strides).
LAYOUT_VIEWS = frozenset({
    aten.permute.default, aten.view.default, aten.slice.Tensor, aten.select.int, aten.expand.default,
    aten.unsqueeze.default, aten.squeeze.dims, aten.diagonal.default, aten.unfold.default, aten.split.Tensor,
    aten.split_with_sizes.default, aten.as_strided.default, aten.alias.default,
})


def meta_layouts(func: Any, rest: tuple, kwargs: dict, shape: tuple, dtype: torch.dtype, strides: tuple,
                 offset: int) -> list | None:
    """``(strides, storage_offset)`` of each tensor output of ``func(x, *rest, **kwargs)`` for an ``x`` of
    ``shape``/``dtype`` laid out with ``strides`` at ``offset``, as torch lays them out; ``None`` when an
    output has no static layout or torch's meta kernel fails otherwise.

    Raises:
        RuntimeError: ``view`` of a layout the CPU cannot view (torch's message: use ``.reshape()``), or
            ``view(dtype)`` of another element size where the last dim's stride is not 1 (a channels-last tensor)."""
    span = offset + 1 + sum((n - 1) * abs(s) for n, s in zip(shape, strides)) if all(shape) else offset
    try:
        # (without the Python dispatcher, which torch.compile's tracing turns on: its ``view`` refuses with a
        # ValueError of its own wording, where the CPU's kernel raises the RuntimeError users see)
        with _disable_current_modes(), torch._C._DisableTorchDispatch(), torch._C._DisablePythonDispatcher():
            x = torch.empty((span,), dtype=dtype, device=_META).as_strided(shape, strides, offset)
            out = func(x, *rest, **kwargs)
    except RuntimeError as e:
        if (func is aten.view.default and "view size is not compatible" in str(e)) or func is aten.view.dtype:
            raise  # (the CPU refuses this view of this layout: .reshape() copies; a dtype view needs stride(-1) 1)
        return None
    except (ValueError, TypeError, IndexError, NotImplementedError):
        return None
    layouts = []
    for t in tree_leaves(out):
        if isinstance(t, torch.Tensor):
            stride, at = tuple(t.stride()), t.storage_offset()
            if not all(type(v) is int for v in (*stride, at)):
                return None
            layouts.append((stride, at))
    return layouts


__all__ = ["LAYOUT_VIEWS", "meta_layouts"]
