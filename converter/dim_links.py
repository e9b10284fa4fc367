"""Dynamic dims as the inputs of a converted model carry them: one symbol shared by several inputs (a batch), or an
input's dim that is a multiple of a symbol plus a constant (``2 * Dim("h")``, ``Dim("n") + 1``: torch.export's
derived dims, what its "Suggested fixes" propose for a size that must be even).

Each dynamic dim of an input is ``scale * symbol + offset`` (a plain dim: scale 1, offset 0). The jaxpr exporters
read a symbol back from the first input that carries it (``(size - offset) // scale``, :func:`carriers`); a call
whose sizes fit no value of a symbol — an odd size for ``2 * h``, two sizes of one batch, a derived dim outside its
symbol's range — is refused by :func:`check_links` (ONNX Runtime and the LiteRT interpreter would run such a call on
a floor of the symbol, or on mismatched sizes, and say nothing).
"""

from __future__ import annotations

import functools
import re
from typing import Any, Sequence

import sympy

from converter.errors import InputError

#: A dynamic dim of an input: ``(symbol, scale, offset)``, the dim being ``scale * symbol + offset``.
Link = tuple


def linear_dims(program: Any) -> tuple:
    """Per input of a :class:`~converter.lowering.interpreter.LoweredProgram`: ``None`` (no dynamic dim), or per
    dim ``None`` (static) or its :data:`Link`.

    Raises:
        ValueError: a dynamic dim that is not one symbol's multiple plus a constant.
    """
    out = []
    for spec in program.inputs:
        dims = tuple(_link(d, spec.name) if isinstance(d, str) else None for d in spec.shape)
        out.append(dims if any(d is not None for d in dims) else None)
    return tuple(out)


def _link(text: str, name: str) -> Link:
    link = parsed_dim(text)
    if link is None:
        raise ValueError(f"dynamic dim {text!r} of input {name} is not one symbol's multiple plus a constant")
    return link


@functools.lru_cache(maxsize=1024)
def parsed_dim(text: str) -> Link | None:
    """``text`` (torch's printing of a dim: ``s39``, ``2*s39 + 1``) as a :data:`Link`, or ``None``."""
    if _SYMBOL.fullmatch(text):
        return text, 1, 0
    expr = sympy.sympify(text)
    symbols = list(expr.free_symbols)
    if len(symbols) != 1:
        return None
    (symbol,) = symbols
    scale, offset = expr.coeff(symbol, 1), expr.subs(symbol, 0)
    if not (scale.is_Integer and offset.is_Integer and int(scale) > 0) or \
            sympy.expand(expr - scale * symbol - offset) != 0:
        return None
    return str(symbol), int(scale), int(offset)


_SYMBOL = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def carriers(links: Sequence) -> dict[tuple[int, int], Link]:
    """``(input index, axis) → link`` for every dynamic dim of ``links`` (:func:`linear_dims`)."""
    return {(i, axis): link for i, dims in enumerate(links) for axis, link in enumerate(dims or ()) if link is not None}


def check_links(links: Sequence, ranges: dict, names: Sequence[str], shapes: Sequence[Sequence[int]],
                what: str) -> None:
    """Refuse a call whose input ``shapes`` fit no value of some symbol (module docstring).

    Args:
        links: per input, :func:`linear_dims`' entry (``None`` or per dim ``None`` / a link).
        ranges: a symbol → ``(lowest, highest)`` values it takes (either ``None``) for the derived dims' symbols.
        names: the inputs' names in the artifact, for the message.
        shapes: the call's input shapes.
        what: the artifact, for the message ("the ONNX model").

    Raises:
        InputError: the input and dim that do not fit, and why.
    """
    seen: dict[str, tuple[int, str, int, Link]] = {}  # symbol → (value, input, dim, link) where first read
    for name, dims, shape in zip(names, links, shapes):
        for axis, (link, size) in enumerate(zip(dims or (), shape)):
            if link is None:
                continue
            symbol, scale, offset = link
            size = int(size)
            if (size - offset) % scale or size < offset:
                raise InputError(f"input '{name}' has size {size} at dim {axis}, where {what} takes sizes "
                                 f"{_shown(link)} for a dynamic dim d (as declared when converting)")
            value = (size - offset) // scale
            if symbol in seen and seen[symbol][0] != value:
                known, first, first_axis, first_link = seen[symbol]
                given = f"{_shown(first_link)} = {first_link[1] * known + first_link[2]} at dim {first_axis}"
                if first_link[1:] != (1, 0):
                    given += f" (d = {known})"
                raise InputError(f"input '{name}' has size {size} at dim {axis}, where {what} takes {_shown(link)} "
                                 f"for the dynamic dim d that input '{first}' gives {given}: give sizes of one d")
            seen.setdefault(symbol, (value, name, axis, link))
            lo, hi = ranges.get(symbol, (None, None))
            if (scale, offset) != (1, 0) and ((lo is not None and value < lo) or (hi is not None and value > hi)):
                raise InputError(f"input '{name}' has size {size} at dim {axis}, where {what} takes {_shown(link)} "
                                 f"for d from {lo if lo is not None else 0} to {hi if hi is not None else 'any'} (the "
                                 "range declared when converting): convert with a wider range")


def _shown(link: Link) -> str:
    """The dim as the messages write it, its symbol named ``d`` (torch's names, ``s39``, mean nothing to a user)."""
    _, scale, offset = link
    text = "d" if scale == 1 else f"{scale}*d"
    return text + (f" + {offset}" if offset > 0 else f" - {-offset}" if offset < 0 else "")
