"""Pending values of fused eager: a :class:`LazyRef` stands for an output of a recorded graph until the graph runs
(:mod:`tpu_runtime.eager.fused`); :func:`concrete` gives its value."""

from __future__ import annotations

from typing import Any

from tpu_runtime.cache import CacheMissError
from tpu_runtime.eager.packing import unpack, unpack_many


class LazyRef:
    """A pending output of a fused graph (``graph``: its :class:`~tpu_runtime.eager.fused.FusedGraph`; ``ref``: its
    ref there, see :data:`~tpu_runtime.eager.fused._SHIFT`; ``concrete`` is set once it has run, or, for an output
    returned packed, ``packed``: ``(packed array, offset)``, with ``graph`` ``None``: see
    :mod:`tpu_runtime.eager.packing`)."""

    __slots__ = ("graph", "ref", "shape", "dtype", "concrete", "error", "packed", "__weakref__")

    def __init__(self, graph: Any, ref: int, spec: tuple):
        self.graph, self.ref = graph, ref
        self.shape, self.dtype = spec
        self.concrete = None
        self.error = None
        self.packed = None


def concrete(v: Any, cause: str = "value read") -> Any:
    """``v`` itself, or for a :class:`LazyRef` its value (running the graph first if needed, for ``cause``: see
    :meth:`~tpu_runtime.eager.fused.FusedGraph.flush`)."""
    if type(v) is not LazyRef:
        return v
    if v.concrete is None:
        run(v, cause)
        if v.packed is not None:  # (a packed output: see tpu_runtime.eager.packing)
            return unpack(v)
        if v.error is not None:
            raise RuntimeError(f"a value of the fused graph was lost because the graph failed: "
                               f"{str(v.error) or type(v.error).__name__}") from v.error
    return v.concrete


def run(v: LazyRef, cause: str = "value read") -> None:
    """Run the graph of the pending value ``v`` unless it has run (``cause``: see
    :meth:`~tpu_runtime.eager.fused.FusedGraph.flush`); a value returned packed stays packed."""
    if v.concrete is None and v.error is None and v.packed is None:
        try:
            v.graph.flush(cause)
        except CacheMissError:
            raise  # (the graph ran, every value has its own: raised where cache_only() asked)
        except Exception:
            if v.concrete is None and v.packed is None:
                raise  # (else another value of the graph failed: it raises when read)


def concrete_all(values: list, cause: str = "value read") -> list:
    """``values`` (a list, changed in place and returned) with each :class:`LazyRef` replaced by its value: each graph
    run once, the values returned packed cut out together, one call per packed array
    (:func:`~tpu_runtime.eager.packing.unpack_many`)."""
    pending = [v for v in values if type(v) is LazyRef and v.concrete is None]
    for v in pending:
        run(v, cause)  # (the first of a graph runs it; the others find it run)
    unpack_many(pending)
    for i, v in enumerate(values):
        if type(v) is LazyRef:
            values[i] = concrete(v, cause)
    return values


__all__ = ["LazyRef", "concrete", "concrete_all", "run"]
