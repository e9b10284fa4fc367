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
from tpu_runtime.eager import get_eager_mode, set_eager_mode, sync

manual_seed = rng.manual_seed
initial_seed = rng.initial_seed
get_rng_state = rng.get_rng_state
set_rng_state = rng.set_rng_state


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
    index = torch.device(device).index if not isinstance(device, int) else device
    if index not in (None, 0):
        raise ValueError(f"tpu device {index} does not exist (device_count() == 1)")


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


def _is_in_bad_fork() -> bool:
    return False


__all__ = ["is_available", "is_initialized", "device_count", "current_device", "set_device", "get_device_name",
           "synchronize", "get_amp_supported_dtype", "manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state",
           "set_rng_state", "set_eager_mode", "get_eager_mode", "cache_stats", "cache_only", "set_cache_dir"]
