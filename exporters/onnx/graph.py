"""Values and the ONNX graph under construction (nodes, deduplicated initializers, dynamic dims)."""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import ml_dtypes
import numpy as np
from onnx import helper, numpy_helper

from converter.errors import ExportError
from exporters.jaxpr_walk import JaxprValue, is_static  # noqa: F401 (re-exported for the rules)

_BF16 = np.dtype(ml_dtypes.bfloat16)
#: float64 computes as float32 in the ONNX model (many ONNX Runtime CPU kernels are float-only), and so does
#: bfloat16: ONNX Runtime's CPU kernels have almost none (MatMul, Max… refuse the session) and ONNX's Conv,
#: among others, takes none. A bfloat16 value keeps its type where the file shows it (:data:`_EDGE`).
_NARROW = {np.dtype(np.float64): np.dtype(np.float32), _BF16: np.dtype(np.float32)}
#: Narrowed dtypes the model's inputs, outputs and stored weights keep (a Cast at each edge; an explicit
#: conversion to one inside rounds to it: :meth:`OnnxGraph.cast`). float64 is float32 there too (the artifact
#: casts).
_EDGE = frozenset({_BF16})


#: dtypes ONNX Runtime's CPU Where has no kernel for → the one it selects them in (int → int casts wrap: exact).
_WHERE_WIDER = {np.dtype(np.int16): np.dtype(np.int32), np.dtype(np.uint16): np.dtype(np.int32),
                np.dtype(np.uint64): np.dtype(np.int64)}


def onnx_dtype(dtype: Any) -> np.dtype:
    """The dtype a value has inside the ONNX model (float64 and bfloat16 run as float32)."""
    d = np.dtype(dtype)
    return _NARROW.get(d, d)


def edge_dtype(dtype: Any) -> np.dtype:
    """The dtype of a model input or output, or stored weight, holding values of ``dtype``."""
    d = np.dtype(dtype)
    return d if d in _EDGE else onnx_dtype(d)


def elem_type(dtype: Any) -> int:
    """The ``TensorProto`` element type of a NumPy dtype (after narrowing)."""
    return helper.np_dtype_to_tensor_dtype(onnx_dtype(dtype))


