"""The one compile cache of the TPU runtime: every eager mode and ``torch.compile`` share it.

Two levels:

* in memory: a dict from a structural key (op + input shapes/dtypes + static args
  for strict/debug eager; the recorded graph's structure for fused eager; the
  AOTAutograd graph + input signature for ``torch.compile``) to a ``jax.jit``
  callable that has been compiled once;
* on disk, across processes: JAX's persistent compilation cache in a directory the
  user chooses (:func:`set_cache_dir`, or ``TPU_CACHE_DIR``; ``off`` disables it).
  JAX keys entries by the lowered HLO; an entry that cannot be read (corrupt,
  truncated, written by another version) is reported by JAX as a warning and
  recompiled, never a crash.

:func:`cache_stats` counts requests, in-memory hits, misses (each miss traces the
JAX function; ``disk_hits`` of those were served by the on-disk cache instead of
XLA), and the seconds spent tracing + compiling. :func:`cache_only` turns any
compile into a :class:`CacheMissError`.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import asdict, dataclass
from typing import Any, Callable, Iterator

import jax
from jax._src.lib import _jax

from converter.errors import ConversionError

_DISK_HIT = "/jax/compilation_cache/cache_hits"
_DISK_MISS = "/jax/compilation_cache/cache_misses"


class CacheMissError(ConversionError):
    """A compile was needed inside :func:`cache_only`."""


@dataclass
class CacheStats:
    """Counters of the shared compile cache (see the module docstring)."""

    requests: int = 0
    hits: int = 0
    misses: int = 0
    disk_hits: int = 0
    compile_seconds: float = 0.0

    def as_dict(self) -> dict:
        """The counters as a plain dict."""
        return asdict(self)


def donation_order(pairs: list, outputs: list) -> tuple[tuple, list]:
    """``donate_argnums`` and the output order that make JAX write each output into the input it
    replaces; ``pairs``: ``(input position, output)`` with ``output`` one of ``outputs``.

    JAX gives each donated input, in order, the first output of its shape and dtype not yet given
    one: the paired outputs go first, in the order of their inputs (an op that also returns an
    unchanged parameter-shaped gradient would otherwise have a moment's buffer paired with it, and
    XLA would copy instead)."""
    pairs = sorted(pairs, key=lambda p: p[0])
    paired = [out for _, out in pairs]
    taken = set(paired)
    return tuple(pos for pos, _ in pairs), paired + [o for o in outputs if o not in taken]


class CompileCache:
    """Key → compiled ``jax.jit`` callable, with statistics."""

    def __init__(self) -> None:
        self._entries: dict[Any, Callable] = {}
        self.stats = CacheStats()
        self._cache_only = 0
        self._disk_events = {"hit": 0, "miss": 0}
        self._on_clear: list[Callable[[], None]] = []

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: Any) -> Callable | None:
        """The cached callable for ``key`` (counts a request and a hit), or ``None``."""
        self.stats.requests += 1
        fn = self._entries.get(key)
        if fn is not None:
            self.stats.hits += 1
        return fn

    def lookup_quiet(self, key: Any) -> Callable | None:
        """The cached callable for ``key`` without counting anything."""
        return self._entries.get(key)

    def compile(self, key: Any, fn: Callable, args: tuple, describe: Callable[[], str] = lambda: "",
                donate: tuple = ()) -> tuple:
        """Jit ``fn``, run it once on ``args`` (this compiles it), store it under ``key``.

        Returns the outputs of that first run. Counts a miss and the seconds spent. ``donate``:
        the positions of ``args`` whose buffers the executable may reuse (``key`` must tell them).

        Raises:
            CacheMissError: inside :func:`cache_only` when the executable was in
                neither the in-memory nor the on-disk cache.
        """
        _configure_disk_cache()
        if self._cache_only and not _disk_cache_dir():
            raise CacheMissError(f"compile cache miss inside cache_only(): {describe() or key!r}")
        jitted = jax.jit(fn, donate_argnums=donate) if donate else jax.jit(fn)
        start = time.perf_counter()
        if self._cache_only:  # compiled first, not run: a miss raises before any input is donated to it
            hits_before = self._disk_events["hit"]
            with _TRACEBACK_SCOPE():
                jitted.lower(*args).compile()
            if self._disk_events["hit"] == hits_before:
                self.stats.compile_seconds += time.perf_counter() - start
                raise CacheMissError(f"compile cache miss inside cache_only() (not on disk either): "
                                     f"{describe() or key!r}")
        hits_before = self._disk_events["hit"]
        with _TRACEBACK_SCOPE():
            out = jitted(*args)
        self.stats.compile_seconds += time.perf_counter() - start
        self.stats.misses += 1
        self.stats.disk_hits += self._disk_events["hit"] - hits_before
        self._entries[key] = jitted
        return out

    def discard(self, keys: Any) -> None:
        """Forget the in-memory entries of ``keys`` (those present), e.g. when their owner is freed."""
        for key in keys:
            self._entries.pop(key, None)

    def clear(self) -> None:
        """Forget every in-memory entry and the runtime's plans (the on-disk cache is kept)."""
        self._entries.clear()
        for fn in self._on_clear:
            fn()

    def on_clear(self, fn: Callable[[], None]) -> None:
        """Call ``fn`` whenever the cache is cleared (the runtime's plan tables register here)."""
        self._on_clear.append(fn)

    def _on_event(self, event: str, **_: Any) -> None:
        if event == _DISK_HIT:
            self._disk_events["hit"] += 1
        elif event == _DISK_MISS:
            self._disk_events["miss"] += 1


