"""Values and the emitter: what a rule sees while turning jaxpr eqns into TFLite ops.

A :class:`Val` is one jaxpr value. It is either a constant (a NumPy array) or a
TFLite tensor, and it carries two lazy transformations that rules resolve only
when a consumer needs them:

* ``perm`` — the layout. The TFLite tensor holds the logical value transposed by
  ``perm`` (``physical = logical.transpose(perm)``). A conv produces NCHW values
  stored NHWC (``perm=(0, 2, 3, 1)``); elementwise ops, reductions, pools, pads,
  slices and concatenations keep whatever layout their inputs have, and a jaxpr
  ``transpose`` only changes ``perm``. So a CNN gets no TRANSPOSE between layers:
  one appears only where a layout-sensitive consumer (a reshape that mixes
  channels and pixels, a matmul) needs the logical order.
* ``base`` — pending broadcast. ``base`` is the logical shape with 1 where a
  ``broadcast_in_dim`` has not been materialized; TFLite's binary ops broadcast,
  so BROADCAST_TO is emitted only for consumers that need the full shape.

Dims are ``int`` or a ``jax.export`` symbolic dim; a symbolic dim becomes ``-1``
in the shape signature and is computed at run time (SHAPE op) where an op needs
its value.
"""

from __future__ import annotations

import hashlib
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from converter.errors import ExportError
from exporters.jaxpr_walk import JaxprValue, is_static  # noqa: F401 (re-exported for the rules)
from exporters.litert.ir import Graph, Op, Tensor

#: float64 and bfloat16 (which TFLite has no type for) and float16 (which its CONV_2D and BATCH_MATMUL kernels
#: refuse as activations: a float16 model's file failed in the interpreter) run as float32, uint64 as int64; the
#: model's inputs and outputs are those types too (the artifact casts, from the output dtypes the file declares).
#: Half-size weights are ``quantize="fp16"``'s job.
_NARROW = {np.dtype(np.float64): np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16): np.dtype(np.float32),
           np.dtype(np.float16): np.dtype(np.float32), np.dtype(np.uint64): np.dtype(np.int64)}


def tfl_dtype(dtype: Any) -> np.dtype:
    """The dtype a value has inside the TFLite model (float64 and bfloat16 run as float32)."""
    d = np.dtype(dtype)
    return _NARROW.get(d, d)


def identity(rank: int) -> tuple:
    """The identity permutation."""
    return tuple(range(rank))


class Val(JaxprValue):
    """One jaxpr value (see module docstring)."""

    __slots__ = ("shape", "dtype", "const", "tensor", "perm", "base", "cache")

    def __init__(self, shape: Sequence, dtype: Any, *, const: np.ndarray | None = None,
                 tensor: Tensor | None = None, perm: Sequence | None = None, base: Sequence | None = None):
        self.shape = tuple(shape)
        self.dtype = np.dtype(dtype)
        self.const = const
        self.tensor = tensor
        self.perm = identity(len(self.shape)) if perm is None else tuple(perm)
        self.base = tuple(const.shape) if const is not None else tuple(self.shape if base is None else base)
        self.cache: dict = {}
        if len(self.base) != len(self.shape) or len(self.perm) != len(self.shape):
            raise ExportError(f"internal error: value rank mismatch {self.shape} {self.base} {self.perm}")

    def phys_shape(self, perm: Sequence | None = None) -> tuple:
        """The (compact) physical shape in layout ``perm`` (default: the current one)."""
        perm = self.perm if perm is None else perm
        return tuple(self.base[p] for p in perm)

    def __repr__(self) -> str:
        kind = "const" if self.is_const else repr(self.tensor)
        return f"Val({kind} {self.dtype.name}{list(self.shape)} perm={self.perm} base={list(self.base)})"


