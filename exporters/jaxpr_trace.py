"""LoweredProgram → ClosedJaxpr for the jaxpr exporters (LiteRT, ONNX).

Symbolic input shapes (``str`` dims become ``jax.export`` symbolic dims, bounded by
torch.export's range constraints), tracing with int64 enabled under
``dispatch.portable`` (no Mosaic/Triton custom calls), and the FX-node locator that
maps an eqn back to the ATen op and user source line for error messages.
"""

from __future__ import annotations

from typing import Any

import jax
from jax import export as jax_export

from converter.call_inputs import finite_bound
from converter.dim_links import carriers, linear_dims
from converter.errors import ConversionError, ExportError
from kernels import dispatch


def symbolic_inputs(program: Any) -> tuple[list[jax.ShapeDtypeStruct], dict[str, int], list[tuple], dict]:
    """Abstract inputs for tracing: ``str`` dims become ``jax.export`` symbolic dims.

    Returns:
        (avals, sample value of each symbol, logical shapes with symbols, :func:`dim_carriers`).
    """
    examples = program.example_inputs()
    names: list[str] = []  # each dim's text: a symbol ("s39") or a derived dim ("2*s39", from ``2 * Dim("h")``)
    for spec in program.inputs:
        for d in spec.shape:
            if isinstance(d, str) and d not in names:
                names.append(d)
    found = dim_carriers(program)
    scope = jax_export.SymbolicScope(range_constraints(program, sorted({link[0] for link in found.values()})))
    symbols = {d: jax_export.symbolic_shape(d, scope=scope)[0] for d in names}
    env: dict[str, int] = {}
    for (i, axis), (base, scale, offset) in found.items():
        env.setdefault(base, (int(examples[i].shape[axis]) - offset) // scale)
    avals, shapes = [], []
    for spec, ex in zip(program.inputs, examples):
        shape = tuple(symbols[d] if isinstance(d, str) else int(d) for d in spec.shape)
        shapes.append(shape)
        avals.append(jax.ShapeDtypeStruct(shape, ex.dtype))
    return avals, env, shapes, found


def dim_carriers(program: Any) -> dict[tuple[int, int], tuple[str, int, int]]:
    """For each dynamic dim of the inputs, ``(input index, axis) → (symbol, scale, offset)``: the dim is
    ``scale * symbol + offset`` (a plain dim: ``(name, 1, 0)``; a derived one, ``2 * Dim("h")``: ``("s39", 2, 0)``),
    which the exporters read back at run time to compute the symbol (``(size - offset) // scale``).

    Raises:
        ExportError: a dim that is not linear in one symbol.
    """
    try:
        return carriers(linear_dims(program))
    except ValueError as e:
        raise ExportError(str(e)) from e


def trace(program: Any, target: str) -> tuple[Any, list, dict[str, int], list[tuple], dict]:
    """``jax.make_jaxpr(program.closed())`` with int64 enabled and symbolic dynamic dims.

    Args:
        program: a ``converter.lowering.interpreter.LoweredProgram``.
        target: the exporter's display name ("LiteRT", "ONNX"), used in errors and as
            the ``dispatch.portable`` reason ("<target lowercased> export").

    Returns:
        (closed jaxpr, input avals, sample value of each symbol, input shapes with symbols, each dynamic dim's
        ``(symbol, scale, offset)`` by ``(input index, axis)``: :func:`dim_carriers`).

    Raises:
        ExportError: tracing failed (e.g. an inconclusive shape check on a symbolic dim).
    """
    avals, env, shapes, carriers = symbolic_inputs(program)
    try:
        with jax.enable_x64(True), dispatch.portable(f"{target.lower()} export"):
            closed = jax.make_jaxpr(program.closed())(*avals)
    except ConversionError:
        raise
    except Exception as e:  # tracing the lowered program failed
        raise ExportError(f"tracing the program for {target} failed: {type(e).__name__}: {str(e).splitlines()[0]}") \
            from e
    return closed, avals, env, shapes, carriers


def fx_locator(program: Any) -> Any:
    """``eqn -> (ATen op, SourceLocation)`` for a LoweredProgram, or ``None``.

    JAX records the Python frames that created each eqn; the innermost frame that is a
    registered lowering function names the ATen op, and the FX node calling that op
    carries the user's ``stack_trace`` and module path (the first such node when the
    op appears several times).
    """
    ep = getattr(program, "exported", None)
    if ep is None:
        return None
    from converter.errors import source_location
    from converter.lowering import control_flow
    from converter.lowering.registry import registered
    by_fn: dict[tuple, list] = {}
    fns = [(op, row.fn) for op, row in registered().items()] + list(control_flow.HOPS.items())
    for op, fn in fns:
        code = getattr(fn, "__code__", None)
        if code is not None:
            by_fn.setdefault((code.co_filename, fn.__name__), []).append(op)
    nodes: dict[Any, list] = {}
    for node in ep.graph.nodes:
        if node.op == "call_function":
            nodes.setdefault(node.target, []).append(node)

    def locate(eqn: Any) -> tuple[str, Any] | None:
        tb = getattr(eqn.source_info, "traceback", None)
        for frame in (tb.frames if tb is not None else []):
            ops = by_fn.get((frame.file_name, frame.function_name.rsplit(".", 1)[-1]))
            hits = [n for op in ops or [] for n in nodes.get(op, [])]
            if hits:
                return str(hits[0].target), source_location(hits[0])
        return None

    return locate


def range_constraints(program: Any, names: list[str]) -> tuple[str, ...]:
    """``jax.export`` constraints from torch.export's range constraints (e.g. ``s <= 15``),
    so lowerings that compare a dynamic dim with a constant stay conclusive."""
    ranges = getattr(getattr(program, "exported", None), "range_constraints", None) or {}
    out = []
    for sym, rng in ranges.items():
        name = str(sym)
        if name not in names:
            continue
        lo, hi = finite_bound(rng.lower), finite_bound(rng.upper)
        if lo is not None and lo > 1:
            out.append(f"{name} >= {lo}")
        if hi is not None:
            out.append(f"{name} <= {hi}")
    return tuple(out)
