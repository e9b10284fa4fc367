"""The bundled default model of ``tpu-export demo``: a small seeded CNN classifier."""

from __future__ import annotations

import torch
from torch import nn


class DemoNet(nn.Module):
    """Conv-BN-ReLU ×2, max-pool, global average pool, linear head (10 classes)."""

    def __init__(self) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.MaxPool2d(2),
            nn.Conv2d(16, 32, 3, padding=1), nn.BatchNorm2d(32), nn.ReLU6(),
            nn.AdaptiveAvgPool2d(1),
        )
        self.head = nn.Linear(32, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Logits for a batch of 3×H×W images."""
        return self.head(torch.flatten(self.features(x), 1)).softmax(-1)


def build() -> tuple[nn.Module, tuple]:
    """The demo model (eval mode, seeded weights and BN statistics) and one 2×3×32×32 input."""
    torch.manual_seed(0)
    model = DemoNet()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.5, 0.5)
                m.running_var.uniform_(0.5, 1.5)
    return model.eval(), (torch.randn(2, 3, 32, 32),)
