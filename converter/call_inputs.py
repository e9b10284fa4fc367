"""Calling a converted model the way the model itself is called.

A converted model takes its tensor inputs as one flat list: the tensors of the sample call's arguments in
``torch.export``'s order (positional arguments, nested tuples, lists and dicts in their order, then the
keyword arguments in the order the sample call gave them; ``None`` and Python numbers are not inputs).
:class:`CallInputs` finds that list in a call made as the model is called (``art(ids, None, mask)``,
``art(x, cache={"k": k, "v": v})``, ``art(x, b=b, a=a)`` with the keywords in any order), so every
target takes the model's own call; a call of exactly the flat inputs works as before.

It needs no PyTorch at call time (a reloaded StableHLO artifact runs without it): the keyword names are
plain strings, saved with an artifact that is written to disk.

The sample call's Python numbers and strings (``art(x, 2.0, flag=True)``) are no inputs: torch.export holds them
fixed in the program. A call that gives another value in their place is refused (:class:`InputError` naming the
argument), where the program would compute with the sample's and say nothing; an argument the call leaves out keeps
the sample's value (not the ``forward``'s default: the converted program knows no other).

It also knows the sizes each dynamic dim was declared for (``dynamic_shapes=``' ``Dim(min=, max=)``), which
:func:`check_input` enforces as torch.export's program does: a size above the max, or below a min above 2 (a
program is called at sizes 0 and 1 below a min of 2: torch's 0/1 specialization), is refused. Past the max a
lowering that relied on the range (a gather from a table of ``max`` positions, which JAX clamps) would give
wrong values, or a kernel an obscure error.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from converter.call_outputs import CallOutputs
from converter.dim_links import carriers, check_links, linear_dims
from converter.errors import InputError

#: Name of the metadata entry a saved ``.onnx`` / ``.tflite`` file keeps its call inputs in (:meth:`CallInputs.to_json`;
#: per signature in a ``.tflite``).
METADATA_NAME = "tpu_export.call_inputs"


def _is_array(x: Any) -> bool:
    """A tensor input: a torch tensor, NumPy array or scalar, JAX array (anything with a shape and a dtype)."""
    return hasattr(x, "shape") and hasattr(x, "dtype")


class CallInputs:
    """Where a converted model's ``n_inputs`` flat inputs are in a call.

    Args:
        n_inputs: how many tensor inputs the converted model takes.
        keywords: the names of the sample call's keyword arguments, in its order (their tensors follow the
            positional ones).
    """

    def __init__(self, n_inputs: int, keywords: Sequence[str] = (), ranges: Sequence | None = None,
                 constants: dict | None = None, links: Sequence | None = None, symbols: dict | None = None,
                 outputs: CallOutputs | None = None):
        self.n_inputs = n_inputs
        #: how the program's flat outputs make the model's result (:mod:`converter.call_outputs`; ``None``: a
        #: file saved without it, whose outputs come back flat)
        self.outputs = outputs
        self.keywords = tuple(keywords)
        #: per input: ``None``, or per dim ``None`` or the ``(lowest, highest)`` sizes it takes (either ``None``)
        self.ranges: tuple = tuple(ranges) if ranges is not None else (None,) * n_inputs
        #: per input: ``None``, or per dim ``None`` or its ``(symbol, scale, offset)`` (:mod:`converter.dim_links`)
        self.links: tuple = tuple(links) if links is not None else (None,) * n_inputs
        #: the ``(lowest, highest)`` values of the symbols of derived dims (``2 * h``), either ``None``
        self.symbols: dict = dict(symbols or {})
        found = list(carriers(self.links).values())
        #: some dynamic dim is derived (``2 * h``) or shared by two dims: sizes :meth:`check_links` checks
        self._linked = any(link[1:] != (1, 0) for link in found) or len({link[0] for link in found}) < len(found)
        #: the sample call's Python numbers and strings, which the converted program holds fixed, as ``[name,
        #: value]`` pairs (the name torch.export gives the input: the argument's, ``d_a`` for ``d={"a": 3}``):
        #: ``"args"``, those of the positional arguments in order; ``"kwargs"``, keyword → those of that argument
        self.constants: dict = constants or {"args": [], "kwargs": {}}

    @classmethod
    def of(cls, program: Any) -> "CallInputs":
        """The call structure of a :class:`~converter.lowering.interpreter.LoweredProgram` (its captured
        program's input tree: ``(args, kwargs)``, and the ranges of its dynamic dims)."""
        exported = getattr(program, "exported", None)
        spec = exported.call_spec.in_spec if exported is not None else None
        keywords = ()
        if spec is not None and spec.num_children == 2:
            keywords = tuple(spec.child(1).context or ())
        try:
            links = linear_dims(program)
        except ValueError:  # (not torch.export's Dim API: nothing to check; the jaxpr exporters refuse it)
            links = None
        return cls(len(program.inputs), keywords, _input_ranges(program), _sample_constants(exported), links,
                   _symbol_ranges(program, links),
                   CallOutputs.of(exported, len(program.outputs)) if exported is not None else None)

    @property
    def worth_saving(self) -> bool:
        """Whether a saved file needs it: keyword names, ranges, fixed numbers, linked dims or an output structure
        (without any, positional calls of any size returning the outputs flat)."""
        return bool(self.keywords) or any(r is not None for r in self.ranges) or \
            bool(self.constants["args"]) or any(self.constants["kwargs"].values()) or self._linked or \
            (self.outputs is not None and self.outputs.worth_saving)

    def check_links(self, names: Sequence[str], shapes: Sequence[Sequence[int]], what: str) -> None:
        """Refuse a call whose input ``shapes`` fit no value of a dynamic dim's symbol
        (:func:`converter.dim_links.check_links`)."""
        if self._linked:
            check_links(self.links, self.symbols, names, shapes, what)

    def to_json(self) -> dict:
        """What a saved artifact keeps of it (:meth:`from_json`)."""
        ranges = [None if r is None else [None if d is None else list(d) for d in r] for r in self.ranges]
        links = [None if r is None else [None if d is None else list(d) for d in r] for r in self.links]
        return {"keywords": list(self.keywords), "dim_ranges": ranges, "constants": self.constants,
                "dim_links": links, "dim_symbols": {k: list(v) for k, v in self.symbols.items()},
                "outputs": self.outputs.to_json() if self.outputs is not None else None}

    @classmethod
    def from_json(cls, data: str | dict | None, n_inputs: int, n_outputs: int | None = None) -> "CallInputs":
        """A :meth:`to_json` dict (or its JSON text) read back (``None``, or a file written before it was
        saved: positional inputs, no ranges, flat outputs); ``n_outputs``: the file's outputs (its saved output
        structure is read when given).

        Raises:
            InputError: a damaged entry.
        """
        if not data:
            return cls(n_inputs, outputs=CallOutputs(n_outputs) if n_outputs is not None else None)
        try:
            data = json.loads(data) if isinstance(data, str) else data
            ranges = data.get("dim_ranges")
            if ranges is not None:
                ranges = [None if r is None else tuple(None if d is None else (d[0], d[1]) for d in r)
                          for r in ranges]
                if len(ranges) != n_inputs:
                    raise ValueError(f"{len(ranges)} ranges for {n_inputs} inputs")
            constants = data.get("constants")
            if constants is not None:
                constants = {"args": [[str(n), v] for n, v in constants["args"]],
                             "kwargs": {str(k): [[str(n), v] for n, v in pairs]
                                        for k, pairs in constants["kwargs"].items()}}
            links = data.get("dim_links")
            if links is not None:
                links = [None if r is None else tuple(None if d is None else (str(d[0]), int(d[1]), int(d[2]))
                                                      for d in r) for r in links]
                if len(links) != n_inputs:
                    raise ValueError(f"{len(links)} dim links for {n_inputs} inputs")
            symbols = {str(k): (v[0], v[1]) for k, v in (data.get("dim_symbols") or {}).items()}
            outputs = CallOutputs.from_json(data.get("outputs"), n_outputs) if n_outputs is not None else None
            return cls(n_inputs, tuple(str(k) for k in data.get("keywords", ())), ranges, constants, links, symbols,
                       outputs)
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as e:  # (json's errors are ValueErrors)
            raise InputError(f"the artifact's saved call inputs are damaged ({type(e).__name__}: {e})") from e

    def describe(self, names: Sequence[str], output_names: Sequence[str] = ()) -> list[str]:
        """Lines for ``tpu-export inspect``: the keyword arguments, the Python numbers and strings the program holds
        fixed, the declared ranges of the dynamic dims of the inputs named ``names`` (none without any), and the
        structure the outputs named ``output_names`` are returned in (:meth:`CallOutputs.describe`)."""
        lines = [f"keyword arguments: {', '.join(self.keywords)}"] if self.keywords else []
        kwargs = self.constants["kwargs"]
        fixed = [*self.constants["args"], *(pair for k in self.keywords for pair in kwargs.get(k, ()))]
        if fixed:
            lines.append(f"fixed arguments: {', '.join(f'{n}={v!r}' for n, v in fixed)}")
        for name, dims in zip(names, self.ranges):
            for i, bounds in enumerate(dims or ()):
                if bounds is not None:
                    lines.append(f"input {name} dim {i}: sizes {_span(*bounds)}")
        if self.outputs is not None:
            lines += self.outputs.describe(output_names)
        return lines

    def flatten(self, args: Sequence[Any], kwargs: dict | None = None) -> list[Any]:
        """The flat inputs of the call ``(*args, **kwargs)``.

        Raises:
            InputError: a keyword the model was not converted with, or a number of tensors other than the
                model's inputs.
        """
        kwargs = kwargs or {}
        if not kwargs and len(args) == self.n_inputs and not any(_nested(a) for a in args):
            return list(args)  # the flat inputs themselves (a list of numbers may be one array-like input)
        self._check_constants(args, kwargs)  # (not of the flat inputs: their lists of numbers are array-likes)
        unknown = [k for k in kwargs if k not in self.keywords]
        if unknown:
            known = ", ".join(self.keywords) if self.keywords else "none"
            raise InputError(f"unexpected keyword argument(s) {', '.join(unknown)}: the model was converted with "
                             f"keyword arguments: {known}")
        flat: list[Any] = []
        _leaves(tuple(args), flat)
        for name in self.keywords:  # the sample call's order, whatever order this call gives them in
            if name in kwargs:
                _leaves(kwargs[name], flat)
        if len(flat) != self.n_inputs:
            raise InputError(f"the model takes {self.n_inputs} tensor inputs, the call gave {len(flat)} (its "
                             "arguments' tensors, nested tuples, lists and dicts included)")
        return flat

    def _check_constants(self, args: Sequence[Any], kwargs: dict) -> None:
        """Raise :class:`InputError` where the call gives a Python number or string other than the sample call's
        in its place: the converted program holds the sample's (torch.export specializes them), so it would
        compute with that one and say nothing. Arguments the call leaves out keep the sample's."""
        given = []
        _leaves(tuple(args), given, _is_constant)
        for got, (name, want) in zip(given, self.constants["args"]):
            if not _same(got, want):
                raise InputError(_fixed_message(name, got, want))
        for keyword, wanted in self.constants["kwargs"].items():
            if keyword in kwargs:
                given = []
                _leaves(kwargs[keyword], given, _is_constant)
                for got, (name, want) in zip(given, wanted):
                    if not _same(got, want):
                        raise InputError(_fixed_message(name, got, want))


def _same(a: Any, b: Any) -> bool:
    """Whether two Python constants are the one torch.export's guard takes (2 is 2.0, NaN is itself; a bool or a
    string only itself)."""
    if isinstance(a, (bool, str)) or isinstance(b, (bool, str)):
        return type(a) is type(b) and a == b
    return a == b or (a != a and b != b)


def _fixed_message(name: str, got: Any, want: Any) -> str:
    """The refusal of ``got`` where the sample call gave ``want`` (:meth:`CallInputs._check_constants`)."""
    return (f"argument '{name}' is {got!r} but the model was converted with {want!r}: torch.export holds a Python "
            f"number or string fixed in the converted program, which would compute with {want!r}; pass {want!r}, "
            f"convert again with {got!r}, or make it a tensor input")


def _sample_constants(exported: Any) -> dict:
    """The sample call's Python numbers and strings (:attr:`CallInputs.constants`), from ``exported``'s input specs:
    its user inputs are the leaves of ``(args, kwargs)`` in order, a constant one a ``ConstantArgument``."""
    out: dict = {"args": [], "kwargs": {}}
    spec = exported.call_spec.in_spec if exported is not None else None
    if spec is None or spec.num_children != 2:
        return out
    from torch.export.graph_signature import ConstantArgument, InputKind

    user = [s.arg for s in exported.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    if len(user) != spec.num_leaves:
        return out

    def values(args: list) -> list:
        return [[a.name, a.value] for a in args if isinstance(a, ConstantArgument)
                and isinstance(a.value, (bool, int, float, str))]

    n = spec.child(0).num_leaves
    out["args"] = values(user[:n])
    kwargs = spec.child(1)
    for name, child in zip(kwargs.context or (), kwargs.children()):
        out["kwargs"][str(name)] = values(user[n:n + child.num_leaves])
        n += child.num_leaves
    return out


def _dtype_kind(dtype: Any) -> str:
    """"bool", "integer", "complex" or "floating" for a dtype or its name (NumPy, ml_dtypes, torch, a string)."""
    name = getattr(dtype, "name", None) if not isinstance(dtype, str) else dtype
    name = str(name or dtype).replace("torch.", "")
    if name == "bool":
        return "bool"
    if name.startswith(("int", "uint", "long", "short")):
        return "integer"
    if name.startswith(("complex", "cfloat", "cdouble")):
        return "complex"
    return "floating"


def _input_ranges(program: Any) -> tuple:
    """Per input of ``program``, the sizes each dynamic dim takes (module docstring), from torch.export's
    ``range_constraints``: ``None`` for an input without a bounded dynamic dim."""
    bounds = _declared(program)
    out = []
    for spec in program.inputs:
        dims = []
        for d in spec.shape:
            lo, hi = bounds.get(d, (None, None)) if isinstance(d, str) else (None, None)
            dims.append(None if lo is None and hi is None else (lo, hi))
        out.append(tuple(dims) if any(d is not None for d in dims) else None)
    return tuple(out)


def _symbol_ranges(program: Any, links: Sequence) -> dict:
    """The ``(lowest, highest)`` values (either ``None``) of the symbols of ``links``' derived dims, from
    torch.export's ``range_constraints``."""
    derived = {link[0] for link in carriers(links or ()).values() if link[1:] != (1, 0)}
    return {sym: bounds for sym, bounds in _declared(program).items() if sym in derived}


def _declared(program: Any) -> dict:
    """Each dim expression of torch.export's ``range_constraints`` (its text) → the ``(lowest, highest)`` sizes it
    takes, either ``None``: a lowest of 2 or less is none (0 and 1 pass below a min of 2, as in torch)."""
    constraints = getattr(getattr(program, "exported", None), "range_constraints", None) or {}
    out = {}
    for sym, r in constraints.items():
        lo, hi = finite_bound(r.lower), finite_bound(r.upper)
        out[str(sym)] = (lo if lo is not None and lo > 2 else None, hi)
    return out


def finite_bound(v: Any) -> int | None:
    """A bound of torch.export's ``range_constraints`` (sympy) as an int, or ``None`` for an infinite one (torch's
    ``int_oo``)."""
    if getattr(v, "is_infinite", False) or str(v) in ("oo", "-oo", "int_oo", "-int_oo"):
        return None
    try:
        return int(v)
    except (TypeError, ValueError, OverflowError, AttributeError):
        return None


def check_input(name: str, shape: Sequence[int], dtype: Any, want_shape: Sequence, want_dtype: Any,
                what: str, dim_ranges: Sequence | None = None) -> None:
    """Raise one clear :class:`InputError` when a call's input does not fit the converted model's: another rank,
    another size of a static dim, a dynamic dim outside the range it was converted for, or another kind of dtype
    (a float for an integer input; within a kind the artifacts cast, as NumPy's float64 arrays for a float32
    model).

    Args:
        name: the input's name in the artifact.
        shape, dtype: the given input's.
        want_shape: the model's; a dynamic dim is a ``str``, ``None`` or negative.
        want_dtype: the model's dtype (or its name).
        what: the artifact, for the message ("the LiteRT model").
        dim_ranges: per dim, ``None`` or the ``(lowest, highest)`` sizes it takes (:attr:`CallInputs.ranges`).
    """
    def static(d: Any) -> bool:
        return d is not None and not isinstance(d, str) and int(d) >= 0

    shape = [int(d) for d in shape]
    if len(shape) != len(want_shape) or any(static(w) and int(w) != d for w, d in zip(want_shape, shape)):
        shown = [int(w) if static(w) else (w if isinstance(w, str) else "dynamic") for w in want_shape]
        raise InputError(f"input '{name}' has shape {shape} but {what} takes {shown}; a dim that varies must be "
                         f"declared dynamic when converting (dynamic_shapes=)")
    for i, (size, bounds) in enumerate(zip(shape, dim_ranges or ())):
        lo, hi = bounds or (None, None)
        if (lo is not None and size < lo) or (hi is not None and size > hi):
            raise InputError(f"input '{name}' has shape {shape} but dim {i} of {what} takes sizes {_span(lo, hi)} "
                             f"(the range declared when converting, by dynamic_shapes= or --dynamic; torch.export's "
                             f"program refuses {size} too): convert with a wider range")
    if _dtype_kind(dtype) != _dtype_kind(want_dtype):
        given = getattr(dtype, "name", None) or str(dtype).replace("torch.", "")
        wanted = getattr(want_dtype, "name", None) or str(want_dtype).replace("torch.", "")
        raise InputError(f"input '{name}' is {given} but {what} takes {wanted}")


def _span(lo: int | None, hi: int | None) -> str:
    """A range of sizes in words: "3 to 8", "up to 8", "3 or more"."""
    return f"{lo} to {hi}" if lo is not None and hi is not None else f"up to {hi}" if lo is None else f"{lo} or more"


def _nested(x: Any) -> bool:
    """Whether a call argument is a structure of inputs, or ``None``, rather than one input."""
    if x is None or isinstance(x, (tuple, dict)):
        return True
    return isinstance(x, list) and any(_is_array(i) or _nested(i) for i in x)


def _leaves(x: Any, out: list, keep: Any = _is_array) -> None:
    """Append ``x``'s leaves that ``keep`` takes (its tensors) to ``out`` in ``torch.export``'s order."""
    if keep(x):
        out.append(x)
    elif _is_array(x):
        return
    elif isinstance(x, (tuple, list)):
        for item in x:
            _leaves(item, out, keep)
    elif isinstance(x, dict):
        for item in x.values():
            _leaves(item, out, keep)


def _is_constant(x: Any) -> bool:
    """A Python number or string (which torch.export holds fixed in the program)."""
    return isinstance(x, (bool, int, float, str)) and not _is_array(x)


__all__ = ["METADATA_NAME", "CallInputs", "check_input", "finite_bound"]
