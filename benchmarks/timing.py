"""Paired timing shared by the benchmark scripts (no ``tpu_runtime`` import: :mod:`benchmarks.plain_floor` runs
where it must not be imported)."""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Any, Callable, ContextManager


def alternating(a: Callable[[], Any], b: Callable[[], Any], rounds: int, block: int,
                around: Callable[[Callable[[], Any]], ContextManager] | None = None) -> tuple[float, float, float]:
    """Median over rounds of time(a)/time(b), alternating A B / B A blocks of ``block`` calls; plus the median
    seconds per call of each. ``around(fn)``, when given, is a context each of ``fn``'s timed blocks runs in (its
    entry and exit are timed with the block)."""
    ratios, ta, tb = [], [], []
    for r in range(rounds):
        times = {}
        for fn in ((a, b) if r % 2 == 0 else (b, a)):
            start = time.perf_counter()
            with around(fn) if around is not None else contextlib.nullcontext():
                for _ in range(block):
                    fn()
            times[fn] = (time.perf_counter() - start) / block
        ratios.append(times[a] / times[b])
        ta.append(times[a])
        tb.append(times[b])
    return statistics.median(ratios), statistics.median(ta), statistics.median(tb)


__all__ = ["alternating"]
