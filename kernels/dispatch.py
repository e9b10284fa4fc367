"""Which implementation runs a kernel here: compiled Pallas, interpreted Pallas, or the reference.

Policy (:func:`choose`):

* TPU → Pallas compiled by Mosaic; GPU → Pallas compiled by Triton (selected
  with ``pltriton.CompilerParams``: jax 0.10.2 would otherwise pick Mosaic GPU).
* CPU → the plain-jnp reference (XLA); Pallas has no CPU compiler.
* ``force="pallas"`` → Pallas everywhere, interpreted on CPU; a configuration
  the kernel cannot take raises :class:`UnsupportedKernelError` instead of
  quietly running something else.
* ``force="reference"`` → the reference.
* A configuration the kernel cannot take (dropout, head dim, dtype …) → the
  reference, with the reason.

Every decision is counted in a process-wide record (:func:`choices`,
:func:`format_choices`) and logged at INFO the first time it is made, so a
caller can always show which kernels ran where and why. Decisions happen at
trace time: under ``jax.jit`` a count is one trace, not one execution.
"""

from __future__ import annotations

import collections
import contextlib
import contextvars
import dataclasses
import inspect
import logging
import threading
from typing import Callable

from kernels._common import backend
from kernels.flash_attention import kernel as _fa
from kernels.flash_attention.reference import flash_attention_reference
from kernels.int8_matmul import kernel as _i8
from kernels.int8_matmul.reference import int8_matmul_reference
from kernels.layer_norm import kernel as _ln
from kernels.layer_norm.reference import layer_norm_reference
from kernels.paged_attention import kernel as _pa
from kernels.paged_attention.reference import paged_attention_reference
from kernels.rms_norm import kernel as _rms
from kernels.rms_norm.reference import rms_norm_reference

__all__ = ["Choice", "KernelEntry", "UnsupportedKernelError", "backend", "choices", "choose", "fallback",
           "format_choices", "kernel_names", "portable", "reset_choices", "run"]

_log = logging.getLogger(__name__)

#: The Pallas lowering each accelerator family compiles with.
LOWERING = {"tpu": "Mosaic TPU", "gpu": "Triton"}


class UnsupportedKernelError(ValueError):
    """``force="pallas"`` for a configuration the Pallas kernel does not implement."""


@dataclasses.dataclass(frozen=True)
class Choice:
    """One dispatch decision.

    Attributes:
        impl: "pallas" or "reference".
        interpret: run the Pallas kernel in interpret mode (only with "pallas").
        reason: why, in one line.
    """

    impl: str
    interpret: bool
    reason: str


@dataclasses.dataclass(frozen=True)
class KernelEntry:
    """A kernel known to dispatch.

    Attributes:
        name: public name, e.g. "flash_attention".
        pallas: the Pallas entry point (takes ``interpret=``).
        reference: the plain-jnp reference with the same math.
        unsupported: ``(backend=..., **config) -> reason | None``.
        config_of: ``(*args, **kwargs) -> config`` used by :func:`run`.
    """

    name: str
    pallas: Callable
    reference: Callable
    unsupported: Callable[..., str | None]
    config_of: Callable[..., dict]


def _flash_config(q, k, v, **kwargs) -> dict:
    del k, v
    return {"head_dim": q.shape[-1], "dtype": q.dtype, "dropout_p": kwargs.get("dropout_p", 0.0)}


def _norm_config(x, *args, **kwargs) -> dict:
    del args, kwargs
    return {"hidden": x.shape[-1], "dtype": x.dtype}


def _int8_config(x, w_int8, scales, **kwargs) -> dict:
    del scales, kwargs
    return {"dtype": x.dtype, "weight_dtype": w_int8.dtype}


def _paged_config(q, k_pages, *args, **kwargs) -> dict:
    del args, kwargs
    return {"head_dim": q.shape[-1], "page_size": k_pages.shape[2], "dtype": q.dtype}


_ENTRIES = (
    KernelEntry("flash_attention", _fa.flash_attention, flash_attention_reference,
                _fa.unsupported_reason, _flash_config),
    KernelEntry("rms_norm", _rms.rms_norm, rms_norm_reference, _rms.unsupported_reason,
                _norm_config),
    KernelEntry("layer_norm", _ln.layer_norm, layer_norm_reference, _ln.unsupported_reason,
                _norm_config),
    KernelEntry("int8_matmul", _i8.int8_matmul, int8_matmul_reference, _i8.unsupported_reason,
                _int8_config),
    KernelEntry("paged_attention", _pa.paged_attention, paged_attention_reference,
                _pa.unsupported_reason, _paged_config),
)
_BY_NAME = {e.name: e for e in _ENTRIES}
_BY_FUNCTION = {e.pallas: e for e in _ENTRIES}

_lock = threading.Lock()
_counts: collections.Counter = collections.Counter()
#: Set while an exporter traces for a portable artifact (see :func:`portable`).
_portable: contextvars.ContextVar[str | None] = contextvars.ContextVar("kernels_portable", default=None)


@contextlib.contextmanager
def portable(why: str):
    """Within this block the policy picks the reference on every backend.

    Exporters trace under it: a LiteRT flatbuffer or a StableHLO artifact must not
    embed a Mosaic/Triton custom call of the machine that exported it. An explicit
    ``force="pallas"`` still wins (and is the user's choice to make).

    Args:
        why: the reason recorded with each decision, e.g. "litert export".
    """
    token = _portable.set(why)
    try:
        yield
    finally:
        _portable.reset(token)


def kernel_names() -> tuple[str, ...]:
    """Names :func:`choose` accepts."""
    return tuple(_BY_NAME)


