"""Eager modes of the ``tpu`` device: ``strict`` (default), ``debug`` and ``fused``.

All three execute the same :class:`~tpu_runtime.plans.OpPlan` objects through the
same compile cache; they differ only in when and how a plan runs (see
:mod:`.strict`, :mod:`.debug`, :mod:`.fused`). The mode is process-wide (autograd
runs backward ops on its own thread, which must see the same mode), chosen by
``TPU_EAGER_MODE``, :func:`set_eager_mode` or ``with set_eager_mode(...):``.
"""

from __future__ import annotations

import os
from typing import Any

from tpu_runtime.eager.debug import REPORT, DebugExecutor, DebugOptions, DebugReport, NonFiniteError
from tpu_runtime.eager.fused import GRAPH, FusedExecutor
from tpu_runtime.eager.fused_stats import FusedReport, fused_report, reset_fused_report
from tpu_runtime.eager.strict import StrictExecutor

MODES = ("strict", "debug", "fused")


def _make(mode: str, options: dict) -> Any:
    if mode not in MODES:
        raise ValueError(f"unknown eager mode {mode!r}; choose one of {', '.join(MODES)}")
    if mode == "debug":
        return DebugExecutor(DebugOptions(**options))
    if options:
        raise ValueError(f"eager mode {mode!r} takes no options (got {sorted(options)})")
    return FusedExecutor() if mode == "fused" else StrictExecutor()


def default_mode() -> str:
    """The mode ``TPU_EAGER_MODE`` names (``strict`` when unset).

    Raises:
        ValueError: the variable names no mode.
    """
    mode = os.environ.get("TPU_EAGER_MODE", "").strip().lower() or "strict"
    if mode not in MODES:
        raise ValueError(f"TPU_EAGER_MODE={mode!r} is not an eager mode; choose one of {', '.join(MODES)}")
    return mode


_CURRENT: list[Any] = [_make(default_mode(), {})]


def executor() -> Any:
    """The executor of the current mode."""
    return _CURRENT[0]


def get_eager_mode() -> str:
    """The current mode's name."""
    return _CURRENT[0].name


class set_eager_mode:  # noqa: N801 (used as a function and as a context manager)
    """Switch the eager mode; usable as a call or as a ``with`` block that restores the old mode.

    Args:
        mode: ``"strict"``, ``"debug"`` or ``"fused"``.
        **options: debug mode only: ``check_nan`` (default True), ``compare_cpu``
            (default False), ``raise_on_error`` (default True), ``rtol``, ``atol``.

    Raises:
        ValueError: an unknown mode or option.

    Leaving fused mode runs the pending graph first.
    """

    def __init__(self, mode: str, **options: Any):
        new = _make(mode, options)
        self._previous = _CURRENT[0]
        _switch(new)

    def __enter__(self) -> "set_eager_mode":
        return self

    def __exit__(self, *exc: Any) -> None:
        _switch(self._previous)


def _switch(new: Any) -> None:
    if _CURRENT[0].name == "fused" and new is not _CURRENT[0]:
        GRAPH.flush("mode switch")
    _CURRENT[0] = new


def sync() -> None:
    """A sync point: run everything pending (fused graph) and wait for the device; an index found out of range
    since the last one raises (:mod:`tpu_runtime.bounds`)."""
    import jax

    from tpu_runtime.bounds import raise_pending

    GRAPH.flush("sync")
    jax.block_until_ready(jax.live_arrays())
    raise_pending()


def after_optimizer_step(optimizer: Any, args: Any, kwargs: Any) -> None:
    """torch.optim's global step post-hook: in fused eager the end of an optimizer step is a sync point that
    starts the step's graph without waiting for it, so it computes while Python records the next forward (as
    the end of ``loss.backward()`` starts the forward+backward graph). Measured, paired, fused eager with and
    without it (``benchmarks/bench_eager.py``'s training steps): minGPT 0.92x the time, ``mlp-wide`` 0.86x,
    ``mlp-large`` 0.83x, the tiny MLP unchanged. Nothing pending (another device's optimizer, strict eager):
    nothing to do."""
    if GRAPH.nodes and _CURRENT[0].name == "fused":
        GRAPH.flush("optimizer step")


__all__ = ["MODES", "default_mode", "executor", "get_eager_mode", "set_eager_mode", "sync", "after_optimizer_step",
           "REPORT", "DebugReport", "NonFiniteError", "FusedReport", "fused_report", "reset_fused_report"]
