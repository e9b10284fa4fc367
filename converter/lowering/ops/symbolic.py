"""Symbolic size queries: ``sym_numel``, ``sym_stride``, ``sym_storage_offset``.

They appear in graphs traced with symbolic shapes (``make_fx(tracing_mode="symbolic")``,
AOTAutograd with dynamic shapes) and return SymInts: here python ints, or jax.export
symbolic dims under shape polymorphism. JAX arrays have no strides or storage (every
value is dense row-major), so a stride or storage offset is torch's recorded value:
a python int when static, else its sympy expression (sums, products, floor divisions, max / min)
evaluated with the symbols read off the graph's inputs and the tensor's own dims (a dim
``s`` or ``s + c`` gives ``s``: :func:`~converter.lowering.context.symbols_of`). An expression over other
symbols is an :class:`UnsupportedOpError`.
"""

from __future__ import annotations

import functools

import jax
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.context import symbols_of
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _input_meta(ctx):
    """The FakeTensor torch recorded for the op's tensor argument (``None`` when unknown)."""
    if ctx.node is None or not ctx.node.args or not isinstance(ctx.node.args[0], torch.fx.Node):
        return None
    val = ctx.node.args[0].meta.get("val")
    return val if isinstance(val, torch.Tensor) else None


def _product(sizes):
    out = 1
    for s in sizes:
        out = out * s
    return out


#: torch's sympy integer functions (``torch.utils._sympy.functions``, sympy's ``Max`` / ``Min``) → their python
#: operator (``max`` / ``min`` of symbolic dims: jax's ``max_dim`` / ``min_dim``).
_INT_FUNCTIONS = {"FloorDiv": lambda a, b: a // b, "CleanDiv": lambda a, b: a // b,
                  "PythonMod": lambda a, b: a % b, "Mod": lambda a, b: a % b,
                  "Max": jax.core.max_dim, "Min": jax.core.min_dim}


def _evaluate(expr, values):
    """A sympy expression of integer sums, products, powers, floor divisions / remainders and max / min (a
    contiguous stride is a product of ``Max(1, size)``), or ``None``."""
    if expr.is_Integer:
        return int(expr)
    if expr.is_Symbol:
        return values.get(expr)
    if expr.is_Pow and expr.exp.is_Integer and expr.exp > 0:
        base = _evaluate(expr.base, values)
        return None if base is None else _product([base] * int(expr.exp))
    fn = _INT_FUNCTIONS.get(type(expr).__name__)
    if fn is not None and len(expr.args) >= 2:
        args = [_evaluate(x, values) for x in expr.args]
        if any(a is None for a in args) or (len(args) > 2 and fn not in (jax.core.max_dim, jax.core.min_dim)):
            return None
        return functools.reduce(fn, args)
    if expr.is_Add or expr.is_Mul:
        parts = [_evaluate(a, values) for a in expr.args]
        if any(p is None for p in parts):
            return None
        out = parts[0]
        for p in parts[1:]:
            out = out + p if expr.is_Add else out * p
        return out
    return None


def _recorded(ctx, self, what: str, fallback):
    """torch's recorded SymInt as a value of this trace (``fallback()`` without a node)."""
    val = ctx.out_meta
    if isinstance(val, int) and not isinstance(val, bool):
        return val
    if isinstance(val, torch.SymInt):
        values = dict(ctx.symbols)  # the graph inputs' symbols, and those of the tensor's own dims
        meta = _input_meta(ctx)
        if meta is not None:
            values.update(symbols_of(meta, self))
        out = dim_value(val, values)
        if out is not None:
            return out
        op = ctx.node.target if ctx.node is not None else what
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason=f"the {what} {val.node.expr} is not an expression of the graph's input "
                                        "dims (JAX values have no strides or storage to read it from)")
    return fallback()


@lowering(aten.sym_numel.default)
def lower_sym_numel_default(ctx, self):
    """sym_numel(Tensor self) -> SymInt

    The product of the dims of ``self`` (a python int or a symbolic dim expression).
    """
    return _product(self.shape)


@lowering(aten.sym_stride.int)
def lower_sym_stride_int(ctx, self, dim):
    """sym_stride.int(Tensor self, int dim) -> SymInt

    torch's recorded stride (static, or its expression in the dims of ``self``);
    without a recorded value, the row-major stride of the dense value.
    """
    d = norm_dim(dim, self.ndim)
    return _recorded(ctx, self, "stride", lambda: _product(self.shape[d + 1:]))


@lowering(aten.sym_storage_offset.default)
def lower_sym_storage_offset_default(ctx, self):
    """sym_storage_offset(Tensor self) -> SymInt

    torch's recorded storage offset of a view into its base (static, or its
    expression in the dims of ``self``); without a recorded value, 0.
    """
    try:
        return _recorded(ctx, self, "storage offset", lambda: 0)
    except UnsupportedOpError:
        offset = _slice_offset(ctx)
        if offset is None:
            raise
        return offset


def dim_value(x, values):
    """A slice argument or recorded size (an int, a SymInt, a node holding one) as a value of this trace, the
    symbols' ``values`` substituted (``None`` when not an expression of known symbols)."""
    if isinstance(x, torch.fx.Node):
        x = x.meta.get("val")
    if isinstance(x, torch.SymInt):
        static = x.node.maybe_as_int()
        return static if static is not None else _evaluate(x.node.expr, values)
    return x if type(x) is int else None


def _slice_offset(ctx):
    """The storage offset of a ``slice`` whose start torch recorded as a fresh symbol (a start read back from a
    tensor: an unbacked size :func:`~converter.lowering.interpreter.size_expression` gave a value): the base's offset
    plus the start times the base's stride along the sliced dim, as torch computes a view's offset. The start is
    taken as recorded (torch's own checks of the graph keep it in range). ``None`` for any other producer."""
    node = ctx.node.args[0] if ctx.node is not None and ctx.node.args else None
    if not isinstance(node, torch.fx.Node) or node.target is not aten.slice.Tensor:
        return None
    base = node.args[0].meta.get("val") if isinstance(node.args[0], torch.fx.Node) else None
    if not isinstance(base, torch.Tensor):
        return None
    dim = norm_dim(node.args[1] if len(node.args) > 1 else 0, base.dim())
    start = node.args[2] if len(node.args) > 2 else 0
    parts = [dim_value(x, ctx.symbols) for x in (base.storage_offset(), start if start is not None else 0,
                                              base.stride(dim))]
    if any(p is None for p in parts):
        return None
    return parts[0] + parts[1] * parts[2]
