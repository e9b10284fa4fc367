"""A converted model's results in the structure the model returns them.

Every target's program returns its tensor outputs as one flat list, in the order of the leaves of the model's
output tree (``torch.export``'s ``out_spec``); the constants it returns with no tensor form (``None``, a string:
:func:`~converter.lowering.interpreter.fixed_outputs`) are no outputs of the program. :class:`CallOutputs` puts them
back together: ``{"logits": …, "hidden": (…, …)}`` comes back as that dict of a tuple, ``return y, None`` as
``(y, None)``, a ``(y,)`` as a one-element tuple, as PyTorch returns them.

A freshly converted artifact rebuilds the model's own types (a namedtuple, transformers' ``ModelOutput``, a
``DynamicCache``) with torch's pytree. A saved file keeps a JSON form of the structure (tuples, lists, dicts, the
constants), which a reloaded artifact rebuilds without PyTorch: a namedtuple comes back as a tuple, a ``ModelOutput``
or another mapping-like node as a dict of its keys; a structure with another node type (a ``DynamicCache``) is not
saved, and the reloaded file returns its outputs flat, as it did before the structure was kept.
"""

from __future__ import annotations

import collections
from typing import Any, Sequence

from converter.errors import InputError

#: JSON form of a tensor output's place in the structure.
_SLOT = 0
#: Python types a saved structure's constants and dict keys may be (what JSON keeps as they are).
_PLAIN = (str, int, float, bool, type(None))


class CallOutputs:
    """How ``n_outputs`` flat program outputs make the model's result.

    Args:
        n_outputs: the program's tensor outputs.
        structure: the JSON form (see the module docstring), or ``None``: one output as is, several as a tuple.
        spec: ``torch.export``'s output ``TreeSpec`` and ``fixed``: ``{leaf index: constant}`` (a converted
            program's own; not saved).
    """

    def __init__(self, n_outputs: int, structure: Any = None, spec: Any = None, fixed: dict | None = None):
        self.n_outputs = n_outputs
        self.structure = structure
        self._spec = spec
        self._fixed = dict(fixed or {})

    @classmethod
    def of(cls, exported: Any, n_outputs: int) -> "CallOutputs":
        """The result structure of ``exported`` (a ``torch.export.ExportedProgram``, or ``None``: flat) whose
        program returns ``n_outputs`` tensors; flat when the two do not agree."""
        if exported is None:
            return cls(n_outputs)
        from converter.lowering.interpreter import fixed_outputs

        spec, fixed = exported.call_spec.out_spec, fixed_outputs(exported)
        if spec is None or spec.num_leaves != n_outputs + len(fixed):
            return cls(n_outputs)
        return cls(n_outputs, _encode(spec, iter(range(spec.num_leaves)), fixed), spec, fixed)

    @property
    def worth_saving(self) -> bool:
        """Whether a saved file needs it: a structure other than one output or a flat tuple of several."""
        s = self.structure
        if s is None or s == _SLOT:
            return False
        return not (isinstance(s, dict) and list(s) == ["tuple"] and self.n_outputs > 1
                    and all(c == _SLOT for c in s["tuple"]))

    def to_json(self) -> Any:
        """What a saved artifact keeps (:meth:`from_json`): the structure's JSON form, or ``None``."""
        return self.structure

    @classmethod
    def from_json(cls, data: Any, n_outputs: int) -> "CallOutputs":
        """A :meth:`to_json` value read back (``None``: a file saved without it, or whose structure has a node
        type JSON does not keep; its outputs come back flat).

        A structure of another number of outputs than the file's is not used (flat outputs).

        Raises:
            InputError: a damaged entry.
        """
        if data is None:
            return cls(n_outputs)
        try:
            slots = _count(data)
        except (TypeError, ValueError, KeyError, AttributeError) as e:
            raise InputError(f"the artifact's saved output structure is damaged ({type(e).__name__}: {e})") from e
        return cls(n_outputs, data if slots == n_outputs else None)

    def describe(self, names: Sequence[str]) -> list[str]:
        """A line for ``tpu-export inspect``: the result's structure with the file's outputs ``names`` in place
        (``returns: {'logits': output_0, 'hidden': (output_1, output_2)}``); none for one output or a flat tuple."""
        if not self.worth_saving or len(names) != self.n_outputs:
            return []
        return [f"returns: {_render(self.structure, iter(names))}"]

    def build(self, outs: Sequence[Any], live: bool = True) -> Any:
        """The model's result from its flat ``outs``: with ``live`` and the program's own tree, in the model's
        types (torch's pytree); else from the JSON form (tuples, lists, dicts); without either, one output as is
        and several as a tuple."""
        outs = list(outs)
        if len(outs) != self.n_outputs:  # (not this program's outputs: as they are)
            return outs[0] if len(outs) == 1 else tuple(outs)
        if live and self._spec is not None:
            import torch

            for i in sorted(self._fixed):
                outs.insert(i, self._fixed[i])
            return torch.utils._pytree.tree_unflatten(outs, self._spec)
        if self.structure is None:
            return outs[0] if len(outs) == 1 else tuple(outs)
        return _decode(self.structure, iter(outs))


