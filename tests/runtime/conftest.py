"""Shared setup of the runtime tests: one private on-disk cache for the session.

Tests reuse the same tiny shapes ([4, 3] inputs, a 3→4→2 MLP) so the in-memory
compile cache keeps the whole suite to a few dozen XLA compiles.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime


@pytest.fixture(scope="session", autouse=True)
def _runtime_cache(tmp_path_factory, worker_id):
    """Point the runtime's on-disk compile cache at a fresh directory of this run, shared by its xdist workers (an
    executable one worker compiled, the other loads instead of compiling it again)."""
    if worker_id == "master":
        path = tmp_path_factory.mktemp("xla_cache")
    else:  # (each worker's base directory is its own; their parent is the run's)
        path = tmp_path_factory.getbasetemp().parent / "xla_cache"
    tpu_runtime.set_cache_dir(path)
    yield


@pytest.fixture(autouse=True)
def _strict_mode():
    """Every test starts (and ends) in strict mode."""
    with tpu_runtime.set_eager_mode("strict"):
        yield


def tiny_mlp() -> torch.nn.Module:
    """A seeded 3 → 4 → 2 MLP (Linear, ReLU, Linear)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """A fixed [4, 3] input and [4, 2] target."""
    g = torch.Generator().manual_seed(7)
    return torch.randn(4, 3, generator=g), torch.randn(4, 2, generator=g)


def train_steps(model, opt, x, y, n: int) -> list[float]:
    """``n`` MSE training steps with ``opt``; the loss of each step."""
    losses = []
    for _ in range(n):
        loss = F.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def compiled_vs_cpu(model, opt_cls, lr: float, x, y, n: int) -> tuple[torch.nn.Module, list, list]:
    """Train ``torch.compile(model on tpu, backend="tpu")`` and a CPU copy ``n`` steps each.

    Dynamo's caches and counters are reset first. Returns ``(cpu copy, tpu losses, cpu losses)``;
    ``model``'s parameters are left on the tpu device.
    """
    import copy

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    ref = copy.deepcopy(model)
    model.to("tpu")
    compiled = torch.compile(model, backend="tpu")
    got = train_steps(compiled, opt_cls(model.parameters(), lr=lr), x.to("tpu"), y.to("tpu"), n)
    return ref, got, train_steps(ref, opt_cls(ref.parameters(), lr=lr), x, y, n)
