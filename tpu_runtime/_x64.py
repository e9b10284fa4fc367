"""JAX's 64-bit mode around runtime work (torch's int64/float64 need it).

The runtime traces and runs every executable with ``jax_enable_x64`` on, as the
rest of tpu-export does, but never sets it process-wide: the switch is
thread-local (autograd's device thread sets its own). ``swap_local`` costs ~1 µs
where ``with jax.enable_x64(True)`` costs ~7 µs, which matters once per op.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import jax

try:
    from jax._src.config import enable_x64 as _STATE

    _STATE.swap_local  # noqa: B018
except (ImportError, AttributeError):  # pragma: no cover - a JAX without the fast switch
    _STATE = None


@contextlib.contextmanager
def x64() -> Iterator[None]:
    """Enable JAX's 64-bit mode in this thread for the block."""
    if _STATE is None:  # pragma: no cover
        with jax.enable_x64(True):
            yield
        return
    prev = _STATE.swap_local(True)
    try:
        yield
    finally:
        _STATE.set_local(prev)


def swap_on() -> object:
    """Enable 64-bit mode; returns the token :func:`restore` needs (fast path of :func:`x64`)."""
    if _STATE is None:  # pragma: no cover
        ctx = jax.enable_x64(True)
        ctx.__enter__()
        return ctx
    return _STATE.swap_local(True)


def restore(token: object) -> None:
    """Undo :func:`swap_on`."""
    if _STATE is None:  # pragma: no cover
        token.__exit__(None, None, None)
        return
    _STATE.set_local(token)