#: While a callable is traced and compiled, the tracebacks JAX records (each traced equation's source, each
#: executable's compile site: held by C++, where the garbage collector cannot see them) stop at this scope: they
#: had held the caller's code objects for as long as the executable lived, and the caller of a ``torch.compile``
#: graph is dynamo's transformed code, whose release is what frees the compiled function (dynamo removes the
#: globals that hold it once that code dies). Each graph compiled with ``torch.compile`` stayed in memory for good
#: (about 4 MB), even after ``torch._dynamo.reset()``. (jaxlib's context manager; a no-op where a version lacks it.)
_TRACEBACK_SCOPE = getattr(_jax, "TracebackScope", contextlib.nullcontext)

#: The process-wide cache shared by strict, debug and fused eager and torch.compile.
CACHE = CompileCache()
jax.monitoring.register_event_listener(CACHE._on_event)

_DIR: dict[str, Any] = {"value": None, "configured": False}


def _default_dir() -> str | None:
    env = os.environ.get("TPU_CACHE_DIR")
    if env is not None:
        return None if env.strip().lower() in ("", "0", "off", "none") else env
    return os.path.join(os.path.expanduser("~"), ".cache", "tpu_runtime", "xla")


def _disk_cache_dir() -> str | None:
    return _DIR["value"] if _DIR["configured"] else None


def _configure_disk_cache() -> None:
    """Point JAX's persistent cache at our directory on first use (unless the user set one)."""
    if _DIR["configured"]:
        return
    existing = jax.config.jax_compilation_cache_dir
    try:
        set_cache_dir(existing if existing else _default_dir())
    except OSError as e:  # e.g. a read-only home directory: run with the in-memory cache only
        warnings.warn(f"tpu_runtime: on-disk compile cache disabled ({e}); set TPU_CACHE_DIR to a writable "
                      "directory to keep compiled executables across processes")
        set_cache_dir(None)


def set_cache_dir(path: str | os.PathLike | None) -> None:
    """Use ``path`` as the on-disk compile cache (``None`` disables it).

    Every compile of the process is cached there with no minimum compile time,
    so small eager ops survive a restart too.
    """
    from jax.experimental.compilation_cache import compilation_cache as cc

    path = None if path is None else os.fspath(path)
    if path is not None:
        os.makedirs(path, exist_ok=True)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    jax.config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    jax.config.update("jax_compilation_cache_dir", path)
    cc.reset_cache()  # JAX initializes its cache object once; make it re-read the directory
    _DIR["value"], _DIR["configured"] = path, True


def cache_dir() -> str | None:
    """The on-disk cache directory in use (``None``: disabled or not configured yet)."""
    return _disk_cache_dir()


def cache_stats() -> CacheStats:
    """A snapshot of the shared cache's counters."""
    return CacheStats(**CACHE.stats.as_dict())


def reset_cache_stats() -> None:
    """Zero the counters (entries are kept)."""
    for name, value in CacheStats().as_dict().items():
        setattr(CACHE.stats, name, value)


def clear_cache() -> None:
    """Drop every in-memory entry (and JAX's own jit caches); the disk cache stays."""
    CACHE.clear()
    jax.clear_caches()


@contextlib.contextmanager
def cache_only() -> Iterator[None]:
    """Inside the block, any executable that must be compiled raises :class:`CacheMissError`.

    Hits in memory or on disk are fine; use it to prove that a warmed-up loop
    compiles nothing.
    """
    CACHE._cache_only += 1
    try:
        yield
    finally:
        CACHE._cache_only -= 1


@contextlib.contextmanager
def misses_allowed() -> Iterator[None]:
    """Inside the block, :func:`cache_only` is lifted (fused eager compiles the graph whose miss it raises, so the
    values pending in it are not lost)."""
    before, CACHE._cache_only = CACHE._cache_only, 0
    try:
        yield
    finally:
        CACHE._cache_only = before
