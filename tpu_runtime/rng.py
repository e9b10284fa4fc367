"""The device's random number state: a seed and a counter of random ops drawn so far.

Every random op receives ``[seed, counter]`` as an input (never as a key part, so a
dropout in a training loop hits the same executable every step) and draws from
``fold_in(key(seed), counter)``. ``torch.manual_seed`` reaches :func:`manual_seed`
through ``torch.tpu.manual_seed_all``, so seeding torch makes device dropout
reproducible. The values differ from torch's CPU generator (JAX's counter-based
PRNG, see ``converter/lowering/ops/random.py``). An op given an explicit CPU
``torch.Generator`` draws from it instead (:func:`generator_stream`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Iterator

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


#: ``[seed, counter]`` drawn from an explicit CPU ``torch.Generator`` for the op running now (see
#: :func:`generator_stream`), or ``None``: the device generator.
_EXPLICIT: list = [None]


def next_input() -> np.ndarray:
    """The ``[seed, counter]`` input of the next random op (advances the counter)."""
    explicit = _EXPLICIT[0]
    if explicit is not None:
        explicit[1] += 1
        return np.array([explicit[0], explicit[1] - 1], dtype=np.uint32)
    c = _STATE["counter"]
    _STATE["counter"] = c + 1
    return np.array([_STATE["seed"], c % 2**32], dtype=np.uint32)


@contextlib.contextmanager
def generator_stream(generator: torch.Generator, op: Any) -> Iterator[None]:
    """Draw the random ops of one call from ``generator`` (a CPU ``torch.Generator``; a
    ``Generator(device="tpu")`` needs C++ hooks a Python backend cannot register).

    The call's key comes from 32 bits drawn from the generator, which advances it as a
    draw does: the same generator state gives the same device values, a later call other
    ones, and the device generator (``torch.manual_seed``) is untouched. The values differ
    from the CPU's for the same generator (JAX's PRNG).

    Raises:
        RuntimeError: the generator is not a CPU one (as CUDA refuses another device's).
    """
    if generator.device.type != "cpu":
        raise RuntimeError(f"{op}: expected a 'cpu' generator for the tpu device (its random ops seed from CPU "
                           f"generators) but found a '{generator.device.type}' one")
    seed = int(torch.randint(0, 2**32, (), dtype=torch.int64, generator=generator))
    prev, _EXPLICIT[0] = _EXPLICIT[0], [seed, 0]
    try:
        yield
    finally:
        _EXPLICIT[0] = prev


def get_rng_state() -> torch.Tensor:
    """The generator state as a CPU uint8 tensor (seed and counter, little-endian int64)."""
    return torch.from_numpy(np.array([_STATE["seed"], _STATE["counter"]], dtype=np.int64).view(np.uint8).copy())


def set_rng_state(state: torch.Tensor) -> None:
    """Restore a state returned by :func:`get_rng_state`.

    Raises:
        TypeError: ``state`` is not a uint8 tensor (torch's message).
        RuntimeError: it does not have the state's 16 bytes.
    """
    if not isinstance(state, torch.Tensor) or state.dtype != torch.uint8:
        raise TypeError("RNG state must be a torch.ByteTensor")
    if state.numel() != 16:
        raise RuntimeError(f"Expected a tpu generator state of size 16 but found the input RNG state size to be "
                           f"{state.numel()}")
    seed, counter = np.asarray(state.cpu().numpy(), dtype=np.uint8).reshape(-1).view(np.int64)
    _STATE["seed"], _STATE["counter"] = int(seed), int(counter)
