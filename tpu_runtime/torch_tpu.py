"""``torch.tpu``: the device module of the ``tpu`` backend (like ``torch.cuda``).

Registered by ``import tpu_runtime`` with ``torch._register_device_module``. PyTorch
itself calls some of these: ``torch.manual_seed`` calls :func:`manual_seed_all`,
the autograd engine and ``torch.device("tpu")`` use :func:`device_count` and
:func:`current_device`, ``torch.autocast("tpu")`` asks :func:`get_amp_supported_dtype`.
"""

from __future__ import annotations

from typing import Any

import jax
import torch

from tpu_runtime import rng
from tpu_runtime.cache import cache_only, cache_stats, set_cache_dir
from tpu_runtime.eager import fused_report, get_eager_mode, reset_fused_report, set_eager_mode, sync

manual_seed = rng.manual_seed
initial_seed = rng.initial_seed

#: Read by ``torch.utils.checkpoint``: only a device module that says it is initialized gets its
#: RNG state saved before a checkpointed forward and restored for the recomputation (without it,
#: dropout in the recomputed forward draws new masks and the gradients are wrong).
_initialized = True


def is_available() -> bool:
    """True: the device is ``jax.devices()[0]`` (TPU, GPU or CPU, whatever JAX runs on)."""
    return True


def is_initialized() -> bool:
    """True once ``tpu_runtime`` is imported."""
    return True


def device_count() -> int:
    """Number of tpu devices torch sees (the runtime uses one: ``jax.devices()[0]``)."""
    return 1


def current_device() -> int:
    """Index of the current device (always 0)."""
    return 0


def set_device(device: Any) -> None:
    """Select a device; only index 0 exists.

    Raises:
        ValueError: for any other index.
    """
    _index(device)


def _index(device: Any) -> int:
    """The index ``device`` (an int, ``"tpu"``, ``"tpu:0"`` or a ``torch.device``) names: 0.

    Raises:
        ValueError: any other index, or a device of another type.
    """
    if isinstance(device, int):
        index = device
    else:
        d = torch.device(device)
        if d.type != "tpu":
            raise ValueError(f"expected a tpu device, got {d}")
        index = d.index
    if index not in (None, 0):
        raise ValueError(f"tpu device {index} does not exist (device_count() == 1)")
    return 0


class device:
    """Context manager that selects a device, as ``torch.cuda.device`` (only index 0 exists;
    ``torch.utils.checkpoint`` enters it around reading and restoring the RNG state).

    Raises:
        ValueError: any index other than 0 (``None`` and -1 select nothing, as in torch.cuda).
    """

    def __init__(self, device: Any):
        self.idx = -1 if device is None or device == -1 else _index(device)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def get_rng_state(device: Any = "tpu") -> torch.Tensor:
    """The device generator's state as a CPU uint8 tensor (what :func:`set_rng_state` takes);
    ``device`` as in ``torch.cuda.get_rng_state`` (``torch.random.fork_rng`` passes it)."""
    _index(device)
    return rng.get_rng_state()


def set_rng_state(new_state: torch.Tensor, device: Any = "tpu") -> None:
    """Restore a state returned by :func:`get_rng_state`: the random ops that follow draw
    the same numbers as those that followed it."""
    _index(device)
    rng.set_rng_state(new_state)


def get_rng_state_all() -> list[torch.Tensor]:
    """The state of every tpu device (there is one)."""
    return [get_rng_state()]


def set_rng_state_all(new_states: list[torch.Tensor]) -> None:
    """Restore the states of :func:`get_rng_state_all`."""
    for i, state in enumerate(new_states):
        set_rng_state(state, i)


def get_device_name(device: Any = None) -> str:
    """The JAX device behind ``tpu:0``, e.g. ``"TPU v5 lite"`` or ``"cpu"``."""
    d = jax.devices()[0]
    return getattr(d, "device_kind", d.platform)


def synchronize(device: Any = None) -> None:
    """Run everything pending (fused eager) and wait for the device."""
    sync()


def manual_seed_all(seed: int) -> None:
    """Seed every tpu device (there is one); called by ``torch.manual_seed``."""
    rng.manual_seed(seed)


def seed() -> None:
    """Seed from a non-deterministic source."""
    rng.manual_seed(int(torch.seed()))


def get_amp_supported_dtype() -> list[torch.dtype]:
    """The dtypes ``torch.autocast("tpu", dtype=...)`` accepts (PyTorch's AMP asks the device module)."""
    return [torch.bfloat16, torch.float16]


