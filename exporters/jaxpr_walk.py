"""The jaxpr walker shared by the LiteRT and ONNX exporters.

:class:`JaxprTranslator` walks a ClosedJaxpr and hands each eqn to the exporter's
rule tables; a subclass names the target and supplies its value type, rule tables
and constant folding:

* Call-like eqns (``jit``, ``closed_call``, ``custom_jvp_call``, ``custom_vjp_call``,
  ``remat``) are inlined; ``custom_linear_solve`` as its ``solve`` body.
* ``composite`` eqns named ``aten.<op>`` go to ``COMPOSITES``; a composite without a
  rule, or whose rule declines (returns ``None`` or raises ``Unsupported``), is
  lowered through its decomposition jaxpr.
* An eqn whose inputs are all constants is evaluated now (constant folding), except
  the primitives in ``NO_FOLD``, whose rules handle constant inputs themselves.
* Empty values: no kernel runs on one (TFLite's kernels and XNNPACK refuse many zero-size operands; ONNX
  Runtime's Expand to a 0 dim kept the 1). A result whose shape is statically empty is a constant of that
  shape, and a reduction, contraction or convolution of an empty operand into a non-empty result
  (:data:`EMPTY_OPERAND_CONSTANT`) is its constant value (the reduction's identity, zeros for a matmul over a
  zero-length dim), evaluated at export time; a composite with an empty operand is its decomposition.
* A ``scan`` of a few steps (``jax.scipy.special``'s polynomial evaluations) is unrolled, a longer one is a
  loop where the target has one (``LOOPS``: a ``while``, :mod:`exporters.loops`); a ``while`` is the target's
  :meth:`JaxprTranslator.while_loop`; a ``cond`` between
  per-platform implementations is its CPU branch, any other ``cond`` every branch and a select.
* A primitive neither format has an operator for, and the exporter no rule, is translated through its
  expansion (:mod:`exporters.expansions`: written once, for both).
* Random numbers are refused by name (:data:`_RANDOM`).
* A complex value is a pair of real values, and an eqn on one is translated through its formula on the
  parts (:mod:`exporters.complex_values`); a complex program input or output is refused.
* Everything else goes to ``RULES``, keyed on the primitive object; a primitive
  without a rule raises :class:`UnsupportedOpError` naming the primitive, the
  enclosing ATen op and the user's source line.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, ClassVar, Iterator, Sequence

import jax
import numpy as np
from jax._src import core as jcore
from jax._src import source_info_util
from jax._src.lax import lax as lax_internal

from converter.errors import ConversionError, ExportError, SourceLocation, UnsupportedOpError
from exporters import complex_values, loops
from exporters.complex_values import ComplexPair, is_complex, touches_complex
from exporters.jaxpr_values import JaxprValue, is_static, same_dim  # noqa: F401 (re-exported)
from exporters.expansions import EXPANSIONS, expansion_jaxpr
from exporters.fold import fold
from exporters.rule_table import Unsupported

#: Parameters that hold an inlinable body, per call-like primitive.
_BODY_PARAMS = ("jaxpr", "call_jaxpr", "fun_jaxpr")
_CALL_LIKE = {"jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call",
              "custom_vjp_call_jaxpr", "remat", "remat2", "checkpoint", "custom_lin"}
#: The longest ``scan`` the exporters unroll (:meth:`JaxprTranslator._unrolled_scan`).
MAX_UNROLLED_SCAN = 64
#: Primitives that make random numbers: refused, an exported file being a deterministic program (with the
#: seed a constant, folding them would silently bake one draw into the file).
_RANDOM = frozenset({"random_seed", "random_wrap", "random_unwrap", "random_bits", "random_split", "random_fold_in",
                     "threefry2x32"})
#: Primitives whose result, when an operand is empty and the result is not, depends on the shapes only.
EMPTY_OPERAND_CONSTANT = frozenset({
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "reduce_xor", "reduce",
    "dot_general", "conv_general_dilated"})
#: Values the runtime does not need (identity at inference).
_IDENTITY = {"copy", "copy_p", "optimization_barrier", "stop_gradient", "reduce_precision", "sharding_constraint"}


def _static_size(aval: Any) -> int | None:
    """The element count of an abstract value with a static shape, else ``None``."""
    shape = getattr(aval, "shape", None)
    if shape is None or not all(is_static(d) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


def _symbolic_params(eqn: Any) -> bool:
    """Whether a parameter of ``eqn`` holds a symbolic dim (a slice of a constant from a dynamic position: its
    value depends on an input's size, so it cannot be folded into a constant)."""
    for value in eqn.params.values():
        for x in value if isinstance(value, (tuple, list)) else (value,):
            if jax.export.is_symbolic_dim(x):
                return True
    return False


def location_of(eqn: Any) -> SourceLocation:
    """The innermost user (non-JAX) frame of an eqn, as a :class:`SourceLocation`."""
    try:
        frame = source_info_util.user_frame(eqn.source_info.traceback)
    except Exception:  # source info is best effort; never mask the real error
        frame = None
    if frame is None:
        return SourceLocation()
    return SourceLocation(frame.file_name, frame.start_line, frame.function_name)


def const_val(val_type: Callable, value: Any, aval: Any = None) -> Any:
    """A constant ``val_type`` value from a literal / array (cast to ``aval``'s dtype when given)."""
    dtype = aval.dtype if aval is not None and hasattr(aval, "dtype") else None
    arr = np.asarray(value, dtype=dtype)
    return val_type(arr.shape, arr.dtype, const=arr)


def composite_attributes(eqn: Any) -> dict:
    """A composite's attributes as a plain dict (arrays as NumPy arrays)."""
    out = {}
    for name, leaves, treedef in eqn.params.get("attributes", ()):
        value = jax.tree_util.tree_unflatten(treedef, leaves)
        if hasattr(value, "val") and not isinstance(value, (str, bytes)):
            value = np.asarray(value.val)
        out[name] = value
    return out


class JaxprTranslator:
    """Translates jaxprs through one exporter's rule tables (see module docstring).

    Subclasses set the class attributes below and :meth:`fold`.

    Args:
        em: the output under construction, passed to every rule as its first argument
            (LiteRT's ``Emitter``, ONNX's ``OnnxGraph``).
        locate: optional ``eqn -> (ATen op name, SourceLocation) | None`` that maps an
            eqn back to the FX node it was lowered from (see ``jaxpr_trace.fx_locator``).
    """

    #: Display name in error messages ("LiteRT").
    TARGET: ClassVar[str] = ""
    #: Target key of :class:`UnsupportedOpError` ("litert"); rules live in ``exporters/<KEY>/rules/``.
    KEY: ClassVar[str] = ""
    #: The value class (constructed as ``VAL(shape, dtype, const=array)`` for constants).
    VAL: ClassVar[Any] = None
    #: Primitive object -> ``rule(em, eqn, *vals)``.
    RULES: ClassVar[dict] = {}
    #: Composite name -> ``rule(em, eqn, attrs, *vals)`` (may decline with ``None``).
    COMPOSITES: ClassVar[dict] = {}
    #: Primitive names never folded (their rules handle constant inputs themselves).
    NO_FOLD: ClassVar[frozenset] = frozenset()
    #: Names of dtypes the target has no type for: an eqn making or reading one is refused where it is.
    NO_DTYPES: ClassVar[frozenset] = frozenset()
    #: Whether the target has a loop operator (:meth:`while_loop`); without one a long ``scan`` and a
    #: ``while`` are refused by name.
    LOOPS: ClassVar[bool] = False

    def __init__(self, em: Any, locate: Any = None):
        self.em = em
        self.locate = locate
        self.composites: list[str] = []
        self.outer: list[Any] = []  # enclosing call-like / composite eqns, for locations

    def fold(self, eqn: Any, ins: list) -> list:
        """Evaluate an eqn whose inputs are all constants; returns constant values (:func:`exporters.fold.fold`)."""
        return fold(eqn, ins, self.VAL)

    def const(self, value: Any, aval: Any = None) -> Any:
        """A constant value of this target's value type."""
        return const_val(self.VAL, value, aval)

    def run(self, closed: jcore.ClosedJaxpr, args: Sequence) -> list:
        """Translate the top-level jaxpr on the given input values (none of them, nor of its outputs, complex)."""
        jaxpr = closed.jaxpr
        for i, v in enumerate(jaxpr.invars):
            if is_complex(v.aval.dtype):
                raise UnsupportedOpError(f"input {i} ({v.aval.dtype.name})", self.KEY, SourceLocation(), hint=False,
                                         reason=f"{self.TARGET} has no complex tensors (pass torch.view_as_real(x) "
                                                "and take torch.view_as_complex of it inside the model)")
        outs = self.eval_jaxpr(jaxpr, closed.consts, args)
        for v, out in zip(jaxpr.outvars, outs):
            if type(out) is ComplexPair:
                eqn = next((e for e in jaxpr.eqns if v in e.outvars), None)
                reason = (f"a complex output ({self.TARGET} has no complex tensors: return torch.view_as_real(x), "
                          "the same numbers as a real tensor)")
                if eqn is None:
                    raise UnsupportedOpError("output", self.KEY, SourceLocation(), reason=reason, hint=False)
                raise self.unsupported(eqn, reason)
        return outs

    def eval_jaxpr(self, jaxpr: jcore.Jaxpr, consts: Sequence, args: Sequence) -> list:
        """Translate one jaxpr (recursively for bodies)."""
        env: dict[Any, Any] = {}

        def read(v: Any) -> Any:
            if isinstance(v, jcore.Literal):
                return self.const(v.val, v.aval)
            return env[v]

        for v, c in zip(jaxpr.constvars, consts):
            env[v] = c if isinstance(c, self.VAL) else self.const(c, v.aval)
        for v, a in zip(jaxpr.invars, args):
            env[v] = a
        for eqn in jaxpr.eqns:
            outs = self.eqn(eqn, [read(v) for v in eqn.invars])
            for v, o in zip(eqn.outvars, outs):
                if not isinstance(v, jcore.DropVar):
                    env[v] = o
        return [read(v) for v in jaxpr.outvars]

    @contextlib.contextmanager
    def _within(self, eqn: Any) -> Iterator[None]:
        """Translate inside ``eqn`` (its body, expansion or formula): errors there name it."""
        self.outer.append(eqn)
        try:
            yield
        finally:
            self.outer.pop()

    @contextlib.contextmanager
    def _inside(self, name: str, eqn: Any) -> Iterator[None]:
        self.composites.append(name)
        try:
            with self._within(eqn):
                yield
        finally:
            self.composites.pop()

    def eqn(self, eqn: Any, ins: list) -> list:
        """Translate one eqn; returns its output values."""
        sizes = [_static_size(v.aval) for v in eqn.outvars]
        if sizes and all(n == 0 for n in sizes):
            return [self.const(np.zeros(v.aval.shape, v.aval.dtype)) for v in eqn.outvars]
        if any(v.static and 0 in v.shape for v in ins) and all(n is not None for n in sizes):
            return self._empty_operand(eqn, ins)
        return self._translate(eqn, ins)

    def _empty_operand(self, eqn: Any, ins: list) -> list:
        """An eqn with a statically empty operand and a non-empty static result (module docstring)."""
        if eqn.primitive is lax_internal.composite_p:  # its rule would run a kernel on the empty operand
            body = eqn.params["jaxpr"]
            with self._inside(eqn.params["name"], eqn):
                return self.eval_jaxpr(body.jaxpr, body.consts, ins)
        if eqn.primitive.name in EMPTY_OPERAND_CONSTANT and all(v.static for v in ins):
            return self.fold(eqn, [self.const(np.zeros(v.shape, v.dtype)) for v in ins])
        return self._translate(eqn, ins)

    def _translate(self, eqn: Any, ins: list) -> list:
        """Translate one eqn whose values are not empty (or not statically so)."""
        prim = eqn.primitive
        if prim is lax_internal.composite_p:
            name = eqn.params["name"]
            with self._inside(name, eqn):
                rule = self.COMPOSITES.get(name)
                if rule is not None and not all(v.is_const for v in ins) \
                        and not any(type(v) is ComplexPair for v in ins):
                    attrs = composite_attributes(eqn)
                    # Constants the decomposition closes over come first; the schema's
                    # tensor operands (named in ``operands``) are the last ones.
                    n = len([o for o in str(attrs.get("operands", "")).split(",") if o])
                    named = ins[len(ins) - n:] if "operands" in attrs else ins
                    try:
                        out = self._apply(rule, eqn, named, attrs, strict=False)
                    except Unsupported:
                        out = None  # the decomposition below handles it (what was emitted so far is dead)
                    if out is not None:
                        return out
                body = eqn.params["jaxpr"]
                return self.eval_jaxpr(body.jaxpr, body.consts, ins)
        if prim.name in _CALL_LIKE:
            body = next((eqn.params[k] for k in _BODY_PARAMS if k in eqn.params), None)
            if body is None:
                raise ExportError(f"{prim.name} without a body jaxpr at {location_of(eqn)}")
            with self._within(eqn):
                if isinstance(body, jcore.ClosedJaxpr):
                    return self.eval_jaxpr(body.jaxpr, body.consts, ins)
                return self.eval_jaxpr(body, [], ins)
        if prim.name == "custom_linear_solve":  # (``jnp.linalg.solve``: its value is its ``solve`` jaxpr's)
            n = eqn.params["const_lengths"]
            body, start = eqn.params["jaxprs"].solve, n.matvec + n.vecmat
            with self._within(eqn):
                return self.eval_jaxpr(body.jaxpr, body.consts, ins[start:start + n.solve] + ins[sum(n):])
        if prim.name in _IDENTITY:
            return list(ins)
        if prim.name == "cond" and eqn.params.get("branches_platforms"):  # a per-platform implementation
            return self._default_platform_branch(eqn, ins)
        if prim.name == "cond" and prim not in self.RULES:
            return self._selected_branches(eqn, ins)
        if prim.name in _RANDOM:
            raise self.unsupported(eqn, f"random numbers ({prim.name}): an exported {self.TARGET} model is a "
                                        "deterministic program; pass the noise in as an input (or export in eval mode, "
                                        "where dropout draws none)")
        if prim.name == "scan" and prim not in self.RULES:
            return self._scan(eqn, ins)
        if all(v.is_const for v in ins) and prim.name not in self.NO_FOLD \
                and all(all(is_static(d) for d in v.aval.shape) for v in eqn.outvars) and not _symbolic_params(eqn):
            return self.fold(eqn, ins)
        if touches_complex(eqn):
            with self._within(eqn):
                try:
                    return complex_values.translate(self, eqn, ins)
                except Unsupported as e:
                    raise self.unsupported(eqn, str(e)) from None
        if prim.name == "while" and self.LOOPS and prim not in self.RULES:
            with self._within(eqn):
                return self.while_loop(eqn, ins)
        rule = self.RULES.get(prim)
        if rule is None and prim in EXPANSIONS:
            try:
                closed = expansion_jaxpr(eqn)
            except Unsupported as e:  # (an input the expansion does not cover)
                raise self.unsupported(eqn, str(e)) from None
            with self._within(eqn):
                return self.eval_jaxpr(closed.jaxpr, closed.consts, ins)
        if rule is None:
            raise self.unsupported(eqn, f"jaxpr primitive '{prim.name}' has no {self.TARGET} rule "
                                        f"(add one in exporters/{self.KEY}/rules/)")
        if self.NO_DTYPES:
            for v in eqn.outvars:
                if v.aval.dtype.name in self.NO_DTYPES:
                    raise self.unsupported(eqn, f"dtype {v.aval.dtype.name} has no {self.TARGET} type")
            for v in ins if not all(v.is_const for v in ins) else ():  # (a program input: abs of complex)
                if np.dtype(v.dtype).name in self.NO_DTYPES:
                    raise self.unsupported(eqn, f"dtype {np.dtype(v.dtype).name} has no {self.TARGET} type")
        return self._apply(rule, eqn, ins)

    def _default_platform_branch(self, eqn: Any, ins: list) -> list:
        """The branch of a platform-dependent ``cond`` (``jnp.diagonal`` has one for TPUs' Mosaic) that runs on a
        CPU: the exported file runs there, or on a phone's, never in Mosaic."""
        platforms = eqn.params["branches_platforms"]
        index = next((i for i, names in enumerate(platforms) if names is None or "cpu" in names), None)
        if index is None:
            raise self.unsupported(eqn, f"a cond specialized to the platforms {platforms} only")
        body = eqn.params["branches"][index]
        with self._within(eqn):
            return self.eval_jaxpr(body.jaxpr, body.consts, ins[1:])

    def _selected_branches(self, eqn: Any, ins: list) -> list:
        """A ``cond``: every branch translated on the operands, each output selected by the branch index
        (``select_n``). Branches are pure, so computing the ones not taken changes nothing but the cost (neither
        format has a conditional the rules could map it to)."""
        index, operands = ins[0], ins[1:]
        with self._within(eqn):
            results = [self.eval_jaxpr(b.jaxpr, b.consts, operands) for b in eqn.params["branches"]]
            if len(results) == 1:
                return results[0]
            return [self._through(lambda i, *outs: jax.lax.select_n(i, *outs), index, *column)
                    for column in zip(*results)]

    def while_loop(self, eqn: Any, ins: list) -> list:
        """A ``while`` eqn as the target's loop (targets with ``LOOPS``)."""
        raise NotImplementedError

    def scan_loop(self, eqn: Any, ins: list) -> list:
        """A ``scan`` too long to unroll, as a loop: by default rewritten as a ``while``
        (:func:`exporters.loops.scan_as_while`)."""
        closed = loops.scan_as_while(eqn)
        return self.eval_jaxpr(closed.jaxpr, closed.consts, ins)

    def _scan(self, eqn: Any, ins: list) -> list:
        length = eqn.params["length"]
        if (is_static(length) and 0 < length <= MAX_UNROLLED_SCAN) or not self.LOOPS:
            return self._unrolled_scan(eqn, ins)
        with self._within(eqn):
            return self.scan_loop(eqn, ins)

    def _unrolled_scan(self, eqn: Any, ins: list) -> list:
        """A ``scan`` of at most :data:`MAX_UNROLLED_SCAN` steps, unrolled: its body translated once per step
        on that step's slices of ``xs`` (constants fold: the polynomial coefficients ``jax.scipy.special``
        scans over), the per-step outputs stacked. Neither format has a loop the rules could map it to."""
        p = eqn.params
        length, n_consts, n_carry = p["length"], p["num_consts"], p["num_carry"]
        if not is_static(length) or not 0 < length <= MAX_UNROLLED_SCAN:
            raise self.unsupported(eqn, f"a scan of {length} steps (up to {MAX_UNROLLED_SCAN} are unrolled; "
                                        f"{self.TARGET} has no loop)")
        body = p["jaxpr"]
        consts, carry, xs = ins[:n_consts], ins[n_consts:n_consts + n_carry], ins[n_consts + n_carry:]
        per_step: list = []
        with self._within(eqn):
            for i in (range(length - 1, -1, -1) if p["reverse"] else range(length)):
                step = [self._through(lambda x, i=i: x[i], x) for x in xs]
                outs = self.eval_jaxpr(body.jaxpr, body.consts, [*consts, *carry, *step])
                carry = outs[:n_carry]
                per_step.append(outs[n_carry:])
            if p["reverse"]:
                per_step.reverse()
            ys = [self._through(lambda *y: jax.numpy.stack(y), *column) for column in zip(*per_step)]
        return [*carry, *ys]

    def _through(self, fn: Callable, *vals: Any) -> Any:
        """``fn`` (one output) of translated values, translated through this exporter's own rules."""
        return self.through_all(fn, *vals)[0]

    def through_all(self, fn: Callable, *vals: Any) -> list:
        """The outputs of ``fn`` (a JAX function returning an array or a list of them) on translated values,
        translated through this exporter's own rules."""
        avals = [jax.ShapeDtypeStruct(v.shape, v.dtype) for v in vals]
        with jax.enable_x64(True):  # (64-bit values stay 64-bit)
            closed = jax.make_jaxpr(fn)(*avals)
        return self.eval_jaxpr(closed.jaxpr, closed.consts, list(vals))

    def _apply(self, rule: Any, eqn: Any, ins: list, attrs: dict | None = None,
               strict: bool = True) -> list | None:
        try:
            out = rule(self.em, eqn, *ins) if attrs is None else rule(self.em, eqn, attrs, *ins)
        except Unsupported as e:
            if not strict:
                raise
            raise self.unsupported(eqn, str(e)) from None
        except ConversionError:
            raise
        except Exception as e:  # wrap the innermost failure once, with where it happened
            shapes = ", ".join(f"{v.dtype.name}{list(v.shape)}" for v in ins)
            name, where = self._where(eqn)
            raise ExportError(f"{self.TARGET} export of {name} failed at {where}: "
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
        """The error for an eqn the exporter cannot take.

        Without the "add a lowering" hint: the op has a lowering; what is missing is an
        exporter rule, which ``reason`` names.
        """
        name, where = self._where(eqn)
        return UnsupportedOpError(name, self.KEY, where, reason=reason, hint=False)