def unit_only_move(src: Sequence, dst: Sequence, shape: Sequence) -> bool:
    """True when re-laying ``shape`` from layout ``src`` to ``dst`` only moves size-1 dims."""
    return [p for p in src if shape[p] != 1] == [p for p in dst if shape[p] != 1]


class Emitter:
    """Creates tensors and operators in one :class:`Graph` for the rules.

    Attributes:
        graph: the subgraph being written.
        notes: decisions to report in the artifact (deduplicated, ordered).
        dim_env: example value of each symbolic dim name.
        dim_sources: for each symbolic dim name, the (input value, axis, scale, offset) that carries it: that
            axis's size is ``scale * dim + offset`` (``2 * Dim("h")``: 2, 0; a plain dim: 1, 0).
    """

    def __init__(self, graph: Graph, notes: list[str], options: dict | None = None):
        self.graph = graph
        self.notes = notes
        self.options = dict(options or {})
        self.dim_env: dict[str, int] = {}
        self.dim_sources: dict[str, tuple[Val, int, int, int]] = {}
        self._consts: dict[tuple, Tensor] = {}
        self._dim_tensors: dict[Any, Tensor] = {}
        self._count = 0

    # -- notes and names ---------------------------------------------------------------
    def note(self, text: str) -> None:
        """Record a conversion decision once."""
        if text not in self.notes:
            self.notes.append(text)

    def _name(self, hint: str) -> str:
        self._count += 1
        return f"{hint}_{self._count}"

    # -- dims ----------------------------------------------------------------------------
    def example(self, d: Any) -> int:
        """The sample value of a dim."""
        if is_static(d):
            return int(d)
        try:
            return int(d._evaluate(self.dim_env))
        except Exception as e:  # a symbolic dim this graph has no sample value for
            raise ExportError(f"cannot evaluate dynamic dim {d}: {e}") from e

    def signature(self, dims: Sequence) -> tuple:
        """Shape signature: ``-1`` for symbolic dims."""
        return tuple(int(d) if is_static(d) else -1 for d in dims)

    # -- tensors -------------------------------------------------------------------------
    def tensor(self, dims: Sequence, dtype: Any, hint: str = "t") -> Tensor:
        """A new activation tensor with (physical) ``dims``."""
        return Tensor(tuple(self.example(d) for d in dims), self.signature(dims),
                      tfl_dtype(dtype), self._name(hint))

    def const(self, array: Any, dtype: Any = None, hint: str = "const") -> Tensor:
        """A constant tensor (deduplicated by content inside the graph)."""
        arr = np.asarray(array)
        arr = np.require(arr.astype(tfl_dtype(dtype if dtype is not None else arr.dtype), copy=False), requirements="C")
        # The bytes through a uint8 view: memoryview refuses zero-size arrays and ml_dtypes (bfloat16).
        key = (arr.dtype.str, arr.shape, hashlib.sha256(arr.reshape(-1).view(np.uint8)).digest())
        t = self._consts.get(key)
        if t is None:
            t = Tensor(arr.shape, arr.shape, arr.dtype, self._name(hint), arr)
            self._consts[key] = t
        return t

    def op(self, code: str, inputs: Sequence, outputs: Sequence, options_type: str | None = None,
           **options: Any) -> Op:
        """Append an operator."""
        op = Op(code, list(inputs), list(outputs), dict(options), options_type)
        self.graph.ops.append(op)
        return op

    def emit(self, code: str, inputs: Sequence, dims: Sequence, dtype: Any, options_type: str | None = None,
             **options: Any) -> Tensor:
        """Append an operator with one new output tensor of ``dims``/``dtype``; return it."""
        out = self.tensor(dims, dtype, code.lower())
        self.op(code, inputs, [out], options_type, **options)
        return out

    # -- resolving the lazy parts of a value ---------------------------------------------
    def tensor_of(self, val: Val, perm: Sequence | None = None, expand: bool = False) -> Tensor:
        """The physical tensor of ``val`` in layout ``perm`` (default identity).

        Args:
            val: the value.
            perm: wanted layout (``None``: logical order).
            expand: materialize pending broadcasts (BROADCAST_TO) as well.
        """
        perm = identity(val.rank) if perm is None else tuple(perm)
        key = (perm, expand)
        if key in val.cache:
            return val.cache[key]
        if val.is_const:
            if expand and not val.static:  # (a symbolic shape: no NumPy array of it)
                t = self._broadcast(self.const(val.const.transpose(perm), val.dtype), val, perm)
            else:
                t = self.const(np.transpose(val.full() if expand else val.const, perm), val.dtype)
        elif expand and val.pending:
            t = self._broadcast(self.tensor_of(val, perm), val, perm)
        elif perm == val.perm:
            t = val.tensor
        else:
            src = val.tensor
            dims = val.phys_shape(perm)
            if unit_only_move(val.perm, perm, val.base):
                t = self.emit("RESHAPE", [src, self.shape_operand(dims)], dims, val.dtype)
            else:
                rel = [val.perm.index(p) for p in perm]
                t = self.emit("TRANSPOSE", [src, self.const(np.asarray(rel, np.int32))], dims, val.dtype)
        val.cache[key] = t
        return t

    def _broadcast(self, t: Tensor, val: Val, perm: tuple) -> Tensor:
        """Materialize pending broadcast dims: ADD of a small zeros constant for floats (XNNPACK
        runs it; it does not take BROADCAST_TO, which would split its partition), else BROADCAST_TO."""
        dims = [val.shape[p] for p in perm]
        pending = [val.base[p] != val.shape[p] for p in perm]
        if tfl_dtype(val.dtype).kind == "f" and all(is_static(d) for d, pd in zip(dims, pending) if pd):
            zeros = np.zeros([int(d) if pd else 1 for d, pd in zip(dims, pending)], tfl_dtype(val.dtype))
            return self.emit("ADD", [t, self.const(zeros)], dims, val.dtype)
        return self.emit("BROADCAST_TO", [t, self.shape_tensor(dims)], dims, val.dtype)

    def choose_perm(self, vals: Sequence[Val], rank: int) -> tuple:
        """The layout an elementwise op should compute in: the one needing fewest transposes."""
        cands = [v for v in vals if not v.is_const and v.rank == rank]
        best, best_cost = identity(rank), None
        for p in dict.fromkeys([v.perm for v in cands] + [identity(rank)]):
            cost = sum(0 if unit_only_move(v.perm, p, v.base) or (p, False) in v.cache else 1 for v in cands)
            if best_cost is None or cost < best_cost:
                best, best_cost = p, cost
        return best

    # -- shapes as tensors ---------------------------------------------------------------
    def shape_operand(self, dims: Sequence) -> Tensor:
        """A RESHAPE shape operand: constant, with ``-1`` for one dynamic dim when possible."""
        if all(is_static(d) for d in dims):
            return self.const(np.asarray([int(d) for d in dims], np.int32))
        if sum(not is_static(d) for d in dims) == 1:
            return self.const(np.asarray([int(d) if is_static(d) else -1 for d in dims], np.int32))
        return self.shape_tensor(dims)

    def shape_tensor(self, dims: Sequence) -> Tensor:
        """An int32 1-D tensor holding ``dims``, computed at run time for symbolic dims."""
        if all(is_static(d) for d in dims):
            return self.const(np.asarray([int(d) for d in dims], np.int32))
        parts = [self.dim_tensor(d) for d in dims]
        return self.emit("CONCATENATION", parts, [len(dims)], np.int32, axis=0)

    def dim_tensor(self, d: Any) -> Tensor:
        """An int32 ``[1]`` tensor holding dim ``d`` at run time."""
        if is_static(d):
            return self.const(np.asarray([int(d)], np.int32))
        if d in self._dim_tensors:
            return self._dim_tensors[d]
        total = None
        for term, coeff in d._sorted_terms:
            value = self.const(np.asarray([coeff], np.int32)) if term.is_constant else None
            for factor, power in ([] if term.is_constant else term._factors):
                f = self._var_tensor(factor.var) if factor.var is not None else self._operation_tensor(factor, d)
                for _ in range(power):
                    value = f if value is None else self.emit("MUL", [value, f], [1], np.int32)
            if not term.is_constant and coeff != 1:
                value = self.emit("MUL", [value, self.const(np.asarray([coeff], np.int32))], [1], np.int32)
            total = value if total is None else self.emit("ADD", [total, value], [1], np.int32)
        self._dim_tensors[d] = total
        return total

    #: jax.export's dim operations → the int32 builtin computing them (floor division and modulo, as jax's).
    _DIM_OPERATIONS = {"min": "MINIMUM", "max": "MAXIMUM", "floordiv": "FLOOR_DIV", "mod": "FLOOR_MOD"}

    def _operation_tensor(self, factor: Any, d: Any) -> Tensor:
        """A dim factor that is an operation on dims (``min(s, 16)``: a length clamped by a table's size) at run time."""
        op = self._DIM_OPERATIONS.get(factor.operation)
        if op is None or len(factor.operands) != 2:
            raise ExportError(f"dynamic dim expression {d} is not supported by the LiteRT exporter")
        return self.emit(op, [self.dim_tensor(x) for x in factor.operands], [1], np.int32)

    def _var_tensor(self, name: str) -> Tensor:
        key = ("var", name)
        if key not in self._dim_tensors:
            if name not in self.dim_sources:
                raise ExportError(f"dynamic dim {name} does not appear in any input")
            val, axis, scale, offset = self.dim_sources[name]
            shape = self.emit("SHAPE", [self.tensor_of(val, val.perm)], [val.rank], np.int32, outType=2)
            pos = val.perm.index(axis)
            size = self.emit(
                "SLICE", [shape, self.const(np.asarray([pos], np.int32)), self.const(np.asarray([1], np.int32))],
                [1], np.int32)
            if offset:  # a derived dim (``2 * h + 1``): its symbol is (size - offset) // scale
                size = self.emit("SUB", [size, self.const(np.asarray([offset], np.int32))], [1], np.int32)
            if scale != 1:
                size = self.emit("FLOOR_DIV", [size, self.const(np.asarray([scale], np.int32))], [1], np.int32)
            self._dim_tensors[key] = size
        return self._dim_tensors[key]

    # -- small helpers rules share -------------------------------------------------------
    def cast(self, t: Tensor, dtype: Any) -> Tensor:
        """CAST ``t`` to ``dtype`` (no-op when equal)."""
        dtype = tfl_dtype(dtype)
        if np.dtype(t.dtype) == dtype:
            return t
        if t.is_const:
            return self.const(t.data.astype(dtype))
        out = Tensor(t.shape, t.signature, dtype, self._name("cast"))
        self.op("CAST", [t], [out])
        return out

    def like(self, t: Tensor, dtype: Any = None, hint: str = "t") -> Tensor:
        """A new tensor with ``t``'s shape and signature."""
        return Tensor(t.shape, t.signature, tfl_dtype(dtype or t.dtype), self._name(hint))

    def reduced(self, t: Tensor, axes: Sequence[int], hint: str = "t") -> Tensor:
        """A new tensor shaped like ``t`` with ``axes`` kept as size 1."""
        return Tensor(tuple(1 if i in axes else d for i, d in enumerate(t.shape)),
                      tuple(1 if i in axes else d for i, d in enumerate(t.signature)), t.dtype, self._name(hint))

    def emit_like(self, code: str, inputs: Sequence, like: Tensor, dtype: Any = None, **options: Any) -> Tensor:
        """Append an op whose output has the shape of ``like``."""
        out = self.like(like, dtype, code.lower())
        self.op(code, inputs, [out], **options)
        return out
