"""What TFLite's builtin kernels accept, and emitting through it: the rules' elementwise, reduction and
scan ops go through :func:`emit` / :func:`emit_like`, so no kernel meets a dtype it lacks or a
broadcast it does not do.

The table is measured on ai-edge-litert 2.3 (each op × float32 / int8–int64 / uint8 / bool × broadcast
pattern, ranks 0–6, with and without the XNNPACK delegate). What it found, beyond the error messages:

* 8/16-bit integer ADD / SUB / MUL / DIV / SUM / MEAN / EXP / TANH / RELU and int8/uint8 comparisons are
  the *quantized* kernels: without quantization parameters they abort the process (SIGABRT while
  allocating tensors) or compute garbage. They compute in int32 here, CAST back (TFLite's int→int CAST
  wraps like torch, so the result is exact).
* int16 NOT_EQUAL gives wrong answers when broadcasting or above rank 4 (EQUAL does not): int32 too.
* ATAN2 and STABLEHLO_SHIFT_LEFT do not broadcast (ATAN2 checks ranks only, and reads out of bounds for
  unequal shapes; STABLEHLO_SHIFT_LEFT of a tensor by a scalar amount got all but the first element wrong,
  found by the left-shift edge test): their operands are broadcast first. Every other binary kernel here broadcasts
  NumPy-style (rank-0 and lower-rank operands too) up to rank 6, ADD / MUL / MAXIMUM / LESS checked
  to rank 8, and SELECT_V2 broadcasts its three operands.
* bool MAXIMUM / MINIMUM / REDUCE_MAX / REDUCE_MIN have no kernel: they are LOGICAL_OR / LOGICAL_AND /
  REDUCE_ANY / REDUCE_ALL, which compute the same thing.

A dtype the kernel lacks is computed in the narrowest wider type it has (exact: 8/16-bit integers and
bool in int32, uint32 in int64, float16 in float32); int64 in the ops of :data:`NO_INT64` computes in
int32 (reported, as before); anything else raises :class:`~exporters.litert.rules.Unsupported` at
export, never reaching the interpreter.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from exporters.litert.emitter import Emitter, tfl_dtype
from exporters.litert.ir import Tensor
from exporters.litert.rules import Unsupported

_F32, _F16, _BOOL = np.dtype(np.float32), np.dtype(np.float16), np.dtype(np.bool_)
_I8, _U8, _I16, _I32, _U32, _I64 = (np.dtype(t) for t in (np.int8, np.uint8, np.int16, np.int32, np.uint32, np.int64))
_ARITH = frozenset({_F32, _I32, _I64})
_ORDERED = frozenset({_F32, _I32, _I64, _I16, _I8, _U8})
_FLOAT = frozenset({_F32})

#: dtypes each builtin's (unquantized) kernel computes correctly; a code not listed takes any dtype.
KERNEL_DTYPES: dict[str, frozenset] = {
    "ADD": _ARITH, "SUB": _ARITH, "MUL": _ARITH, "DIV": frozenset({_F32, _I32}),
    "FLOOR_DIV": frozenset({_F32, _I32}), "FLOOR_MOD": _ARITH, "POW": frozenset({_F32, _I32}),
    "SQUARED_DIFFERENCE": frozenset({_F32, _I32}), "ATAN2": _FLOAT,
    "MAXIMUM": _ORDERED, "MINIMUM": _ORDERED,
    "EQUAL": _ARITH | {_BOOL}, "NOT_EQUAL": _ARITH | {_BOOL},
    "LESS": _ARITH, "LESS_EQUAL": _ARITH, "GREATER": _ARITH, "GREATER_EQUAL": _ARITH,
    "LOGICAL_AND": frozenset({_BOOL}), "LOGICAL_OR": frozenset({_BOOL}), "LOGICAL_NOT": frozenset({_BOOL}),
    "BITWISE_XOR": frozenset({_I8, _U8, _I16, _I32, _U32}), "RIGHT_SHIFT": frozenset({_I8, _U8, _I16, _I32, _U32}),
    "STABLEHLO_SHIFT_LEFT": frozenset({_I8, _I16, _I32}),
    "NEG": _ARITH, "ABS": frozenset({_F32, _I32}), "SIGN": frozenset({_F32, _I32}),
    **dict.fromkeys(["SQUARE", "EXP", "LOG", "SQRT", "RSQRT", "TANH", "LOGISTIC", "SIN", "COS", "FLOOR", "CEIL",
                     "ROUND", "RELU", "RELU6", "RELU_0_TO_1", "RELU_N1_TO_1", "MEAN"], _FLOAT),
    "SUM": _ARITH, "REDUCE_PROD": _ARITH, "REDUCE_MAX": _ORDERED, "REDUCE_MIN": _ORDERED,
    "REDUCE_ANY": frozenset({_BOOL}), "REDUCE_ALL": frozenset({_BOOL}), "CUMSUM": _ARITH,
    "ARG_MAX": frozenset({_F32, _I32, _I8, _U8, _BOOL}), "ARG_MIN": frozenset({_F32, _I32, _I8, _U8, _BOOL}),
}
#: The kernels that need operands of one shape (no broadcasting).
SAME_SHAPE = frozenset({"ATAN2", "STABLEHLO_SHIFT_LEFT"})
#: Ops whose only operand with a dtype constraint is the first (the rest are axes).
_FIRST_ONLY = frozenset({"SUM", "MEAN", "REDUCE_PROD", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_ANY", "REDUCE_ALL",
                         "CUMSUM", "ARG_MAX", "ARG_MIN"})
#: Ops whose result dtype does not follow their operands (comparisons, indices).
_OWN_RESULT = frozenset({"EQUAL", "NOT_EQUAL", "LESS", "LESS_EQUAL", "GREATER", "GREATER_EQUAL", "ARG_MAX", "ARG_MIN"})
#: The same computation on bools, for kernels without a bool one.
_ON_BOOL = {"MAXIMUM": "LOGICAL_OR", "MINIMUM": "LOGICAL_AND", "REDUCE_MAX": "REDUCE_ANY", "REDUCE_MIN": "REDUCE_ALL"}
#: Wider dtypes that hold every value of a dtype, narrowest first.
_WIDER = {_I8: (_I32, _I64), _U8: (_I32, _I64), _I16: (_I32, _I64), np.dtype(np.uint16): (_I32, _I64),
          _U32: (_I64,), _BOOL: (_I32,), _F16: (_F32,)}

#: Ops without an int64 kernel in ai-edge-litert 2.3: computed in int32 between CASTs (not exact beyond int32).
NO_INT64 = frozenset({"DIV", "FLOOR_DIV", "POW", "SQUARED_DIFFERENCE"})
INT64_NOTE = "int64 DIV/FLOOR_DIV/POW run in int32 between CASTs (TFLite has no int64 kernels for them)"


def compute_dtype(em: Emitter, code: str, dtype: Any) -> np.dtype:
    """The dtype ``code`` computes ``dtype`` operands in: ``dtype`` itself when the kernel takes it, else the
    narrowest wider one it takes (int64 → int32 for :data:`NO_INT64`, noted).

    Raises:
        Unsupported: the kernel takes neither ``dtype`` nor a type holding all its values.
    """
    dt = tfl_dtype(dtype)
    allowed = KERNEL_DTYPES.get(code)
    if allowed is None or dt in allowed:
        return dt
    for wide in _WIDER.get(dt, ()):
        if wide in allowed:
            return wide
    if dt == _I64 and code in NO_INT64 and _I32 in allowed:
        em.note(INT64_NOTE)
        return _I32
    takes = ", ".join(sorted(d.name for d in allowed))
    raise Unsupported(f"TFLite {code} has no {dt.name} kernel (it takes {takes}) and no exact wider type")


def has_kernel(code: str, dtype: Any) -> bool:
    """Whether ``code`` computes ``dtype`` operands exactly (natively or in a wider dtype it has)."""
    allowed = KERNEL_DTYPES.get(code)
    dt = tfl_dtype(dtype)
    return allowed is None or dt in allowed or any(w in allowed for w in _WIDER.get(dt, ()))


def emit(em: Emitter, code: str, inputs: Sequence, dims: Sequence, dtype: Any, options_type: str | None = None,
         **options: Any) -> Tensor:
    """:meth:`Emitter.emit` within the kernel's dtypes and broadcasting (see the module docstring)."""
    return _emit(em, code, list(inputs), dtype, lambda dt: em.tensor(dims, dt, code.lower()), dims,
                 options_type, options)


