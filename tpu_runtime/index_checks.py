"""The argument checks of the indexed writes and reads that PyTorch's kernels make on every device.

``index_add``, ``index_copy``, ``index_reduce``, ``index_put`` (``x[idx] = v``), ``put`` and ``take`` refuse a
source of another dtype than ``self`` and some index dtypes; their decompositions and table rows would cast the
source or take the index as it is, so a call the CPU refuses ran here. Each check raises the CPU's message, then
the op takes its usual route (its row of the lowering table or its decomposition).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from converter.lowering.dtypes import scalar_type_name
from tpu_runtime import dispatch as _dispatch  # (circular: used at call time only)
from tpu_runtime.adjusted import _row_route
from tpu_runtime.tensor import TpuTensor

aten = torch.ops.aten


def _source_dtype(message: Callable[[str, str], str]) -> Callable[[dict], None]:
    """A check that the source (``values`` of ``index_put``) has ``self``'s dtype; ``message(self's, source's)``."""
    def check(a: dict) -> None:
        src = a["source"] if "source" in a else a["values"]
        if src.dtype != a["self"].dtype:
            raise RuntimeError(message(scalar_type_name(a["self"].dtype), scalar_type_name(src.dtype)))
    return check


def _index_dtype(allowed: tuple, message: Callable[[str], str], error: type = RuntimeError) -> Callable[[dict], None]:
    """A check that the index tensor's dtype is one of ``allowed``; ``message(its dtype)``."""
    def check(a: dict) -> None:
        if a["index"].dtype not in allowed:
            raise error(message(scalar_type_name(a["index"].dtype)))
    return check


_INTS = (torch.int32, torch.int64)


def _long_index(op: str) -> Callable[[dict], None]:
    return _index_dtype((torch.int64,), lambda got: f"{op}(): Expected a long tensor for index, but got {got}")


def _int_index(op: str) -> Callable[[dict], None]:
    return _index_dtype(_INTS, lambda got: f"{op}(): Expected dtype int32/int64 for index but got: {got}")


def _scalar_type(op: str) -> Callable[[dict], None]:
    return _source_dtype(lambda s, t: f"{op}(): self ({s}) and source ({t}) must have the same scalar type")


def _indices_dtype(a: dict) -> None:
    """``x[idx]``: each index tensor an integer (int32/int64) or a mask (bool/uint8), as the CPU requires."""
    for idx in a["indices"]:
        if idx is not None and idx.dtype not in (torch.int64, torch.int32, torch.uint8, torch.bool):
            raise IndexError("tensors used as indices must be long, int, byte or bool tensors")


def _source_shape(a: dict) -> None:
    """``index_add``: the source has ``self``'s shape but along ``dim`` (a 0-d one: the whole shape), as the CPU
    checks (XLA would broadcast a smaller source)."""
    self, src = a["self"], a["source"]
    s, t = list(self.shape), list(src.shape)
    if self.dim() and src.dim():
        d = a["dim"] % self.dim()
        s.pop(d)
        t = t[:d] + t[d + 1:] if d < len(t) else t + [None]
    if s != t:
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the specified dimension. "
                           f"Got self.shape = {list(self.shape)} source.shape = {list(src.shape)}")


_FILL_INDEX = _index_dtype((torch.int64,), lambda got: "index_fill_(): Expected dtype int64 for index.", IndexError)


def _fill_value(a: dict) -> None:
    """``index_fill_``: a complex value into a real tensor is refused, as the CPU refuses it (``fill_`` takes one
    whose imaginary part is 0)."""
    if isinstance(a["value"], complex) and not a["self"].is_complex():
        raise RuntimeError("index_fill_(): Converting complex Scalar to non-complex type is not supported")


