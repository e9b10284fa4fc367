"""The README's example model: a tiny ResNet (two basic blocks, one with a downsample).

    tpu-export convert examples/resnet.py:build --target litert -o resnet.tflite
    tpu-export validate examples/resnet.py:build --targets tpu,litert --report out/

or from Python::

    from converter import convert
    from examples.resnet import build
    model, args = build()
    tpu = convert(model, args, target="tpu")
    print((tpu(*args) - model(*args)).abs().max())
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from torch import nn

if __package__ in (None, ""):  # loaded by file path (the CLI's FILE:FUNC form) or run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.models import TinyResNet, resnet  # noqa: E402

__all__ = ["TinyResNet", "build"]


def build() -> tuple[nn.Module, tuple]:
    """Return an eval-mode TinyResNet and sample images [2, 3, 16, 16]."""
    return resnet()


if __name__ == "__main__":
    model, args = build()
    with torch.no_grad():
        print(model(*args).shape)