def memory_stats(device: Any = None) -> dict:
    """The device's allocator statistics as JAX reports them (``bytes_in_use``,
    ``peak_bytes_in_use``, ``bytes_limit``… on TPU and GPU), plus
    ``allocated_bytes.all.current``: the bytes of every live array on the device."""
    d = jax.devices()[0]
    stats = dict(d.memory_stats() or {})
    stats["allocated_bytes.all.current"] = sum(a.nbytes for a in jax.live_arrays() if d in a.devices())
    return stats


def memory_allocated(device: Any = None) -> int:
    """Bytes held on the device: the allocator's ``bytes_in_use`` where JAX reports it, else the
    bytes of every live array (JAX's CPU backend keeps no allocator statistics)."""
    stats = memory_stats(device)
    return int(stats.get("bytes_in_use", stats["allocated_bytes.all.current"]))


#: JAX's peak (``peak_bytes_in_use``) when :func:`reset_peak_memory_stats` last ran.
_PEAK_AT_RESET: list = [None]


def max_memory_allocated(device: Any = None) -> int:
    """Peak bytes held on the device (``peak_bytes_in_use``) where JAX reports it; else the current
    :func:`memory_allocated` (no peak is kept without an allocator). After :func:`reset_peak_memory_stats`,
    the current bytes until the peak grows again."""
    stats = memory_stats(device)
    peak = stats.get("peak_bytes_in_use")
    if peak is None or (_PEAK_AT_RESET[0] is not None and peak <= _PEAK_AT_RESET[0]):
        return memory_allocated(device)
    return int(peak)


def memory_reserved(device: Any = None) -> int:
    """Bytes the allocator holds (``bytes_reserved`` / ``pool_bytes``), else :func:`memory_allocated`."""
    stats = memory_stats(device)
    return int(stats.get("bytes_reserved", stats.get("pool_bytes", memory_allocated(device))))


def empty_cache() -> None:
    """Run pending work; JAX frees device buffers as soon as their arrays die, so there is no
    cache of freed blocks to release."""
    sync()


class Event(torch.Event):
    """``torch.cuda.Event`` for the tpu device, a ``torch.Event`` (so torch's stream APIs take it): :meth:`record`
    waits for pending work (the device runs one stream) and takes a host timestamp, so :meth:`elapsed_time`
    between two recorded events measures the device work in between."""

    def __new__(cls, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False) -> "Event":
        return super().__new__(cls, device="tpu", enable_timing=enable_timing, blocking=blocking,
                               interprocess=interprocess)

    def __init__(self, enable_timing: bool = False, blocking: bool = False, interprocess: bool = False):
        self.enable_timing = enable_timing
        self._time: float | None = None

    def record(self, stream: Any = None) -> None:
        """Mark this point: everything issued before it has finished."""
        import time

        synchronize()
        self._time = time.perf_counter()

    def query(self) -> bool:
        """Whether the work before :meth:`record` has finished (recording waits for it)."""
        return self._time is not None

    def synchronize(self) -> None:
        """Wait for the work before :meth:`record` (already done by :meth:`record`)."""

    def wait(self, stream: Any = None) -> None:
        """Make later work wait for this event (there is one stream: nothing to do)."""

    def elapsed_time(self, end_event: "Event") -> float:
        """Milliseconds from this event to ``end_event``.

        Raises:
            RuntimeError: an event was created without ``enable_timing=True`` or not recorded.
        """
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with enable_timing=True to measure elapsed time")
        if self._time is None or end_event._time is None:
            raise RuntimeError("Both events must be recorded before calling elapsed_time()")
        return (end_event._time - self._time) * 1e3


class Stream(torch.Stream):
    """``torch.cuda.Stream`` for the tpu device, a ``torch.Stream`` (so ``Tensor.record_stream`` and
    ``torch.accelerator.set_stream`` take it). The runtime issues all work in order on one
    stream (JAX's), so every stream object stands for it (they compare equal): synchronizing one
    waits for all pending work, and waiting on another stream or event has nothing to order."""

    def __new__(cls, device: Any = None, priority: int = 0, **kwargs: Any) -> "Stream":
        if device is not None:
            _index(device)  # (another device, or an index past the one device, raises)
        return super().__new__(cls, device="tpu", priority=priority)

    def __init__(self, device: Any = None, priority: int = 0, **kwargs: Any):
        self.priority = priority

    @property
    def device(self) -> torch.device:
        """``tpu:0``."""
        return torch.device("tpu", 0)

    def synchronize(self) -> None:
        """Wait for every pending op."""
        synchronize()

    def query(self) -> bool:
        """Whether all work is done (runs it: pending fused ops have no other way to finish)."""
        synchronize()
        return True

    def wait_stream(self, stream: "Stream") -> None:
        """Order after ``stream`` (the same stream: nothing to do)."""

    def wait_event(self, event: "Event") -> None:
        """Order after ``event`` (one stream: nothing to do)."""

    def record_event(self, event: "Event | None" = None) -> "Event":
        """Record ``event`` (or a new one) here and return it."""
        event = event if event is not None else Event()
        event.record(self)
        return event

    def __enter__(self) -> "Stream":
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