def _entry(kernel) -> KernelEntry:
    entry = _BY_NAME.get(kernel) if isinstance(kernel, str) else _BY_FUNCTION.get(kernel)
    if entry is None:
        raise KeyError(f"no kernel {kernel!r} in dispatch; known: {', '.join(_BY_NAME)}. "
                       f"To add one, append a KernelEntry to kernels.dispatch._ENTRIES.")
    return entry


def choose(kernel_name, *, force: str | None = None, **config) -> Choice:
    """Decides how ``kernel_name`` runs on this backend and records the decision.

    Args:
        kernel_name: a name from :func:`kernel_names` (or the Pallas function).
        force: None (policy), "pallas" or "reference".
        **config: what the kernel's support check looks at, e.g.
            ``head_dim=128, dtype=jnp.bfloat16, dropout_p=0.0`` for
            flash_attention; unknown keys raise TypeError.

    Returns:
        The :class:`Choice`.

    Raises:
        KeyError: unknown kernel.
        ValueError: ``force`` is not None, "pallas" or "reference".
        UnsupportedKernelError: ``force="pallas"`` for an unsupported config.
    """
    entry = _entry(kernel_name)
    if force not in (None, "pallas", "reference"):
        raise ValueError(f"force={force!r}; expected None, 'pallas' or 'reference'")
    family = backend()
    if force == "reference":
        choice = Choice("reference", False, "forced reference")
    else:
        why = entry.unsupported(backend=family, **config)
        if why is not None and force == "pallas":
            raise UnsupportedKernelError(f"{entry.name}: force='pallas' but {why}")
        if why is not None:
            choice = Choice("reference", False, f"unsupported config: {why}")
        elif force is None and _portable.get() is not None:
            choice = Choice("reference", False, f"{_portable.get()}: portable reference")
        elif force == "pallas":
            where = "interpret mode on cpu" if family == "cpu" else LOWERING[family]
            choice = Choice("pallas", family == "cpu", f"forced pallas ({where})")
        elif family == "cpu":
            choice = Choice("reference", False, "cpu backend: Pallas would only run interpreted")
        else:
            choice = Choice("pallas", False, f"{family} backend: compiled with {LOWERING[family]}")
    _record(entry.name, choice)
    return choice


def fallback(kernel_name, reason: str, *, force: str | None = None) -> Choice:
    """Records that a call site takes the reference for a reason of its own.

    For configurations a caller recognises before any kernel check applies (e.g. a
    dynamic normalized dim, a non-4-D attention input), so the decision is still
    visible in :func:`choices`.

    Raises:
        UnsupportedKernelError: ``force="pallas"`` (the caller cannot honour it).
    """
    entry = _entry(kernel_name)
    if force == "pallas":
        raise UnsupportedKernelError(f"{entry.name}: force='pallas' but {reason}")
    choice = Choice("reference", False, reason)
    _record(entry.name, choice)
    return choice


def _record(name: str, choice: Choice) -> None:
    key = (name, choice.impl + (" (interpret)" if choice.interpret else ""), choice.reason)
    with _lock:
        first = key not in _counts
        _counts[key] += 1
    if first:
        _log.info("kernels.dispatch: %s -> %s (%s)", *key)


def choices() -> dict[tuple[str, str, str], int]:
    """Counts of decisions so far, keyed by (kernel, impl, reason).

    ``impl`` is "pallas", "pallas (interpret)" or "reference".
    """
    with _lock:
        return dict(_counts)


def reset_choices() -> None:
    """Forgets all recorded decisions (tests, or per-run reports)."""
    with _lock:
        _counts.clear()


def format_choices() -> str:
    """The record as an aligned text table, one decision per line."""
    rows = sorted(choices().items())
    if not rows:
        return "kernels.dispatch: no decisions recorded"
    width = max(len(k[0]) for k, _ in rows), max(len(k[1]) for k, _ in rows)
    lines = [f"{'kernel':<{width[0]}}  {'impl':<{width[1]}}  count  reason"]
    for (name, impl, reason), count in rows:
        lines.append(f"{name:<{width[0]}}  {impl:<{width[1]}}  {count:>5}  {reason}")
    return "\n".join(lines)


def _accepted(fn: Callable, kwargs: dict) -> dict:
    params = inspect.signature(fn).parameters
    return {k: v for k, v in kwargs.items() if k in params}


def run(kernel_name, *args, force: str | None = None, **kwargs):
    """Chooses (see :func:`choose`) and calls the implementation.

    Keyword arguments the chosen function does not take are dropped: tiling
    (``block_*``, ``schedule``) does not change the reference's math, and the
    reference-only ones (``dropout_p``, ``dropout_rng``) make the Pallas
    kernel unsupported whenever they are not inert.

    Args:
        kernel_name: a name from :func:`kernel_names` (or the Pallas function).
        *args: positional arguments of the kernel.
        force: None, "pallas" or "reference".
        **kwargs: keyword arguments of the kernel / reference.

    Returns:
        The implementation's result.

    Raises:
        TypeError: ``interpret`` passed (dispatch decides it).
        KeyError, ValueError, UnsupportedKernelError: see :func:`choose`.
    """
    if "interpret" in kwargs:
        raise TypeError("run() decides interpret mode; call the kernel directly to set it")
    entry = _entry(kernel_name)
    choice = choose(entry.name, force=force, **entry.config_of(*args, **kwargs))
    if choice.impl == "pallas":
        return entry.pallas(*args, interpret=choice.interpret, **_accepted(entry.pallas, kwargs))
    return entry.reference(*args, **_accepted(entry.reference, kwargs))