def _render(data: Any, names: Any) -> str:
    """The JSON form ``data`` written as Python, its tensor outputs by ``names`` (an iterator)."""
    if data == _SLOT and not isinstance(data, bool):
        return next(names)
    (kind, body), = data.items()
    if kind == "fixed":
        return repr(body)
    if kind == "dict":
        return "{" + ", ".join(f"{k!r}: {_render(c, names)}" for k, c in body) + "}"
    inner = [_render(c, names) for c in body]
    if kind == "list":
        return "[" + ", ".join(inner) + "]"
    return "(" + ", ".join(inner) + ("," if len(inner) == 1 else "") + ")"


def _encode(spec: Any, leaves: Any, fixed: dict) -> Any:
    """The JSON form of the output tree ``spec`` (``leaves``: its leaf indices, in order), or ``None`` where a node
    has no JSON form (the rest of the tree still consumes its leaves)."""
    if spec.is_leaf():
        i = next(leaves)
        if i not in fixed:
            return _SLOT
        value = fixed[i]
        return {"fixed": value} if isinstance(value, _PLAIN) else None
    children = [_encode(child, leaves, fixed) for child in spec.children()]
    if any(c is None for c in children):
        return None
    kind, keys = spec.type, spec.context
    if kind is list:
        return {"list": children}
    if kind is tuple or kind is collections.namedtuple or (isinstance(kind, type) and issubclass(kind, tuple)):
        return {"tuple": children}  # (a namedtuple: a tuple)
    if isinstance(keys, (list, tuple)) and len(keys) == len(children) and all(isinstance(k, _PLAIN) for k in keys):
        return {"dict": [[k, c] for k, c in zip(keys, children)]}  # (a dict, OrderedDict, ModelOutput)
    return None


def _count(data: Any) -> int:
    """How many tensor outputs the JSON form ``data`` holds (raises on anything else)."""
    if data == _SLOT and not isinstance(data, bool):
        return 1
    (kind, body), = data.items()
    if kind == "fixed":
        return 0
    if kind in ("tuple", "list"):
        return sum(_count(c) for c in body)
    if kind == "dict":
        return sum(_count(c) for _, c in body)
    raise ValueError(f"unknown node {kind!r}")


def _decode(data: Any, outs: Any) -> Any:
    if data == _SLOT and not isinstance(data, bool):
        return next(outs)
    (kind, body), = data.items()
    if kind == "fixed":
        return body
    if kind == "tuple":
        return tuple(_decode(c, outs) for c in body)
    if kind == "list":
        return [_decode(c, outs) for c in body]
    return {k: _decode(c, outs) for k, c in body}


__all__ = ["CallOutputs"]