#: The stream object :func:`current_stream` returns (made on first use: the device type is named "tpu" only
#: once ``import tpu_runtime`` has registered it, after this module is imported).
_STREAM: list = []


def _the_stream() -> "Stream":
    if not _STREAM:
        _STREAM.append(Stream())
    return _STREAM[0]


def current_stream(device: Any = None) -> Stream:
    """The stream work is issued on (there is one)."""
    return _the_stream()


def default_stream(device: Any = None) -> Stream:
    """The default stream (the only one)."""
    return _the_stream()


def stream(s: Stream | None) -> Stream:
    """``with torch.tpu.stream(s):`` — work inside goes to the one stream as always."""
    return s if s is not None else _the_stream()


def _is_in_bad_fork() -> bool:
    return False


def init() -> None:
    """Nothing to do: the device is ready once ``tpu_runtime`` is imported (as ``torch.cuda.init``)."""


def is_built() -> bool:
    """Whether this torch has the tpu backend: True once ``tpu_runtime`` is imported."""
    return True


def is_bf16_supported(including_emulation: bool = True) -> bool:
    """bfloat16 is a native type of every JAX backend (TPU's own matmul type)."""
    return True


def seed_all() -> None:
    """Seed every tpu device (there is one) from a non-deterministic source."""
    seed()


def reset_peak_memory_stats(device: Any = None) -> None:
    """Start a new peak: :func:`max_memory_allocated` reports the current bytes until JAX's own peak
    (which JAX cannot reset) grows past the one recorded here."""
    _PEAK_AT_RESET[0] = memory_stats(device).get("peak_bytes_in_use")


def max_memory_reserved(device: Any = None) -> int:
    """Peak bytes the allocator held (``peak_pool_bytes``) where JAX reports it, else :func:`memory_reserved`."""
    stats = memory_stats(device)
    return int(stats.get("peak_pool_bytes", memory_reserved(device)))


def mem_get_info(device: Any = None) -> tuple[int, int]:
    """``(free, total)`` bytes of the device: from the allocator's ``bytes_limit`` where JAX reports it, else
    (JAX's CPU backend) the host's available and total memory."""
    import os

    stats = memory_stats(device)
    if "bytes_limit" in stats:
        total = int(stats["bytes_limit"])
        return total - int(stats.get("bytes_in_use", 0)), total
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


class _DeviceProperties:
    """What :func:`get_device_properties` returns (the fields of ``torch.cuda``'s that apply)."""

    def __init__(self) -> None:
        d = jax.devices()[0]
        self.name = get_device_name()
        self.type = "tpu"
        self.platform = d.platform
        self.total_memory = mem_get_info()[1]
        self.multi_processor_count = getattr(d, "num_cores", 1)

    def __repr__(self) -> str:
        return (f"_TpuDeviceProperties(name='{self.name}', platform='{self.platform}', "
                f"total_memory={self.total_memory // 2 ** 20}MB)")


def get_device_properties(device: Any = None) -> _DeviceProperties:
    """Name, platform and total memory of ``tpu:0`` (the JAX device behind it).

    Raises:
        ValueError: another device index.
    """
    if device is not None:
        _index(device)
    return _DeviceProperties()


def memory_summary(device: Any = None, abbreviated: bool = False) -> str:
    """The device's memory statistics (:func:`memory_stats`) as text, one per line."""
    stats = memory_stats(device)
    return "\n".join(f"{k}: {v}" for k, v in sorted(stats.items()))


__all__ = ["is_available", "is_initialized", "device_count", "current_device", "set_device", "get_device_name",
           "synchronize", "get_amp_supported_dtype", "memory_stats", "memory_allocated", "max_memory_allocated",
           "memory_reserved", "empty_cache", "Event", "Stream", "current_stream", "default_stream", "stream",
           "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
           "get_rng_state_all", "set_rng_state_all", "device", "set_eager_mode", "get_eager_mode", "cache_stats",
           "fused_report", "reset_fused_report", "cache_only", "set_cache_dir", "init", "is_built", "is_bf16_supported",
           "seed_all", "reset_peak_memory_stats", "max_memory_reserved", "mem_get_info", "get_device_properties",
           "memory_summary"]
