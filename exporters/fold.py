"""Constant folding for the exporters' jaxpr walk (ONNX and LiteRT): evaluate an eqn whose inputs are all constants.

The primitives that reach folding in practice (index arithmetic on shapes and
masks: reshape, slices, comparisons, add, select_n, casts, concatenation) are
evaluated with NumPy, which gives the same bits as XLA for them. Everything else is
bound eagerly in JAX; that compiles one XLA executable per primitive and shape
(~30 ms each), which used to dominate the export time of small models.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np


def _convert(x: np.ndarray, *, new_dtype: Any, **_: Any) -> np.ndarray | None:
    dst = np.dtype(new_dtype)
    if x.dtype.kind == "f" and dst.kind in "iu":
        return None  # XLA saturates and maps NaN to 0; NumPy's cast is undefined there
    if x.dtype.kind == "c" or dst.kind == "c":
        return None
    return x.astype(dst)


def _reshape(x: np.ndarray, *, new_sizes: Any, dimensions: Any = None, **_: Any) -> np.ndarray | None:
    return None if dimensions is not None else x.reshape(tuple(int(d) for d in new_sizes))


def _select_n(which: np.ndarray, *cases: np.ndarray) -> np.ndarray:
    if len(cases) == 1:
        return np.broadcast_to(cases[0], np.broadcast_shapes(which.shape, cases[0].shape))
    if which.dtype == np.bool_:
        return np.where(which, cases[1], cases[0])
    return np.choose(which, cases)


def _slice(x: np.ndarray, *, start_indices: Any, limit_indices: Any, strides: Any = None, **_: Any) -> np.ndarray:
    steps = strides or (1,) * x.ndim
    return x[tuple(slice(int(a), int(b), int(c)) for a, b, c in zip(start_indices, limit_indices, steps))]


def _binary(fn: Callable) -> Callable:
    return lambda x, y, **_: fn(x, y)


def _unary(fn: Callable) -> Callable:
    return lambda x, **_: fn(x)


#: jaxpr primitive name → NumPy evaluation ``(*arrays, **params) -> array | None``
#: (``None``: not exactly expressible in NumPy for these inputs; JAX evaluates it).
NUMPY_RULES: dict[str, Callable[..., Any]] = {
    "add": _binary(np.add), "sub": _binary(np.subtract), "mul": _binary(np.multiply),
    "neg": _unary(np.negative),
    "lt": _binary(np.less), "le": _binary(np.less_equal), "gt": _binary(np.greater),
    "ge": _binary(np.greater_equal), "eq": _binary(np.equal), "ne": _binary(np.not_equal),
    "and": _binary(np.bitwise_and), "or": _binary(np.bitwise_or), "not": _unary(np.invert),
    "select_n": lambda which, *cases, **_: _select_n(which, *cases),
    "convert_element_type": _convert,
    "reshape": _reshape,
    "slice": _slice,
    "squeeze": lambda x, *, dimensions, **_: np.squeeze(x, axis=tuple(dimensions)),
    "transpose": lambda x, *, permutation, **_: np.transpose(x, permutation),
    "rev": lambda x, *, dimensions, **_: np.flip(x, tuple(dimensions)),
    "concatenate": lambda *xs, dimension, **_: np.concatenate(xs, axis=dimension),
    "stack": lambda *xs, axis, **_: np.stack(xs, axis=axis),
}


def _const(val_type: Any, value: Any, aval: Any) -> Any:
    arr = np.asarray(value, dtype=getattr(aval, "dtype", None))
    return val_type(arr.shape, arr.dtype, const=arr)


def fold(eqn: Any, ins: list, val_type: Any) -> list:
    """Evaluate ``eqn`` on constant inputs now; return its outputs as constant ``val_type`` values
    (``val_type(shape, dtype, const=array)``: the exporter's value class)."""
    args = [np.asarray(v.full()) for v in ins]
    rule = NUMPY_RULES.get(eqn.primitive.name)
    if rule is not None and all(a.dtype.kind in "biuf" for a in args):
        with np.errstate(all="ignore"):  # integer wrap-around and inf/nan behave as in XLA
            out = rule(*args, **eqn.params)
        if out is not None:
            return [_const(val_type, out, eqn.outvars[0].aval)]
    with jax.enable_x64(True):
        out = eqn.primitive.bind(*[jax.device_put(a) for a in args], **eqn.params)
    outs = out if eqn.primitive.multiple_results else [out]
    return [_const(val_type, np.asarray(o), v.aval) for o, v in zip(outs, eqn.outvars)]