#: op → its checks, each given the call's arguments by name.
CHECKS: dict[Any, tuple] = {
    aten.index_add.default: (_int_index("index_add_"), _scalar_type("index_add_"), _source_shape),
    aten.index_reduce.default: (_int_index("index_reduce_"), _scalar_type("index_reduce_")),
    aten.index_copy.default: (_long_index("index_copy_"), _source_dtype(
        lambda s, t: f"index_copy_(): self and source expected to have the same dtype, but got (self) {s} and "
                     f"(source) {t}")),
    aten.index_fill.int_Scalar: (_FILL_INDEX, _fill_value),
    aten.index_fill.int_Tensor: (_FILL_INDEX,),
    aten.index_put.default: (_source_dtype(
        lambda s, t: f"Index put requires the source and destination dtypes match, got {s} for the destination and "
                     f"{t} for the source."),),
    aten.put.default: (_long_index("put_"), _source_dtype(
        lambda s, t: f"put_(): self and source expected to have the same dtype, but got self.dtype = {s} and "
                     f"source.dtype = {t}")),
    aten.take.default: (_long_index("take"),),
    aten.index_select.default: (_index_dtype(_INTS, lambda got: "index_select(): Expected dtype int32 or int64 for "
                                                                "index"),),
    aten.index.Tensor: (_indices_dtype,),
}


def _fill_mask(self: Any, indices: Any, values: Any) -> Any:
    """The mask ``x[mask] = v`` fills, when torch's ``index_put_`` takes it as ``masked_fill_`` (one bool/uint8 mask
    on ``self``'s device, a one-element host value: ``canDispatchToMaskedFill``), broadcastable to ``self``; else
    ``None``.

    Raises:
        IndexError: the mask's shape does not match the dims it indexes (torch's message).
    """
    if isinstance(values, TpuTensor) or not isinstance(values, torch.Tensor) or values.numel() != 1:
        return None
    mask, dim = None, 0
    for index in indices:
        if index is None:
            dim += 1
            continue
        if index.dtype not in (torch.bool, torch.uint8) or not isinstance(index, TpuTensor) or mask is not None:
            return None
        mask = index
        for j, size in enumerate(index.shape):
            if size != self.shape[dim + j]:
                raise IndexError(f"The shape of the mask {list(index.shape)} at index {j} does not match the shape of "
                                 f"the indexed tensor {list(self.shape)} at index {dim + j}")
        dim += index.dim()
    if mask is None:
        return None
    return mask.reshape(tuple(mask.shape) + (1,) * (self.dim() - dim))


def _index_put(func: Any, args: tuple, kwargs: dict) -> Any:
    """``index_put``: a fill of a mask by a one-element host value runs as ``masked_fill``, as torch runs it (the
    value cast as a scalar: ``int_x[int_x > 1] = torch.tensor(2.5)`` fills 2, where a device value of another dtype
    is refused); else :func:`checked`."""
    named = _named(func, args, kwargs)
    if not named.get("accumulate", False):
        mask = _fill_mask(named["self"], named["indices"], named["values"])
        if mask is not None:
            return aten.masked_fill.Scalar(named["self"], mask, named["values"].item())
    return checked(func, args, kwargs, named)


def _named(func: Any, args: tuple, kwargs: dict) -> dict:
    """The call's arguments by name."""
    return dict(zip((a.name for a in func._schema.arguments), args), **kwargs)


def checked(func: Any, args: tuple, kwargs: dict, named: dict | None = None) -> Any:
    """Run ``func``'s :data:`CHECKS` on its arguments (``named``: by name, if the caller has them), then ``func`` by
    its usual route.

    Raises:
        RuntimeError: an argument the CPU refuses, with its message (IndexError for ``index_fill``'s index, as
            the CPU)."""
    named = _named(func, args, kwargs) if named is None else named
    for check in CHECKS[func]:
        check(named)
    return _dispatch._route(func, args, kwargs, _inner_route(func))


def _inner_route(func: Any) -> tuple:
    """``func``'s route without its checks: its row of the lowering table, else its decomposition."""
    from converter.lowering import registry

    return _row_route(func, _dispatch._op_route if registry.find(func) is not None else _dispatch._decomp_route)


#: Special routes of :mod:`tpu_runtime.dispatch`.
HANDLERS: dict[Any, Callable] = {**{op: checked for op in CHECKS}, aten.index_put.default: _index_put}

__all__ = ["CHECKS", "HANDLERS", "checked"]
