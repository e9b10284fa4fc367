"""Train an MLP, a small CNN and a minGPT on the ``tpu`` device and check the loss curves.

Each model trains for ``--steps`` AdamW steps (default 20) on fixed synthetic
batches: on CPU with plain PyTorch (the reference), on the tpu device in each
eager mode (strict, debug, fused), with ``torch.compile(model, backend="tpu")`` on
CPU tensors (``compile``) and on a ``model.to("tpu")`` with tpu inputs
(``compile-tpu``: the compiled graphs run on the device arrays, the optimizer
steps eagerly on the tpu parameters). Every curve must match the CPU curve
within ``--rtol``; the script prints one row per run and exits non-zero on a
mismatch::

    python examples/train.py                       # 3 models x 6 runs x 20 steps
    python examples/train.py --models mlp --steps 3 --runs cpu,strict,fused

Dropout layers are set to p=0 for the comparison (JAX's PRNG draws other masks
than torch's CPU generator by design); ``--dropout`` keeps them and then only
checks that two identically seeded device runs agree.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

import tpu_runtime  # noqa: E402
from examples.models import MLP, MinGPT, SmallCNN  # noqa: E402

RUNS = ("cpu", "strict", "debug", "fused", "compile", "compile-tpu")


@dataclass
class Task:
    """A model factory, fixed batches and a loss."""

    name: str
    make: Callable[[], nn.Module]
    batches: list[tuple[torch.Tensor, torch.Tensor]]
    loss: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def make_task(name: str, batch: int = 4, n_batches: int = 4) -> Task:
    """The training task of one model family (``mlp``, ``cnn`` or ``mingpt``)."""
    g = torch.Generator().manual_seed(1234)
    if name == "mlp":
        data = [(torch.randn(batch, 16, generator=g), torch.randn(batch, 8, generator=g)) for _ in range(n_batches)]
        return Task(name, MLP, data, F.mse_loss)
    if name == "cnn":
        data = [(torch.randn(batch, 3, 16, 16, generator=g), torch.randint(0, 10, (batch,), generator=g))
                for _ in range(n_batches)]
        return Task(name, SmallCNN, data, F.cross_entropy)
    if name == "mingpt":
        def lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
            return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))

        seqs = [torch.randint(0, 64, (batch, 9), generator=g) for _ in range(n_batches)]
        return Task(name, MinGPT, [(s[:, :-1], s[:, 1:]) for s in seqs], lm_loss)
    raise ValueError(f"unknown model {name!r}; choose mlp, cnn or mingpt")


def _model(task: Task, dropout: bool) -> nn.Module:
    torch.manual_seed(0)
    model = task.make().train()
    if not dropout:
        for m in model.modules():
            if isinstance(m, nn.Dropout):
                m.p = 0.0
    return model


def train(task: Task, run: str, steps: int, *, dropout: bool = False, lr: float = 1e-2, seed: int = 0) -> list[float]:
    """Train ``task``'s model for ``steps`` AdamW steps; return the loss of every step.

    Args:
        task: from :func:`make_task`.
        run: ``cpu``, ``strict``, ``debug``, ``fused`` (tpu device), ``compile``
            (``torch.compile(backend="tpu")`` on CPU tensors) or ``compile-tpu`` (the
            same on tpu tensors).
        steps: optimizer steps.
        dropout: keep dropout layers active.
        lr: AdamW learning rate.
        seed: ``torch.manual_seed`` before training (dropout masks).
    """
    if run not in RUNS:
        raise ValueError(f"unknown run {run!r}; choose from {', '.join(RUNS)}")
    model = _model(task, dropout)
    on_device = run in ("strict", "debug", "fused")
    device = "tpu" if on_device or run == "compile-tpu" else "cpu"
    model = model.to(device)
    forward = torch.compile(model, backend="tpu") if run.startswith("compile") else model
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    batches = [(x.to(device), y.to(device)) for x, y in task.batches]
    torch.manual_seed(seed)
    losses = []
    mode = tpu_runtime.set_eager_mode(run) if on_device else None
    try:
        for step in range(steps):
            x, y = batches[step % len(batches)]
            loss = task.loss(forward(x), y)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            losses.append(loss.item())  # a sync point in fused mode: one graph per step
    finally:
        if mode is not None:
            mode.__exit__()
    return losses


def max_rel_diff(a: list[float], b: list[float]) -> float:
    """Largest ``|a - b| / max(|b|, 1e-6)`` over the two curves."""
    return max(abs(x - y) / max(abs(y), 1e-6) for x, y in zip(a, b))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,cnn,mingpt")
    p.add_argument("--runs", default=",".join(RUNS))
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--rtol", type=float, default=1e-3)
    p.add_argument("--dropout", action="store_true", help="keep dropout; compare two seeded device runs instead")
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    ok = True
    for name in args.models.split(","):
        task = make_task(name)
        runs = args.runs.split(",")
        ref = train(task, "cpu", args.steps, dropout=args.dropout)
        for run in runs:
            start = time.perf_counter()
            curve = ref if run == "cpu" else train(task, run, args.steps, dropout=args.dropout)
            if args.dropout and run != "cpu":
                again = train(task, run, args.steps, dropout=True)
                diff, what = max_rel_diff(curve, again), "vs same seed"
            else:
                diff, what = max_rel_diff(curve, ref), "vs cpu"
            good = diff <= args.rtol
            ok &= good
            print(f"{name:7s} {run:11s} loss {curve[0]:.4f} -> {curve[-1]:.4f}  max rel diff {what} {diff:.2e} "
                  f"{'ok' if good else 'MISMATCH'}  ({time.perf_counter() - start:.1f}s)", flush=True)
    stats = tpu_runtime.cache_stats()
    print(f"compile cache: {stats.requests} requests, {stats.hits} hits, {stats.misses} misses "
          f"({stats.disk_hits} from disk), {stats.compile_seconds:.1f}s compiling")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
