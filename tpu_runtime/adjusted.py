"""Ops whose arguments the runtime adjusts before their row of the lowering table runs.

- ``_linalg_det``/``_linalg_slogdet`` of a real input that is not contiguous (``det(W.mT)``, ``det(x[:, ::2])``)
  run on its transpose made contiguous, whose LU (on the transposed layout the lowering factors) is the
  input's own: what PyTorch's backward expects for such an input (the determinant is the same); see
  ``converter.lowering.ops.linalg_decomp._factored``.
- ``scatter_reduce.two`` takes the CPU kernel's legacy reduce names ``"max"``/``"min"`` for ``"amax"``/``"amin"``
  (torch's shape function refuses them).
- ``nll_loss`` (``F.cross_entropy`` of ``(N, C)`` logits) forward and backward take a uint8 target as int64 (the
  CPU takes Long or Byte class targets; the decomposition's ``gather`` takes int32/int64 indices); other target
  dtypes, and any but int64 for ``nll_loss2d``, are refused with the CPU's messages.
- ``where.self`` takes a uint8 condition as bool, with torch's deprecation warning (its meta function refuses it).
- ``polygamma_(n)`` runs ``polygamma(n, self)`` into ``self``: its functional twin takes the arguments the other
  way round, so the in-place route does not find it by name.
- The bit shifts (``<<``, ``>>``, ``bitwise_left_shift``…) take a bool tensor operand in the dtype the result is
  promoted to (``bool_t << 2`` is int64 on the CPU; torch's meta functions refuse bool).
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import torch

from converter.lowering.dtypes import scalar_type_name
from tpu_runtime import dispatch as _dispatch  # (circular: used at call time only)
from tpu_runtime.tensor import TpuTensor

aten = torch.ops.aten


def _det(func: Any, args: tuple, kwargs: dict) -> Any:
    a = args[0]
    if type(a) is TpuTensor and not a.is_complex() and not a.is_contiguous():
        args = (a.mT.contiguous(),) + tuple(args[1:])
    return _dispatch._route(func, args, kwargs, _row_route(func))


def _scatter_reduce(func: Any, args: tuple, kwargs: dict) -> Any:
    if len(args) > 4 and args[4] in ("max", "min"):
        args = args[:4] + ("a" + args[4],) + tuple(args[5:])
    return _dispatch._route(func, args, kwargs, _row_route(func))


def _nll_target(func: Any, args: tuple, kwargs: dict) -> Any:
    i = 1 if func._schema.name.endswith("_forward") else 2  # (self, target, …) / (grad_output, self, target, …)
    target = args[i]
    name = scalar_type_name(target.dtype)
    if target.dtype != torch.int64 and "2d" in func._schema.name:  # the CPU's 2d kernel takes Long only
        raise RuntimeError(f"expected scalar type Long but found {name}")
    if target.dtype == torch.uint8:
        args = args[:i] + (target.long(),) + tuple(args[i + 1:])
    elif target.dtype != torch.int64:
        raise RuntimeError(f"expected target dtype to be Long or Byte, but got {name}")
    return _dispatch._route(func, args, kwargs, _row_route(func, _dispatch._decomp_route))


def _where(func: Any, args: tuple, kwargs: dict) -> Any:
    condition = args[0] if args else kwargs["condition"]
    if condition.dtype == torch.uint8:
        warnings.warn("where received a uint8 condition tensor. This behavior is deprecated and will be removed in a "
                      "future version of PyTorch. Use a boolean condition instead.", UserWarning, stacklevel=2)
        args, kwargs = ((condition.bool(),) + tuple(args[1:]), kwargs) if args else \
            (args, {**kwargs, "condition": condition.bool()})
    return _dispatch._route(func, args, kwargs, _row_route(func))


def _shift(func: Any, args: tuple, kwargs: dict) -> Any:
    a, b = args[0], args[1]
    if any(isinstance(t, torch.Tensor) and t.dtype == torch.bool for t in (a, b)):
        dtype = torch.result_type(a, b)
        if dtype != torch.bool:
            a, b = (t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.bool else t for t in (a, b))
            args = (a, b) + tuple(args[2:])
    return _dispatch._route(func, args, kwargs, _row_route(func))


def _polygamma_(func: Any, args: tuple, kwargs: dict) -> Any:
    """``polygamma_(Tensor(a!) self, int n)``: ``polygamma(n, self)`` cast and written into ``self``."""
    from tpu_runtime.execute import check_cast
    from tpu_runtime.inplace import assign

    self, n = args[0], args[1] if len(args) > 1 else kwargs["n"]
    result = _dispatch._route(aten.polygamma.default, (n, self), {})
    check_cast(result.dtype, self.dtype)
    assign(self, result)
    return self


def _row_route(func: Any, make: Callable[[Any], tuple] | None = None) -> tuple:
    """``func``'s row of the lowering table as an ``op`` route (or the route ``make`` gives: its decomposition's)."""
    route = _ROW_ROUTES.get(func)
    if route is None:
        route = _ROW_ROUTES[func] = (make or _dispatch._op_route)(func) + (func,)
    return route


_ROW_ROUTES: dict = {}

#: Special routes of :mod:`tpu_runtime.dispatch`.
HANDLERS: dict[Any, Callable] = {
    aten._linalg_det.default: _det,
    aten._linalg_slogdet.default: _det,
    aten.scatter_reduce.two: _scatter_reduce,
    aten.where.self: _where,
    aten.polygamma_.default: _polygamma_,
    **{getattr(packet, name): _shift for packet in (aten.__lshift__, aten.__rshift__)
       for name in ("Scalar", "Tensor")},
    **{getattr(packet, name): _shift for packet in (aten.bitwise_left_shift, aten.bitwise_right_shift)
       for name in ("Tensor", "Tensor_Scalar", "Scalar_Tensor")},
    **{op: _nll_target for op in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default,
                                  aten.nll_loss_backward.default, aten.nll_loss2d_backward.default)},
}

__all__ = ["HANDLERS"]