class Val(JaxprValue):
    """One jaxpr value: a constant (NumPy) or an ONNX tensor name.

    ``shape`` is the logical shape (``jax.export`` symbolic dims allowed); ``base``
    is the shape actually stored, of the same rank, where a dim may be 1 while the
    logical dim is larger: a broadcast that is still pending, which binary ONNX ops
    resolve by their own (NumPy) broadcasting and :meth:`OnnxGraph.tensor` expands
    for everything else. ``dtype`` is the jaxpr dtype (see :func:`onnx_dtype`).
    """

    __slots__ = ("shape", "dtype", "const", "name", "base")

    def __init__(self, shape: Sequence, dtype: Any, *, const: np.ndarray | None = None, name: str | None = None,
                 base: Sequence | None = None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.const = const
        self.name = name
        self.base = tuple(const.shape) if const is not None else tuple(self.shape if base is None else base)
        if len(self.base) != len(self.shape):
            raise ExportError(f"internal error: value rank mismatch {self.shape} vs {self.base}")

    def __repr__(self) -> str:
        kind = "const" if self.is_const else self.name
        return f"Val({kind} {self.dtype.name}{list(self.shape)} base={list(self.base)})"


class OnnxGraph:
    """Collects nodes and initializers; names are deterministic (a counter per hint).

    Attributes:
        notes: conversion decisions shared with the artifact.
        dim_env: example value of each symbolic dim name.
        dim_sources: for each symbolic dim name, the (graph input name, axis, scale, offset) carrying it: that
            axis's size is ``scale * dim + offset`` (``2 * Dim("h")``: 2, 0; a plain dim: 1, 0).
    """

    def __init__(self, notes: list[str]):
        self.notes = notes
        self.nodes: list[Any] = []
        self.initializers: list[Any] = []
        self._consts: dict[tuple, str] = {}
        self._counts: dict[str, int] = {}
        self._dims: dict[Any, str] = {}
        self.dim_env: dict[str, int] = {}
        self.dim_sources: dict[str, tuple[str, int, int, int]] = {}

    def note(self, text: str) -> None:
        """Record a conversion decision once."""
        if text not in self.notes:
            self.notes.append(text)

    def fresh(self, hint: str) -> str:
        """A new unique tensor name."""
        n = self._counts.get(hint, 0)
        self._counts[hint] = n + 1
        return f"{hint}_{n}"

    # -- nodes and constants -------------------------------------------------------------
    def op(self, op_type: str, inputs: Sequence[str], n_out: int = 1, **attrs: Any) -> Any:
        """Append a node; returns its output name (a list when ``n_out > 1``)."""
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        attrs = {k: v for k, v in attrs.items() if v is not None}
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=f"n{len(self.nodes)}_{op_type}",
                                           **attrs))
        return outs[0] if n_out == 1 else outs

    def const(self, array: Any, dtype: Any = None, narrow: bool = True) -> str:
        """An initializer holding ``array`` (identical constants are stored once); float64 is
        stored as float32 unless ``narrow`` is false; bfloat16 is stored as itself, read through a Cast to float32
        (one per constant)."""
        arr = np.asarray(array, dtype=dtype)
        if narrow and arr.dtype in _EDGE:
            stored = self.const(arr, narrow=False)
            key = ("cast", stored)
            name = self._consts.get(key)
            if name is None:
                name = self._consts[key] = self.op("Cast", [stored], to=elem_type(arr.dtype))
            return name
        # np.require keeps a 0-d constant 0-d (np.ascontiguousarray would make it shape (1,), and
        # every scalar result it touches would come out as (1,))
        arr = np.require(arr.astype(onnx_dtype(arr.dtype), copy=False) if narrow else arr, requirements="C")
        key = (arr.dtype.str, arr.shape, hashlib.sha256(arr.tobytes()).hexdigest())
        name = self._consts.get(key)
        if name is None:
            name = self.fresh("const" if arr.size <= 16 else "weight")
            self.initializers.append(numpy_helper.from_array(arr, name))
            self._consts[key] = name
        return name

    def i64(self, values: Sequence[int]) -> str:
        """A 1-D int64 constant."""
        return self.const(np.asarray(list(values), np.int64))

    def cast(self, name: str, src: Any, dst: Any) -> str:
        """Cast ``name`` from dtype ``src`` to ``dst`` (no node when they are equal in the model; to bfloat16,
        which computes as float32, a Cast there and back: the value rounds as torch's does)."""
        if np.dtype(dst) in _EDGE and np.dtype(src) != np.dtype(dst):
            rounded = self.op("Cast", [name], to=helper.np_dtype_to_tensor_dtype(np.dtype(dst)))
            return self.op("Cast", [rounded], to=elem_type(dst))
        if onnx_dtype(src) == onnx_dtype(dst):
            return name
        if np.dtype(dst).itemsize == 1 and np.dtype(dst).kind not in "biu":  # float8: lax's conversion does not saturate
            return self.op("Cast", [name], to=elem_type(dst), saturate=0)
        return self.op("Cast", [name], to=elem_type(dst))

    # -- values --------------------------------------------------------------------------
    def tensor(self, v: Val, expand: bool = True) -> str:
        """The tensor name of ``v`` (constants become initializers); with ``expand`` a pending
        broadcast is materialized with Expand, else the stored (``base``-shaped) tensor is returned."""
        name = self.const(v.const) if v.is_const else v.name
        if expand and v.pending:
            name = self.op("Expand", [name, self.shape_tensor(v.shape)])
        return name

    def val(self, name: str, shape: Sequence, dtype: Any, base: Sequence | None = None) -> Val:
        """A non-constant value."""
        return Val(shape, dtype, name=name, base=base)

    # -- dynamic dims --------------------------------------------------------------------
    def example(self, d: Any) -> int:
        """The sample value of a (possibly symbolic) dim."""
        if is_static(d):
            return int(d)
        return int(d._evaluate(self.dim_env))

    def shape_tensor(self, dims: Sequence) -> str:
        """A 1-D int64 tensor holding ``dims``, computed at run time for symbolic dims."""
        if all(is_static(d) for d in dims):
            return self.i64([int(d) for d in dims])
        parts = [self.dim_tensor(d) for d in dims]
        return parts[0] if len(parts) == 1 else self.op("Concat", parts, axis=0)

    def where(self, cond: str, a: str, b: str, dtype: Any) -> str:
        """``Where(cond, a, b)`` for values of ``dtype``; bool values (ONNX Runtime's Where has no bool
        kernel) as ``Or(And(cond, a), And(Not(cond), b))``; int16 / uint16 / uint64, which it has no kernel for
        either (measured on ONNX Runtime 1.32, CPU), selected in int32 / int64 and cast back (exact)."""
        inside = onnx_dtype(dtype)
        wide = _WHERE_WIDER.get(inside)
        if wide is not None:
            picked = self.op("Where", [cond, self.cast(a, inside, wide), self.cast(b, inside, wide)])
            return self.cast(picked, wide, inside)
        if np.dtype(dtype) != np.bool_:
            return self.op("Where", [cond, a, b])
        return self.op("Or", [self.op("And", [cond, a]), self.op("And", [self.op("Not", [cond]), b])])

    def reshape(self, name: str, dims: Sequence) -> str:
        """Reshape ``name`` to ``dims`` with ``allowzero=1``: a 0 in the shape operand is a zero-size
        dim (ONNX's default copies the input's dim there, which no jaxpr reshape means)."""
        return self.op("Reshape", [name, self.reshape_shape(dims)], allowzero=1)

    def reshape_shape(self, dims: Sequence) -> str:
        """A shape operand for :meth:`reshape`: constant with ``-1`` for a single dynamic dim, else
        computed (also when a dim is 0: with ``allowzero`` a ``-1`` beside a 0 is ambiguous)."""
        dynamic = sum(not is_static(d) for d in dims)
        if dynamic == 0 or (dynamic == 1 and all(int(d) != 0 for d in dims if is_static(d))):
            return self.i64([int(d) if is_static(d) else -1 for d in dims])
        return self.shape_tensor(dims)

    def dim_tensor(self, d: Any) -> str:
        """An int64 ``[1]`` tensor holding dim ``d`` at run time (sums of products of symbols,
        ``floordiv``, ``mod``, ``max`` and ``min`` of them)."""
        if is_static(d):
            return self.i64([int(d)])
        if d in self._dims:
            return self._dims[d]
        total = None
        for term, coeff in d._sorted_terms:
            value = self.i64([coeff]) if term.is_constant else None
            for factor, power in ([] if term.is_constant else term._factors):
                for _ in range(power):
                    f = self._factor_tensor(factor, d)
                    value = f if value is None else self.op("Mul", [value, f])
            if not term.is_constant and coeff != 1:
                value = self.op("Mul", [value, self.i64([coeff])])
            total = value if total is None else self.op("Add", [total, value])
        self._dims[d] = total
        return total

    _DIM_OPS = {"floordiv": "Div", "mod": "Mod", "max": "Max", "min": "Min"}

    def _factor_tensor(self, factor: Any, whole: Any) -> str:
        if factor.var is not None:
            return self._var_tensor(factor.var)
        op = self._DIM_OPS.get(getattr(factor, "operation", None))
        if op is None:
            raise ExportError(f"dynamic dim expression {whole} is not supported by the ONNX exporter")
        a, b = (self.dim_tensor(o) for o in factor.operands)
        # dims and divisors are positive here, so truncating Div is floor division
        return self.op(op, [a, b])

    def _var_tensor(self, name: str) -> str:
        key = ("var", name)
        if key not in self._dims:
            if name not in self.dim_sources:
                raise ExportError(f"dynamic dim {name} does not appear in any input")
            src, axis, scale, offset = self.dim_sources[name]
            size = self.op("Shape", [src], start=axis, end=axis + 1)
            if offset:  # a derived dim (``2 * h + 1``): its symbol is (size - offset) // scale (sizes positive)
                size = self.op("Sub", [size, self.i64([offset])])
            if scale != 1:
                size = self.op("Div", [size, self.i64([scale])])
            self._dims[key] = size
        return self._dims[key]


def value_info(name: str, dtype: Any, shape: Sequence, *, edge: bool = True) -> Any:
    """A graph input/output declaration; symbolic dims become ``dim_param`` names. ``edge``: a model input or
    output (its type is :func:`edge_dtype`'s), else a value inside the model (a loop body's: :func:`onnx_dtype`'s)."""
    dims = [int(d) if is_static(d) else str(d) for d in shape]
    stored = edge_dtype(dtype) if edge else onnx_dtype(dtype)
    return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(stored), dims)


__all__ = ["OnnxGraph", "Val", "edge_dtype", "elem_type", "is_static", "onnx_dtype", "value_info"]
