"""Packed outputs of fused graphs: many small outputs of one dtype come back as one flat array.

Calling a jitted executable costs JAX and PJRT about a microsecond or two per input and per output (argument
signatures, buffer holds, an output array object each), whatever their size: an AdamW step over minGPT's 28
parameters returns 84 small arrays and reads 119. So a fused graph returns each dtype's small outputs (at most
:data:`PACK_MAX` elements, not 0-d, when there are at least :data:`PACK_MIN` of them) concatenated into one flat
array, and each of their :class:`~tpu_runtime.eager.lazy.LazyRef` keeps ``(flat array, offset)`` instead of a
value. A later graph that reads such a value takes the flat array as one leaf (shared by all the values cut from
it) and cuts the value inside (a *slice leaf*); anything else that needs the array itself (strict eager, ``.cpu()``,
a compiled function's input) cuts it out once with :func:`unpack`, and the values one strict op or compiled call reads
together with :func:`unpack_many` (one call per packed array). Measured on ``benchmarks/bench_eager.py``'s
minGPT step (this project's 2-core CPU, paired runs): the two executable calls of a step took 143 + 196 µs with
every output returned alone, 110 + 81 µs packed.

A packed output is not written into the buffer of the leaf it replaced (no donation: see
:func:`~tpu_runtime.eager.fused._donation`); large outputs, whose fresh buffers cost more than the call, are
returned alone and donated as before.
"""

from __future__ import annotations

from typing import Any

import jax
import numpy as np

from tpu_runtime._x64 import restore, swap_on
from tpu_runtime.cache import CACHE

#: The ref of a graph's first slice leaf; the ``k``-th is ``SLICE - k`` (below every leaf's ``~position``).
SLICE = -(1 << 40)

#: Outputs of at most this many elements are packed ...
PACK_MAX = 1 << 16
#: ... when a graph has at least this many of one dtype.
PACK_MIN = 4


def small(shape: tuple) -> bool:
    """An output of this shape may be packed: 1 to :data:`PACK_MAX` elements, not 0-d."""
    return bool(shape) and 0 < numel(shape) <= PACK_MAX


def numel(shape: tuple) -> int:
    """The number of elements of ``shape``."""
    n = 1
    for d in shape:
        n *= d
    return n


def packed_dtypes(specs: list) -> set:
    """The dtypes of which the outputs ``specs`` (``(shape, dtype)`` each) have enough small ones to pack."""
    count: dict = {}
    for shape, dtype in specs:
        if small(shape):
            count[dtype] = count.get(dtype, 0) + 1
    return {dtype for dtype, n in count.items() if n >= PACK_MIN}


def plan_packing(specs: list, donated: int) -> tuple:
    """How a graph returns its outputs (``specs``: their shapes and dtypes in the order it makes them; the first
    ``donated`` are written into donated leaves and returned alone).

    Returns ``(kept, groups, slots)``: the positions of the outputs returned one by one, then one tuple of positions
    per packed array (returned after them), and for each position where its value is: an index into the
    results, or ``(index of its packed array, offset)``."""
    packed = packed_dtypes(specs[donated:])
    by_dtype: dict = {}
    for i, (shape, dtype) in enumerate(specs):
        if i >= donated and dtype in packed and small(shape):
            by_dtype.setdefault(dtype, []).append(i)
    groups = tuple(tuple(g) for g in by_dtype.values())
    in_group = {i for g in groups for i in g}
    kept = tuple(i for i in range(len(specs)) if i not in in_group)
    slots: list = [None] * len(specs)
    for j, i in enumerate(kept):
        slots[i] = j
    for g, members in enumerate(groups):
        offset = 0
        for i in members:
            slots[i] = (len(kept) + g, offset)
            offset += numel(specs[i][0])
    return kept, groups, tuple(slots)


def cut(flat: Any, offset: int, shape: tuple) -> Any:
    """The value of ``shape`` at ``offset`` of the packed array ``flat`` (traced inside a graph, or eager)."""
    return jax.lax.slice(flat, (offset,), (offset + numel(shape),)).reshape(shape)


def slice_cuts(leaves: Any, slices: list) -> list:
    """The values of a graph's slice leaves (``slices``: ``(leaf ref of the packed array, offset, shape)`` each), cut
    from its ``leaves`` (traced inside the graph, or eager in its op-by-op rerun)."""
    return [cut(leaves[~f], offset, shape) for f, offset, shape in slices]


def leaf_value(r: int, leaves: Any, cuts: list) -> Any:
    """The value of the negative ref ``r``: a leaf (``~position``) or a slice leaf (:data:`SLICE` ``- k``)."""
    return leaves[~r] if r > SLICE else cuts[SLICE - r]


def unpack(v: Any) -> Any:
    """The array of the packed :class:`~tpu_runtime.eager.lazy.LazyRef` ``v``, cut from its packed array and kept as
    ``v.concrete``: one executable per packed array's shape and value's shape (the offset is an argument), from the
    compile cache."""
    flat, offset = v.packed
    shape, n = v.shape, numel(v.shape)
    out = _cached(("unpack", flat.shape, flat.dtype, shape),
                  lambda f, o: (jax.lax.dynamic_slice(f, (o,), (n,)).reshape(shape),), (flat, np.int32(offset)),
                  lambda: f"a packed value of shape {list(shape)}")[0]
    v.concrete, v.packed = out, None
    return out


def unpack_many(refs: list) -> None:
    """:func:`unpack` each of the packed :class:`~tpu_runtime.eager.lazy.LazyRef` ``refs``, those cut from one packed
    array in one call (a compiled model reading the parameters a fused-eager optimizer step returned packed: one call
    per step instead of one per parameter). One executable per packed array's shape and the offsets and shapes cut."""
    groups: dict = {}
    for v in refs:
        if v.packed is not None:
            groups.setdefault(id(v.packed[0]), {})[id(v)] = v  # (a value read twice is cut once)
    for group in groups.values():
        if len(group) == 1:
            unpack(next(iter(group.values())))
            continue
        values = list(group.values())
        flat = values[0].packed[0]
        spans = tuple([(v.packed[1], v.shape) for v in values])
        outs = _cached(("unpack", flat.shape, flat.dtype, spans), lambda f: tuple([cut(f, o, s) for o, s in spans]),
                       (flat,), lambda: f"{len(spans)} packed values")
        for v, out in zip(values, outs):
            v.concrete, v.packed = out, None


def _cached(key: tuple, fn: Any, args: tuple, describe: Any) -> tuple:
    """``fn(*args)`` through the compile cache's executable for ``key`` (compiled on a miss), with 64-bit types on
    as the runtime's executables are traced and run."""
    prev = swap_on()
    try:
        exe = CACHE.lookup(key)
        return CACHE.compile(key, fn, args, describe=describe) if exe is None else exe(*args)
    finally:
        restore(prev)


__all__ = ["PACK_MAX", "PACK_MIN", "SLICE", "cut", "leaf_value", "numel", "packed_dtypes", "plan_packing",
           "slice_cuts", "small", "unpack", "unpack_many"]
