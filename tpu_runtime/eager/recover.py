"""The op-by-op rerun of a fused graph that failed to compile or run (out of memory, say)."""

from __future__ import annotations

from tpu_runtime.eager.packing import leaf_value, slice_cuts


def recover(nodes: list, leaves: list, slices: list, live: list, error: Exception) -> bool:
    """After the graph failed to compile or run (``error``: out of memory, say), run its nodes one by one, as strict
    eager would have: each pending value that does not depend on a failing op gets its value, the others that
    op's error (raised when they are read), so one failing op does not lose the unrelated values pending with it
    (an optimizer's updates, when a too-large batch runs out of memory). Returns whether every live value
    was resolved (nothing to raise at this sync)."""
    from tpu_runtime.eager.fused import _ARRAY, _OUTPUT, _SHIFT  # (at call time: fused imports this module)
    from tpu_runtime.eager.strict import run_now

    env: list = []
    cuts = slice_cuts(leaves, slices)
    for plan, refs in nodes:
        ins = [leaf_value(r, leaves, cuts) if r < 0 else env[r >> _SHIFT] for r in refs]
        bad = next((x for x in ins if isinstance(x, BaseException)), None)
        if bad is None:
            ins = [x[r & _OUTPUT] if r >= 0 else x for x, r in zip(ins, refs)]
            bad = error if any(type(x) is _ARRAY and x.is_deleted() for x in ins) else None  # (donated to it)
        if bad is None:
            try:
                outs = run_now(plan, list(ins))
            except Exception as e:  # this op's own error
                bad = e
        env.append(bad if bad is not None else outs)
    for r in live:
        got = env[r.ref >> _SHIFT]
        if isinstance(got, BaseException):
            r.error = got
        else:
            r.concrete = got[r.ref & _OUTPUT]
    return all(r.error is None for r in live)


__all__ = ["recover"]
