"""Small models built only from ops every target lowers today (linear, relu, add)."""

from __future__ import annotations

import inspect

import torch
from torch import nn


class MLP(nn.Module):
    """Linear → ReLU → Linear → ReLU → Linear, with a residual add."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(8, 16)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(16, 16)
        self.fc3 = nn.Linear(16, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc1(x))  # the first relu: localization must point here
        h = h + torch.relu(self.fc2(h))
        return self.fc3(h)


def relu_line() -> int:
    """The source line of the first relu call in :meth:`MLP.forward`."""
    lines, start = inspect.getsourcelines(MLP.forward)
    return start + next(i for i, line in enumerate(lines) if "self.act(" in line)


def mlp(dtype: torch.dtype = torch.float32) -> tuple[nn.Module, tuple]:
    """A seeded MLP in eval mode and a 4×8 input."""
    torch.manual_seed(0)
    return MLP().eval().to(dtype), (torch.randn(4, 8).to(dtype),)


class Counter(nn.Module):
    """Mutates a buffer in forward (like BatchNorm statistics or a cache)."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1.0)
        return self.fc(x) + self.calls


def factory() -> tuple[nn.Module, tuple]:
    """CLI factory: the MLP."""
    return mlp()
