"""Strict eager (the default): every op runs at once as its own cached jitted executable.

The executable is keyed by the op's plan key (op overload, input shapes/dtypes,
static arguments) in the shared compile cache, so a repeated call signature costs
one dictionary lookup and one XLA dispatch. Execution is asynchronous, as JAX's
is: the host returns before the device finishes, and a sync point waits.
"""

from __future__ import annotations

from typing import Any

from tpu_runtime.cache import CACHE
from tpu_runtime.eager.fused import LazyRef, concrete


def run_now(plan: Any, values: list) -> tuple:
    """Run one plan's cached executable on concrete ``values`` (compiling it on a miss)."""
    for i, v in enumerate(values):
        if type(v) is LazyRef:
            values[i] = concrete(v)
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


class StrictExecutor:
    """Runs each op immediately."""

    name = "strict"
    #: Dynamic python floats reach :attr:`run` as device scalars (``execute._scalar``).
    raw_floats = False

    #: ``run(plan, values)``: run ``plan`` on ``values`` now; returns JAX arrays (one call
    #: less per op than a method wrapping :func:`run_now`).
    run = staticmethod(run_now)

    def sync(self) -> None:
        """Nothing is pending in strict mode (device work is waited for by callers)."""
