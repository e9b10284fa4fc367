"""Recurrent layers over long sequences: one loop per layer (ours) vs the time loop unrolled, side by side.

litert-torch unrolls ``nn.LSTM``/``nn.GRU`` (PEERS.md), and so did this exporter up to 64 steps; past
:data:`converter.lowering.ops.rnn_layers.MAX_UNROLLED_STEPS` the time loop is now a ``lax.scan``, exported as one
ONNX ``Loop`` / LiteRT ``WHILE``. For a 2-layer LSTM of each ``--sizes`` (input x hidden; batch 1: 80 x 256 is a
speech model's log-mel frames) at each ``--steps`` length this converts the model both ways in one process (the
unrolled side by raising the limit) and prints, per target, the ratios loop / unrolled of

* conversion time (PyTorch module → file bytes; the fastest of ``--convert-runs``: noise only adds time),
* op count (loop bodies included) and file size,
* latency: both files loaded side by side (LiteRT Interpreter / ONNX Runtime, 2 threads), called in
  alternating blocks (A B, B A, …), the median of the per-block ratios (PEERS.md),

and each side's max error against PyTorch. Ratios < 1 favour the loop.

    python benchmarks/bench_loops.py                       # 32x64 and 80x256; 100 and 500 steps; litert and onnx
    python benchmarks/bench_loops.py --sizes 80x256 --steps 200 --targets litert --blocks 9
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from converter.api import convert  # noqa: E402
from converter.lowering.ops import rnn_layers  # noqa: E402

THREADS = 2


def _convert(model: torch.nn.Module, x: torch.Tensor, target: str, unrolled: bool, runs: int) -> tuple[Any, float]:
    """``(artifact, fastest conversion seconds)`` with the time loop as a loop or unrolled."""
    limit = rnn_layers.MAX_UNROLLED_STEPS
    rnn_layers.MAX_UNROLLED_STEPS = 10**9 if unrolled else limit
    try:
        best, art = float("inf"), None
        for _ in range(runs):
            start = time.perf_counter()
            art = convert(model, (x,), target=target)
            best = min(best, time.perf_counter() - start)
        return art, best
    finally:
        rnn_layers.MAX_UNROLLED_STEPS = limit


def _block(art: Any, x: np.ndarray, n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        art.run_raw(x)
    return time.perf_counter() - start


def paired_latency_ratio(a: Any, b: Any, x: np.ndarray, blocks: int) -> float:
    """Median of per-block time ratios a/b over alternating blocks (A B, B A, …), blocks of ~20 ms."""
    for art in (a, b):
        _block(art, x, 3)
    n = max(1, int(0.02 / max(min(_block(a, x, 3), _block(b, x, 3)) / 3, 1e-6)))
    ratios = []
    for i in range(blocks):
        ta, tb = (_block(a, x, n), _block(b, x, n)) if i % 2 == 0 else reversed((_block(b, x, n), _block(a, x, n)))
        ratios.append(ta / tb)
    return statistics.median(ratios)


def main() -> None:
    """Run the comparison and print one line per (steps, target)."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="32x64,80x256", help="LSTM input x hidden sizes")
    parser.add_argument("--steps", default="100,500", help="sequence lengths")
    parser.add_argument("--targets", default="litert,onnx")
    parser.add_argument("--blocks", type=int, default=11, help="alternating latency blocks")
    parser.add_argument("--convert-runs", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    print("2-layer LSTMs, batch 1; ratios loop / unrolled (< 1 favours the loop)")
    for size in args.sizes.split(","):
        d_in, hidden = (int(v) for v in size.split("x"))
        torch.manual_seed(0)
        model = torch.nn.LSTM(d_in, hidden, num_layers=2).eval()
        for steps in (int(s) for s in args.steps.split(",")):
            x = torch.randn(steps, 1, d_in)
            with torch.no_grad():
                want = model(x)[0].numpy()
            for target in args.targets.split(","):
                _compare(model, x, want, target, f"{size:>7s} {steps:4d} steps {target:6s}", args)


def _compare(model: torch.nn.Module, x: torch.Tensor, want: np.ndarray, target: str, label: str, args: Any) -> None:
    """Print one comparison line: ``model`` on ``x`` converted for ``target`` with a loop and unrolled."""
    loop, t_loop = _convert(model, x, target, False, args.convert_runs)
    flat, t_flat = _convert(model, x, target, True, args.convert_runs)
    errors = [float(np.abs(np.asarray(a(x)[0]) - want).max()) for a in (loop, flat)]
    ratio = paired_latency_ratio(loop, flat, x.numpy(), args.blocks)
    size = len(loop._bytes) / len(flat._bytes)
    print(f"  {label} convert {t_loop / t_flat:5.2f}x ({t_loop:5.1f} vs {t_flat:5.1f} s)  "
          f"ops {len(loop.op_list)} vs {len(flat.op_list)}  size {size:4.2f}x  latency {ratio:4.2f}x  "
          f"max error {errors[0]:.1e} / {errors[1]:.1e}")


if __name__ == "__main__":
    main()
