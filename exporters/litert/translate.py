"""Walk a ClosedJaxpr and emit TFLite operators through the rule tables.

* Call-like eqns (``jit``, ``closed_call``, ``custom_jvp_call``, ``custom_vjp_call``,
  ``remat``) are inlined.
* ``composite`` eqns named ``aten.<op>`` go to :data:`rules.COMPOSITES` (GELU,
  SOFTMAX, FULLY_CONNECTED, …); a composite without a rule, or whose rule declines
  (returns ``None``), is lowered through its decomposition jaxpr.
* Any eqn whose inputs are all constants is evaluated now (constant folding) and
  becomes a constant value; the weights of ``LoweredProgram.closed()`` are such
  constants, so e.g. a weight transpose costs nothing at run time.
* Everything else goes to :data:`rules.RULES`, keyed on the primitive object; a
  primitive without a rule raises :class:`UnsupportedOpError` naming the primitive,
  the enclosing ATen composite and the source location of the eqn.
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax._src import core as jcore
from jax._src import source_info_util
from jax._src.lax import lax as lax_internal

from converter.errors import ConversionError, ExportError, SourceLocation, UnsupportedOpError
from exporters.litert import rules
from exporters.litert.emitter import Emitter, Val, is_static

#: Parameters that hold an inlinable body, per call-like primitive.
_BODY_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_CALL_LIKE = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
              "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint", "custom_lin"}
#: Primitives whose rules handle constant inputs themselves (folding would bloat
#: the file, e.g. broadcasting a scalar to a large shape).
_NO_FOLD = {"broadcast_in_dim", "iota", "dim_as_value"}
#: Values the runtime does not need (identity at inference).
_IDENTITY = {"copy", "copy_p", "optimization_barrier", "stop_gradient", "reduce_precision", "sharding_constraint"}


def location_of(eqn: Any) -> SourceLocation:
    """The innermost user (non-JAX) frame of an eqn, as a :class:`SourceLocation`."""
    try:
        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # source info is best effort; never mask the real error
        frame = None
    if frame is None:
        return SourceLocation()
    return SourceLocation(frame.file_name, frame.start_line, frame.function_name)


def const_val(value: Any, aval: Any = None) -> Val:
    """A constant value from a literal / array."""
    dtype = aval.dtype if aval is not None and hasattr(aval, "dtype") else None
    arr = np.asarray(value, dtype=dtype)
    return Val(arr.shape, arr.dtype, const=arr)


class Translator:
    """Translates jaxprs into the emitter's graph.

    Args:
        em: the emitter.
        locate: optional ``eqn -> (ATen op name, SourceLocation) | None`` that maps an
            eqn back to the FX node it was lowered from (see ``export.fx_locator``).
    """

    def __init__(self, em: Emitter, locate: Any = None):
        self.em = em
        self.locate = locate
        self.composites: list[str] = []
        self.outer: list[Any] = []  # enclosing call-like / composite eqns, for locations

    def run(self, closed: jcore.ClosedJaxpr, args: Sequence[Val]) -> list[Val]:
        """Translate the top-level jaxpr on the given input values."""
        return self.eval_jaxpr(closed.jaxpr, closed.consts, args)

    def eval_jaxpr(self, jaxpr: jcore.Jaxpr, consts: Sequence, args: Sequence[Val]) -> list[Val]:
        """Translate one jaxpr (recursively for bodies)."""
        env: dict[Any, Val] = {}

        def read(v: Any) -> Val:
            if isinstance(v, jcore.Literal):
                return const_val(v.val, v.aval)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            env[v] = c if isinstance(c, Val) else const_val(c, v.aval)
        for v, a in zip(jaxpr.invars, args):
            env[v] = a
        for eqn in jaxpr.eqns:
            outs = self.eqn(eqn, [read(v) for v in eqn.invars])
            for v, o in zip(eqn.outvars, outs):
                if not isinstance(v, jcore.DropVar):
                    env[v] = o
        return [read(v) for v in jaxpr.outvars]

    @contextlib.contextmanager
    def _inside(self, name: str, eqn: Any) -> Iterator[None]:
        self.composites.append(name)
        self.outer.append(eqn)
        try:
            yield
        finally:
            self.composites.pop()
            self.outer.pop()

    def eqn(self, eqn: Any, ins: list[Val]) -> list[Val]:
        """Translate one eqn; returns its output values."""
        prim = eqn.primitive
        if prim is lax_internal.composite_p:
            name = eqn.params["name"]
            with self._inside(name, eqn):
                rule = rules.COMPOSITES.get(name)
                if rule is not None and not all(v.is_const for v in ins):
                    attrs = composite_attributes(eqn)
                    # Constants the decomposition closes over come first; the schema's
                    # tensor operands (named in ``operands``) are the last ones.
                    n = len([o for o in str(attrs.get("operands", "")).split(",") if o])
                    named = ins[len(ins) - n:] if "operands" in attrs else ins
                    try:
                        out = self._apply(rule, eqn, named, attrs, strict=False)
                    except rules.Unsupported:
                        out = None  # the decomposition below handles it (ops emitted so far are dead code)
                    if out is not None:
                        return out
                body = eqn.params["jaxpr"]
                return self.eval_jaxpr(body.jaxpr, body.consts, ins)
        if prim.name in _CALL_LIKE:
            body = next((eqn.params[k] for k in _BODY_PARAMS if k in eqn.params), None)
            if body is None:
                raise ExportError(f"{prim.name} without a body jaxpr at {location_of(eqn)}")
            self.outer.append(eqn)
            try:
                if isinstance(body, jcore.ClosedJaxpr):
                    return self.eval_jaxpr(body.jaxpr, body.consts, ins)
                return self.eval_jaxpr(body, [], ins)
            finally:
                self.outer.pop()
        if prim.name in _IDENTITY:
            return list(ins)
        if all(v.is_const for v in ins) and prim.name not in _NO_FOLD \
                and all(all(is_static(d) for d in v.aval.shape) for v in eqn.outvars):
            return fold(eqn, ins)
        rule = rules.RULES.get(prim)
        if rule is None:
            raise self.unsupported(eqn, f"jaxpr primitive '{prim.name}' has no LiteRT rule "
                                        "(add one in exporters/litert/rules/)")
        return self._apply(rule, eqn, ins)

    def _apply(self, rule: Any, eqn: Any, ins: list[Val], attrs: dict | None = None,
               strict: bool = True) -> list[Val] | None:
        try:
            out = rule(self.em, eqn, *ins) if attrs is None else rule(self.em, eqn, attrs, *ins)
        except rules.Unsupported as e:
            if not strict:
                raise
            raise self.unsupported(eqn, str(e)) from None
        except ConversionError:
            raise
        except Exception as e:  # wrap the innermost failure once, with where it happened
            shapes = ", ".join(f"{v.dtype.name}{list(v.shape)}" for v in ins)
            name, where = self._where(eqn)
            raise ExportError(f"LiteRT export of {name} failed at {where}: "
                              f"{type(e).__name__}: {str(e).strip().splitlines()[0]} (inputs: {shapes})") from e
        if out is None:
            return None
        return list(out) if isinstance(out, (list, tuple)) else [out]

    def _where(self, eqn: Any) -> tuple[str, SourceLocation]:
        """(op name, location): the FX node's ATen op and user line when known, else the
        enclosing composite / primitive and the innermost non-JAX frame."""
        prim = f"lax.{eqn.primitive.name}"
        if eqn.primitive is lax_internal.composite_p:
            name = eqn.params["name"]
        else:
            name = f"{self.composites[-1]} ({prim})" if self.composites else prim
        chain = [eqn] + self.outer[::-1]  # this eqn, then its enclosing calls, innermost first
        for e in chain if self.locate is not None else []:
            found = self.locate(e)
            if found is not None:
                aten, loc = found
                return (name if self.composites else f"{aten} ({prim})"), loc
        for e in chain:
            loc = location_of(e)
            if loc.file:
                return name, loc
        return name, SourceLocation()

    def unsupported(self, eqn: Any, reason: str) -> UnsupportedOpError:
        """The error for an eqn the exporter cannot take."""
        name, where = self._where(eqn)
        return UnsupportedOpError(name, "litert", where, reason=reason)


def composite_attributes(eqn: Any) -> dict:
    """A composite's attributes as a plain dict (arrays as NumPy arrays)."""
    out = {}
    for name, leaves, treedef in eqn.params.get("attributes", ()):
        value = jax.tree_util.tree_unflatten(treedef, leaves)
        if hasattr(value, "val") and not isinstance(value, (str, bytes)):
            value = np.asarray(value.val)
        out[name] = value
    return out


def fold(eqn: Any, ins: list[Val]) -> list[Val]:
    """Evaluate an eqn on constant inputs now."""
    args = [jnp.asarray(np.asarray(v.full())) for v in ins]
    with jax.enable_x64(True):
        out = eqn.primitive.bind(*args, **eqn.params)
    outs = out if eqn.primitive.multiple_results else [out]
    return [const_val(np.asarray(o), v.aval) for o, v in zip(outs, eqn.outvars)]