def emit_like(em: Emitter, code: str, inputs: Sequence, like: Tensor, dtype: Any = None, **options: Any) -> Tensor:
    """:meth:`Emitter.emit_like` within the kernel's dtypes and broadcasting (see the module docstring)."""
    return _emit(em, code, list(inputs), like.dtype if dtype is None else dtype,
                 lambda dt: em.like(like, dt, code.lower()), like, None, options)


def _emit(em: Emitter, code: str, inputs: list, dtype: Any, new_output: Callable, target: Any,
          options_type: str | None, options: dict) -> Tensor:
    """Emit ``code``, its operands broadcast (:data:`SAME_SHAPE`) and CAST to :func:`compute_dtype`;
    ``new_output(dtype)`` makes the output tensor."""
    data = [0] if code in _FIRST_ONLY else [i for i, t in enumerate(inputs) if t is not None]
    dtypes = {np.dtype(inputs[i].dtype) for i in data}
    if code in SAME_SHAPE:
        for i in data:
            inputs[i] = materialize(em, inputs[i], target)
    out_dtype = tfl_dtype(dtype)
    if len(dtypes) == 1:
        (dt,) = dtypes
        if dt == _BOOL and code in _ON_BOOL:
            code = _ON_BOOL[code]
        wide = compute_dtype(em, code, dt)
        if wide != dt:
            for i in data:
                inputs[i] = em.cast(inputs[i], wide)
            if code not in _OWN_RESULT:  # compute wide, CAST back (int→int CAST wraps like torch)
                out = new_output(wide)
                em.op(code, inputs, [out], options_type, **options)
                return em.cast(out, out_dtype)
    out = new_output(out_dtype)
    em.op(code, inputs, [out], options_type, **options)
    return out


def materialize(em: Emitter, t: Tensor, target: Any) -> Tensor:
    """``t`` broadcast to ``target``: physical dims (static or symbolic) or a tensor of the wanted shape."""
    if isinstance(target, Tensor):
        shape, signature = tuple(target.shape), tuple(target.signature)
    else:
        shape, signature = tuple(em.example(d) for d in target), em.signature(target)
    if tuple(t.shape) == shape and tuple(t.signature) == signature:
        return t
    if t.is_const and all(d >= 0 for d in signature):
        return em.const(np.broadcast_to(t.data, shape))
    if isinstance(target, Tensor):
        if target.dynamic:
            dims = em.emit("SHAPE", [target], [len(shape)], np.int32, outType=2)
        else:
            dims = em.const(np.asarray(shape, np.int32))
        out = em.like(target, t.dtype, "broadcast_to")
        em.op("BROADCAST_TO", [t, dims], [out])
        return out
    return em.emit("BROADCAST_TO", [t, em.shape_tensor(target)], target, t.dtype)
