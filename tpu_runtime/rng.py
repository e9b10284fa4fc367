"""The device's random number state: a seed and a counter of random ops drawn so far.

Every random op receives ``[seed, counter]`` as an input (never as a key part, so a
dropout in a training loop hits the same executable every step) and draws from
``fold_in(key(seed), counter)``. ``torch.manual_seed`` reaches :func:`manual_seed`
through ``torch.tpu.manual_seed_all``, so seeding torch makes device dropout
reproducible. The values differ from torch's CPU generator (JAX's counter-based
PRNG, see ``converter/lowering/ops/random.py``).
"""

from __future__ import annotations

import numpy as np
import torch

_STATE = {"seed": int(torch.initial_seed()) % 2**32, "counter": 0}


def manual_seed(seed: int) -> None:
    """Seed the device generator and restart its counter."""
    _STATE["seed"] = int(seed) % 2**32
    _STATE["counter"] = 0


def initial_seed() -> int:
    """The current seed."""
    return _STATE["seed"]


def next_input() -> np.ndarray:
    """The ``[seed, counter]`` input of the next random op (advances the counter)."""
    c = _STATE["counter"]
    _STATE["counter"] = c + 1
    return np.array([_STATE["seed"], c % 2**32], dtype=np.uint32)


def get_rng_state() -> torch.Tensor:
    """The generator state as a CPU uint8 tensor (seed and counter, little-endian int64)."""
    return torch.from_numpy(np.array([_STATE["seed"], _STATE["counter"]], dtype=np.int64).view(np.uint8).copy())


def set_rng_state(state: torch.Tensor) -> None:
    """Restore a state returned by :func:`get_rng_state`."""
    seed, counter = np.asarray(state.cpu().numpy(), dtype=np.uint8).view(np.int64)
    _STATE["seed"], _STATE["counter"] = int(seed), int(counter)
