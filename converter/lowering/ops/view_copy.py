"""The ``*_copy`` twins of view ops (``torch.Tag.view_copy``: ``view_copy``, ``permute_copy``,
``as_strided_copy``, ``unbind_copy``…): each is lowered as its view op.

A JAX value is never aliased, so the view op's lowering already returns a copy. The rows
are made here from the table itself (this module is imported after every other family):
for every tagged op whose view twin (the name without ``_copy``, the same overload) has a
row, the same lowering, behind a function whose docstring is the copy op's own schema.
Functionalized graphs (``torch.compile``'s AOTAutograd, ``torch.view_copy`` in user code)
carry these ops, which had no row before.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from jax import lax

from converter.lowering.registry import _TABLE, Lowering, aten_overloads, lowering

aten = torch.ops.aten


def _view_twin(op: Any) -> Any:
    """The view op ``op`` copies (``permute_copy.default`` → ``permute.default``), or ``None``."""
    name = op._schema.name.split("::", 1)[1]
    if not name.endswith("_copy"):
        return None
    packet = getattr(aten, name[: -len("_copy")], None)
    return getattr(packet, op._overloadname, None) if packet is not None else None


def _row(op: Any, view: Lowering) -> Callable:
    def lower(ctx: Any, *args: Any, **kwargs: Any) -> Any:
        return view.fn(ctx, *args, **kwargs)

    schema = str(op._schema).split("::", 1)[1]
    lower.__name__ = "lower_" + str(op).replace("aten.", "").replace(".", "_")
    lower.__qualname__ = lower.__name__
    lower.__doc__ = f"{schema}\n\n    As ``{view.op}`` (its lowering returns a new JAX value, i.e. a copy)."
    return lower


def _register() -> list:
    """Register a row for each view-copy op whose view twin has one; returns the new ops."""
    added = []
    for op in aten_overloads():
        if torch.Tag.view_copy not in op.tags or op in _TABLE or any(a.is_out for a in op._schema.arguments):
            continue
        twin = _view_twin(op)
        view = _TABLE.get(twin) if twin is not None else None
        if view is not None:
            lowering(op, composite=view.composite)(_row(op, view))
            added.append(op)
    return added


# The twins of view ops that the table leaves to torch's decompositions (no row to reuse).


@lowering(aten.t_copy.default)
def lower_t_copy_default(ctx, self):
    """t_copy(Tensor self) -> Tensor

    Swaps the two dims of a 2-D tensor; a 0-D or 1-D tensor is returned as is.
    """
    return self.T if self.ndim == 2 else self


@lowering(aten.detach_copy.default)
def lower_detach_copy_default(ctx, self):
    """detach_copy(Tensor self) -> Tensor

    The value itself (a JAX value carries no autograd history).
    """
    return self


@lowering(aten.squeeze_copy.default)
def lower_squeeze_copy_default(ctx, self):
    """squeeze_copy(Tensor self) -> Tensor

    A ``reshape`` dropping every size-1 dim.
    """
    return self.reshape(tuple(s for s in self.shape if s != 1))


@lowering(aten.unbind_copy.int)
def lower_unbind_copy_int(ctx, self, dim=0):
    """unbind_copy.int(Tensor self, int dim=0) -> Tensor[]

    One slice per index of ``dim`` (negative counts from the end), with that dim removed.
    """
    d = dim % self.ndim
    return [lax.index_in_dim(self, i, axis=d, keepdims=False) for i in range(self.shape[d])]


REGISTERED = _register()
