"""LiteRT quantization modes side by side, in one process: float32, ``quantize="int8"`` (dynamic-range int8
weights), ``quantize="int8-full"`` (int8 compute from calibrated ranges) and ``int8-full`` with ``int8_io=True``.

Every variant of a model is built from one capture. Per model and variant the script prints

* the file size relative to float32,
* interpreter latency relative to float32: each file in its own ``ai_edge_litert`` Interpreter (XNNPACK,
  ``--threads`` threads, inputs set once), ``invoke()`` timed in alternating blocks (float32 then the variant,
  then the other way round), the median of the per-block ratios (PEERS.md); the ``control`` line times the
  float32 file against a second Interpreter of itself,
* the signal-to-noise ratio of the output against PyTorch float32 on inputs none of the variants was
  calibrated on, and the top-1 agreement of the last dim.

Calibration uses ``--calibration`` random input sets (the models are randomly initialized; the timing does not
depend on the values). ``cnn160`` is a 7-convolution network on 160×160 images (BatchNorm folded, channels up
to 256): the kind of model full-integer quantization is for; the others come from ``examples/models.py``.

    python benchmarks/bench_quantize.py [--models cnn160,mobilenet,resnet,mingpt] [--blocks 15] [--threads 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ai_edge_litert.interpreter import Interpreter  # noqa: E402

from converter.api import build, capture_program  # noqa: E402
from examples import models as zoo  # noqa: E402
from validators.metrics import snr_db, top1_agreement  # noqa: E402

VARIANTS = {"int8": {"quantize": "int8"}, "int8-full": {"quantize": "int8-full"},
            "int8-full io": {"quantize": "int8-full", "int8_io": True}}


def cnn160() -> tuple[nn.Module, tuple]:
    """A 7-convolution CNN on [1, 3, 160, 160] images (BatchNorm with non-trivial statistics, ReLU)."""
    torch.manual_seed(0)

    def block(cin: int, cout: int) -> nn.Sequential:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, 2, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout), nn.ReLU())

    model = nn.Sequential(nn.Conv2d(3, 32, 3, 2, 1), nn.ReLU(), block(32, 64), block(64, 128), block(128, 256),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 10)).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 2.0)
    return model, (torch.rand(1, 3, 160, 160),)


def _like(args: tuple, g: torch.Generator) -> tuple:
    """New inputs shaped as ``args`` (token ids drawn below the largest sample id, images uniform / normal)."""
    out = []
    for a in args:
        if a.dtype in (torch.int32, torch.int64):
            out.append(torch.randint(0, int(a.max()) + 1, a.shape, generator=g, dtype=a.dtype))
        else:
            out.append(torch.rand(a.shape, generator=g) if a.min() >= 0 else torch.randn(a.shape, generator=g))
    return tuple(out)


def _ready(art: Any, args: tuple, threads: int) -> Interpreter:
    """An Interpreter of ``art``'s file with ``args`` set as its inputs (quantized where the file's are int8)."""
    it = Interpreter(model_content=art.to_bytes(), num_threads=threads)
    it.allocate_tensors()
    for d, a in zip(sorted(it.get_input_details(), key=lambda d: d["index"]), args):
        x = a.numpy()
        if x.ndim == 4 and art.channels_last_io:
            x = x.transpose(0, 2, 3, 1)
        scale, zero = d["quantization"]
        if d["dtype"] == np.int8 and scale:
            x = np.clip(np.rint(x / scale) + zero, -128, 127)
        it.set_tensor(d["index"], x.astype(d["dtype"]))
    return it


def _block(it: Interpreter, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        it.invoke()
    return time.perf_counter() - start


def paired(a: Interpreter, b: Interpreter, blocks: int, calls: int) -> float:
    """Median over blocks of time(b) / time(a), alternating the order."""
    for it in (a, b):
        _block(it, 3)
    ratios = []
    for i in range(blocks):
        if i % 2:
            tb, ta = _block(b, calls), _block(a, calls)
        else:
            ta, tb = _block(a, calls), _block(b, calls)
        ratios.append(tb / ta)
    return statistics.median(ratios)


def run(name: str, blocks: int, threads: int, n_cal: int) -> None:
    """Build and measure every variant of model ``name``; print one line each."""
    model, args = cnn160() if name == "cnn160" else getattr(zoo, name)()
    model.eval()
    g = torch.Generator().manual_seed(1)
    calibration = [_like(args, g) for _ in range(n_cal)]
    program = capture_program(model, args)
    fp32 = build(program, target="litert")
    arts = {v: build(program, target="litert", calibration=calibration, **o) if "full" in v
            else build(program, target="litert", **o) for v, o in VARIANTS.items()}
    test = _like(args, g)
    with torch.no_grad():
        want = model(*test)
    want = (want if isinstance(want, torch.Tensor) else want[0]).numpy()
    base = _ready(fp32, test, threads)
    start = time.perf_counter()
    _block(base, 3)
    calls = max(3, min(50, int(0.05 / max((time.perf_counter() - start) / 3, 1e-6))))
    control = paired(base, _ready(fp32, test, threads), blocks, calls)
    print(f"{name}: float32 {fp32.size:,} bytes; control (float32 vs itself) {control:.2f}")
    for v, art in arts.items():
        got = art(*test)
        got = (got if isinstance(got, torch.Tensor) else got[0]).numpy()
        top1 = top1_agreement(want, got)
        latency = paired(base, _ready(art, test, threads), blocks, calls)
        print(f"  {v:<13} size {art.size / fp32.size:.2f}x  latency {latency:.2f}x  SNR {snr_db(want, got):5.1f} dB  "
              f"top-1 {top1:.2f}")


def main() -> None:
    """Parse the arguments and print each model's table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default="cnn160,mobilenet,resnet,mingpt")
    p.add_argument("--blocks", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--calibration", type=int, default=8, help="random calibration input sets")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    print(f"sizes and latencies relative to float32 (XNNPACK, {a.threads} threads; median of {a.blocks} paired blocks)")
    for name in a.models.split(","):
        run(name.strip(), a.blocks, a.threads, a.calibration)


if __name__ == "__main__":
    main()
