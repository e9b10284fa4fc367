"""LiteRT export: tpu-export vs litert-torch on the same models, in one process.

For every model of ``examples/models.py`` (or ``--models a,b``) both converters run
on the same eval-mode module and sample inputs; the script prints, per model, the
ratios ours / litert-torch of

* conversion time (PyTorch module → .tflite bytes, both warmed up on another model; the
  fastest of ``--convert-runs`` conversions of each side, since noise only adds time),
* file size,
* interpreter latency: both files loaded in ``ai_edge_litert`` Interpreters (XNNPACK,
  2 threads), called in alternating blocks (A B, B A, …) in this one process, the
  median of the per-block ratios (PEERS.md: the only timing that survives a noisy
  2-core machine; identical files come out at 1.00–1.01),

and each side's max relative error against PyTorch fp32. Ratios < 1 favour us. The
``control`` column times our file against a second Interpreter of the same file, before
and after the latency pair (the worse of the two is shown); when it is more than 3% from
1.00 the machine was disturbed and the model is measured again (``--retries``, default
2). A control still off after that means the latency column is noise (on a loaded 2-core
box try ``--threads 1``).

litert-torch is optional (install it in a separate venv, PEERS.md); without it the
script says so and reports our numbers alone.

    python benchmarks/bench_litert.py [--models cnn,mobilenet | all] [--blocks 20] [--threads 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any, Callable

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ai_edge_litert.interpreter import Interpreter  # noqa: E402

from converter.api import convert  # noqa: E402
from examples.models import FAMILIES  # noqa: E402

THREADS = 2
NOISY = 0.03  # a control (our file against itself) further than this from 1.00: the machine was disturbed
DEFAULT_MODELS = "mlp,cnn,mobilenet,resnet,unet,vit,transformer_encoder,mingpt,lstm"


def peer_converter() -> Callable[[torch.nn.Module, tuple], bytes] | None:
    """litert-torch's converter as ``(model, args) -> bytes``, or ``None`` if not installed."""
    try:
        import litert_torch  # noqa: F401
    except ImportError:
        return None

    # litert-torch prints progress to stdout/stderr; keep the table readable. The sink stays
    # open: logging handlers created during a conversion keep writing to it afterwards.
    null = open(os.devnull, "w")

    def run(model: torch.nn.Module, args: tuple) -> bytes:
        with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
            edge = litert_torch.convert(model, args)
            with tempfile.TemporaryDirectory() as d:
                path = os.path.join(d, "m.tflite")
                edge.export(path)
                with open(path, "rb") as f:
                    return f.read()

    return run


def ours(model: torch.nn.Module, args: tuple) -> bytes:
    """tpu-export's converter as ``(model, args) -> bytes``."""
    return convert(model, args, target="litert").to_bytes()


class Runner:
    """One .tflite file in an Interpreter (XNNPACK, fixed threads), fed by position."""

    def __init__(self, data: bytes, args: tuple):
        self.interp = Interpreter(model_content=data, num_threads=THREADS)
        sigs = self.interp.get_signature_list()
        key = "serving_default" if "serving_default" in sigs else next(iter(sigs))
        self.runner = self.interp.get_signature_runner(key)
        details = self.runner.get_input_details()
        names = sorted(details, key=_position)
        arrays = [a.detach().numpy() for a in args if isinstance(a, torch.Tensor)]
        self.feed = {n: np.ascontiguousarray(a.astype(details[n]["dtype"])) for n, a in zip(names, arrays)}

    def __call__(self) -> list[np.ndarray]:
        out = self.runner(**self.feed)
        return [out[k] for k in sorted(out, key=_position)]

    def block(self, n: int) -> float:
        t0 = time.perf_counter()
        for _ in range(n):
            self.runner(**self.feed)
        return time.perf_counter() - t0


def _position(name: str) -> tuple:
    head, _, tail = name.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (name, 0)


def max_rel_error(got: list[np.ndarray], model: torch.nn.Module, args: tuple) -> float:
    """Max over outputs of max|got - torch| / max|torch| (float outputs)."""
    with torch.no_grad():
        want = [t.numpy() for t in torch.utils._pytree.tree_leaves(model(*args)) if isinstance(t, torch.Tensor)]
    errs = []
    for g, w in zip(got, want):
        if w.dtype.kind != "f" or g.shape != w.shape:
            errs.append(0.0 if g.shape == w.shape and np.array_equal(g, w) else float("inf"))
            continue
        errs.append(float(np.max(np.abs(g.astype(np.float64) - w))) / max(float(np.max(np.abs(w))), 1e-6))
    return max(errs) if errs else float("nan")


def paired_latency_ratio(a: Runner, b: Runner, blocks: int) -> float:
    """Median of per-block time ratios a/b over alternating blocks (A B, B A, …)."""
    for r in (a, b):  # warm up and size the block to ~20 ms
        r.block(3)
    n = max(1, int(0.02 / max(min(a.block(3), b.block(3)) / 3, 1e-6)))
    ratios = []
    for i in range(blocks):
        if i % 2 == 0:
            ta, tb = a.block(n), b.block(n)
        else:
            tb, ta = b.block(n), a.block(n)
        ratios.append(ta / tb)
    return statistics.median(ratios)


