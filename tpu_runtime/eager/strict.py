"""Strict eager (the default): every op runs at once as its own cached jitted executable.

The executable is keyed by the op's plan key (op overload, input shapes/dtypes,
static arguments) in the shared compile cache, so a repeated call signature costs
one dictionary lookup and one XLA dispatch. Execution is asynchronous, as JAX's
is: the host returns before the device finishes, and a sync point waits.
"""

from __future__ import annotations

import math
import sys
from typing import Any

from tpu_runtime.cache import CACHE, donation_order
from tpu_runtime.eager.fused import _ARRAY
from tpu_runtime.eager.lazy import LazyRef, concrete_all


def run_now(plan: Any, values: list) -> tuple:
    """Run one plan's cached executable on concrete ``values`` (compiling it on a miss)."""
    for v in values:
        if type(v) is LazyRef:  # (a value of a fused graph: its value, see tpu_runtime.eager.lazy)
            concrete_all(values)
            break
    exe = plan.exe
    if exe is not None:  # the plan remembers its executable: no second hash of its key
        CACHE.stats.requests += 1
        CACHE.stats.hits += 1
        return exe(*values)
    exe = CACHE.lookup(plan.key)
    if exe is None:
        out = CACHE.compile(plan.key, plan.fn, tuple(values), describe=lambda: plan.name)
        plan.exe = CACHE.lookup_quiet(plan.key)
        return out
    plan.exe = exe
    return exe(*values)


_refcount = sys.getrefcount
#: Reference count of an array held by one storage and the executor's input list, as
#: :func:`run_into` sees it (those two, its local variable, ``getrefcount``'s argument).
_STORED_ONLY = 4


#: Smaller arrays are not donated: measured on the CPU, donating a few bytes costs more per call
#: than the fresh buffer it saves, where a fresh buffer of megabytes costs more than the pass that
#: fills it (page faults).
MIN_DONATED_BYTES = 1 << 16


def run_into(plan: Any, values: list, dsts: Any) -> tuple:
    """:func:`run_now` for an in-place op whose ``i``-th output is about to replace the value of base
    tensor ``dsts[i]`` (``None``: an output written nowhere): a destination's current array of at
    least :data:`MIN_DONATED_BYTES` that nothing else holds is donated, so XLA writes the output into
    its buffer (the caller writes the results back right after)."""
    for v in values:
        if type(v) is LazyRef:  # (a value a fused graph returned packed: cut out, see tpu_runtime.eager.packing)
            concrete_all(values)
            break
    pairs = []
    for i, dst in enumerate(dsts):
        if dst is None:
            continue
        spec = dst._spec
        if dst._chain or i >= len(plan.out_specs) or plan.out_specs[i] != spec \
                or math.prod(spec[0]) * spec[1].itemsize < MIN_DONATED_BYTES:
            continue
        v = dst._storage.value
        if type(v) is not _ARRAY or _refcount(v) != _STORED_ONLY:
            continue
        pos = next((k for k, x in enumerate(values) if x is v), None)
        del v
        if pos is not None:
            pairs.append((pos, i))
    if not pairs:
        return run_now(plan, values)
    # the donating executable returns its outputs in the order JAX pairs them with the donated inputs
    donate, order = donation_order(pairs, list(range(len(plan.out_specs))))
    order = tuple(order)
    entry = plan.extra.get(("exe", donate, order))
    if entry is None:
        key = plan.key + (("donate", donate, order),)
        exe = CACHE.lookup(key)
        inverse = tuple(sorted(range(len(order)), key=order.__getitem__))
        if exe is None:
            fn = plan.fn
            out = CACHE.compile(key, lambda *a: _reordered(fn(*a), order), tuple(values),
                                describe=lambda: plan.name, donate=donate)
            plan.extra["exe", donate, order] = (CACHE.lookup_quiet(key), inverse)
            return _reordered(out, inverse)
        entry = plan.extra["exe", donate, order] = (exe, inverse)
    else:
        CACHE.stats.requests += 1
        CACHE.stats.hits += 1
    exe, inverse = entry
    return _reordered(exe(*values), inverse)


def _reordered(outs: Any, order: tuple) -> tuple:
    return tuple([outs[i] for i in order])


class StrictExecutor:
    """Runs each op immediately."""

    name = "strict"
    #: Dynamic python floats reach :attr:`run` as device scalars (``execute._scalar``).
    raw_floats = False

    #: ``run(plan, values)``: run ``plan`` on ``values`` now; returns JAX arrays (one call
    #: less per op than a method wrapping :func:`run_now`).
    run = staticmethod(run_now)
    run_into = staticmethod(run_into)

    def sync(self, cause: str = "sync") -> None:
        """Nothing is pending in strict mode (device work is waited for by callers)."""
