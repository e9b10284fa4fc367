"""JAX's 64-bit mode around runtime work (torch's int64/float64 need it).

The runtime traces and runs every executable with ``jax_enable_x64`` on, as the
rest of tpu-export does, but never sets it process-wide: the switch is
thread-local (autograd's device thread sets its own). ``swap_local`` costs ~1 µs
where ``with jax.enable_x64(True)`` costs ~7 µs, which matters once per op.
"""

from __future__ import annotations

import contextlib
import functools
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


if _STATE is None:  # pragma: no cover - a JAX without the fast switch
    def swap_on() -> object:
        """Enable 64-bit mode; returns the token :func:`restore` needs (fast path of :func:`x64`)."""
        ctx = jax.enable_x64(True)
        ctx.__enter__()
        return ctx

    def restore(token: object) -> None:
        """Undo :func:`swap_on`."""
        token.__exit__(None, None, None)
else:
    #: ``swap_on()``: enable 64-bit mode; returns the token :func:`restore` needs (fast path of :func:`x64`). JAX's
    #: own switch, called with no Python frame around it (~100 ns less per op, twice per op).
    swap_on = functools.partial(_STATE.swap_local, True)
    #: ``restore(token)``: undo :func:`swap_on`.
    restore = _STATE.set_local