def timed(fn: Callable, *args: Any, runs: int = 1) -> tuple[Any, float, str | None]:
    """``(result, fastest of runs seconds, error)``; a failing call is not repeated."""
    best, out = float("inf"), None
    for _ in range(runs):
        t0 = time.perf_counter()
        try:
            out = fn(*args)
        except Exception as e:  # report the peer's failure and keep going
            return None, time.perf_counter() - t0, f"{type(e).__name__}: {str(e).strip().splitlines()[0][:120]}"
        best = min(best, time.perf_counter() - t0)
    return out, best, None


def main() -> None:
    global THREADS
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default=DEFAULT_MODELS,
                        help="comma-separated examples/models.py families, or 'all'")
    parser.add_argument("--blocks", type=int, default=20, help="alternating timing blocks per model")
    parser.add_argument("--threads", type=int, default=THREADS, help="Interpreter and torch threads")
    parser.add_argument("--convert-runs", type=int, default=2,
                        help="conversions per model and converter; the fastest is reported (noise only adds time)")
    parser.add_argument("--retries", type=int, default=2,
                        help=f"measure a model's latency again when a control is off by more than {NOISY * 100:.0f}%%")
    parser.add_argument("--json", help="also write the results as JSON here")
    opts = parser.parse_args()
    THREADS = opts.threads
    torch.set_num_threads(THREADS)
    peer = peer_converter()
    if peer is None:
        print("litert-torch is missing (pip install litert-torch==0.10.0 in a separate venv); "
              "reporting tpu-export alone")
    warm_model, warm_args = FAMILIES["mlp"]()
    for fn in (ours, peer):
        if fn is not None:
            timed(fn, warm_model, warm_args)
    rows = []
    header = (f"{'model':<20} {'convert ours/peer':>18} {'size ours/peer':>15} {'latency ours/peer':>18} "
              f"{'control':>8} {'err ours':>9} {'err peer':>9}")
    print(header)
    print("-" * len(header))
    names = list(FAMILIES) if opts.models == "all" else [m for m in opts.models.split(",") if m]
    for name in names:
        model, args = FAMILIES[name]()
        mine, t_mine, err_mine = timed(ours, model, args, runs=opts.convert_runs)
        row: dict[str, Any] = {"model": name, "ours_convert_s": t_mine, "ours_error": err_mine}
        if mine is None:
            print(f"{name:<20} ours failed: {err_mine}")
            rows.append(row)
            continue
        a = Runner(mine, args)
        row.update(ours_bytes=len(mine), ours_rel_err=max_rel_error(a(), model, args))
        theirs, t_peer, err_peer = timed(peer, model, args, runs=opts.convert_runs) if peer else \
            (None, 0.0, "not installed")
        row.update(peer_convert_s=t_peer, peer_error=err_peer)
        b = None
        if theirs is not None:
            try:
                b = Runner(theirs, args)
                row.update(peer_bytes=len(theirs), peer_rel_err=max_rel_error(b(), model, args))
            except Exception as e:  # e.g. an op the interpreter refuses (STABLEHLO_SORT)
                row["peer_error"] = f"interpreter: {str(e).strip().splitlines()[0][:120]}"
                b = None
        for attempt in range(opts.retries + 1):  # again while a control says the machine was disturbed
            before = paired_latency_ratio(a, Runner(mine, args), opts.blocks)
            if b is not None:
                row["latency_ratio"] = paired_latency_ratio(a, b, opts.blocks)
            after = paired_latency_ratio(a, Runner(mine, args), opts.blocks)
            row["control_ratio"] = max(before, after, key=lambda c: abs(c - 1))
            row["attempts"] = attempt + 1
            if abs(row["control_ratio"] - 1) <= NOISY:
                break
        if b is not None:
            print(f"{name:<20} {t_mine / t_peer:>18.2f} {len(mine) / len(theirs):>15.2f} "
                  f"{row['latency_ratio']:>18.2f} {row['control_ratio']:>8.2f} {row['ours_rel_err']:>9.1e} "
                  f"{row['peer_rel_err']:>9.1e}")
        else:
            print(f"{name:<20} {'-':>18} {'-':>15} {'-':>18} {row['control_ratio']:>8.2f} "
                  f"{row['ours_rel_err']:>9.1e} {'-':>9}  (ours {t_mine:.2f}s, {len(mine)} B; peer: {row['peer_error']})")
        rows.append(row)
    ratios = [r["latency_ratio"] for r in rows if "latency_ratio" in r]
    if ratios:
        conv = [r["ours_convert_s"] / r["peer_convert_s"] for r in rows if "latency_ratio" in r]
        size = [r["ours_bytes"] / r["peer_bytes"] for r in rows if "latency_ratio" in r]
        print("-" * len(header))
        print(f"{'median':<20} {statistics.median(conv):>18.2f} {statistics.median(size):>15.2f} "
              f"{statistics.median(ratios):>18.2f}")
        print(f"{'geometric mean':<20} {statistics.geometric_mean(conv):>18.2f} "
              f"{statistics.geometric_mean(size):>15.2f} {statistics.geometric_mean(ratios):>18.2f}")
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(rows, f, indent=2)


if __name__ == "__main__":
    main()
