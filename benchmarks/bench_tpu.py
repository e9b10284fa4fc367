"""Latency of the "tpu" target against PyTorch eager, torch.compile (inductor) and torchax.

All contenders run in one process on the same models and inputs, torch tensors in
and out (host↔device copies included on every side that has them). Timing follows
/work/shared/PEERS.md: torch threads fixed (2), a warm-up, then rounds of
alternating blocks (A B C D, D C B A, …) and, per peer, the median over rounds of
the per-round ratio tpu / peer. A ratio < 1 means the tpu target is faster. Each
peer's outputs are checked against eager first; a mismatch is printed as a note.

    python benchmarks/bench_tpu.py --quick            # ~2 CPU-minutes on 2 cores
    python benchmarks/bench_tpu.py --models mlp,vit --rounds 21

Compile times: "tpu conv s" is capture + passes + lowering, "tpu jit s" the XLA
compile of the first call; inductor's is until its first result (cold the first
time; inductor's FX graph cache under /tmp/torchinductor_$USER makes reruns warm).

torchax (0.0.13) is optional: install it in a separate benchmark environment
(``pip install torchax==0.0.13``); when it is missing the script prints
"torchax: not installed". It needs two shims on torch 2.13 next to tpu_runtime,
both scoped to torchax (see :func:`import_torchax`), and runs as
``torchax.extract_jax`` + ``jax.jit``. JAX on CPU sizes its own thread pool from
the CPU count.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import re
import statistics
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from converter import convert  # noqa: E402
from examples.models import FAMILIES  # noqa: E402

DEFAULT_MODELS = ("mlp", "cnn", "resnet", "vit", "mingpt", "llama")
THREADS = 2


@dataclass
class Contender:
    """One way of running a model: a no-argument call returning torch outputs."""

    name: str
    call: Callable[[], Any] | None = None
    compile_s: float | None = None  # conversion / compilation until the first result
    per_call: list[float] = field(default_factory=list)  # seconds, one per round
    calls_per_block: int = 1
    jit_s: float = 0.0  # tpu only: XLA compile seconds inside compile_s


def _flat(out: Any) -> list[torch.Tensor]:
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def _rel_error(got: Any, expected: Any) -> float:
    """max |a-b| / max(max |b|, 1e-6) over all outputs (float outputs only)."""
    worst = 0.0
    for a, b in zip(_flat(got), _flat(expected)):
        if b.dtype.is_floating_point and b.numel():
            a, b = a.detach().double(), b.detach().double()
            worst = max(worst, (a - b).abs().max().item() / max(b.abs().max().item(), 1e-6))
    return worst


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:160]


# --------------------------------------------------------------------------- contenders


def make_eager(model: torch.nn.Module, args: tuple) -> Contender:
    def call():
        with torch.no_grad():
            return model(*args)

    start = time.perf_counter()
    call()
    return Contender("eager", call, time.perf_counter() - start)


def make_compile(model: torch.nn.Module, args: tuple) -> Contender:
    compiled = torch.compile(copy.deepcopy(model), backend="inductor")

    def call():
        with torch.no_grad():
            return compiled(*args)

    start = time.perf_counter()
    call()
    return Contender("compile", call, time.perf_counter() - start)


def make_tpu(model: torch.nn.Module, args: tuple) -> Contender:
    start = time.perf_counter()
    module = convert(model, args, target="tpu")
    module(*args)
    return Contender("tpu", lambda: module(*args), time.perf_counter() - start,
                     jit_s=module.stats.compile_seconds)


def import_torchax() -> tuple[Any, str | None]:
    """Import torchax 0.0.13 next to torch 2.13 and tpu_runtime; return (torchax, note).

    Raises:
        ImportError: torchax is not installed.

    Two incompatibilities are bridged here, both scoped to torchax:

    * torchax references named-dim overloads (``aten.prod.dim_Dimname``, …) that torch
      2.13 dropped, and attribute access on the op packet raises at import. The
      overloads named in its sources are given inert placeholders where missing
      (torchax only uses them as dict keys and in decomposition lists).
    * torchax renames PrivateUse1 to "jax" at import, but ``convert(target="tpu")``
      has already renamed it to "tpu" (tpu_runtime), and it can be renamed only once
      per process. The rename is skipped for the duration of the import, and torchax
      tensors report device "meta" (which torchax's factory dispatch treats as its
      own) instead of the unparsable "jax:0". Models are then run through
      ``torchax.extract_jax`` + ``jax.jit``, which needs no "jax" device.
    """
    spec = importlib.util.find_spec("torchax")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchax: not installed")
    root = Path(list(spec.submodule_search_locations)[0])
    for source in root.rglob("*.py"):
        for packet_name, overload in set(re.findall(r"torch\.ops\.aten\.(\w+)\.(\w+)", source.read_text())):
            packet = getattr(torch.ops.aten, packet_name, None)
            if packet is None:
                continue
            try:
                getattr(packet, overload)
            except AttributeError:
                setattr(packet, overload, object())
    backend = torch._C._get_privateuse1_backend_name()
    shim = backend not in ("privateuseone", "jax")
    saved = torch.utils.rename_privateuse1_backend, torch._register_device_module
    if shim:
        torch.utils.rename_privateuse1_backend = lambda name: None
        torch._register_device_module = lambda name, module: None
    try:
        import torchax
        import torchax.tensor
    finally:
        torch.utils.rename_privateuse1_backend, torch._register_device_module = saved
    if not shim:
        return torchax, None
    torchax.tensor.Tensor.device = property(lambda self: torch.device("meta"))
    return torchax, (f"torchax: PrivateUse1 is already {backend!r} (tpu_runtime), so torchax runs without its "
                     f"'jax' device (extract_jax + jax.jit, tensors on 'meta')")


def make_torchax(torchax: Any, model: torch.nn.Module, args: tuple) -> Contender:
    """torchax's functional export of the module (``extract_jax``) under ``jax.jit``;
    torch tensors in and out through numpy, as the tpu target does."""
    import jax
    import numpy as np

    start = time.perf_counter()
    states, fn = torchax.extract_jax(copy.deepcopy(model))
    jitted = jax.jit(fn)

    def call():
        out = jitted(states, tuple(jax.device_put(a.numpy()) for a in args))
        return torch.utils._pytree.tree_map(lambda o: torch.from_numpy(np.array(o)), out)

    call()
    return Contender("torchax", call, time.perf_counter() - start)


def warm_up_toolchains(with_inductor: bool) -> None:
    """Pay one-off import and first-use costs (torch.export, XLA, Dynamo/inductor) on a
    throwaway model, so the first benchmarked model's compile times are not inflated."""
    model, x = torch.nn.Linear(4, 4).eval(), torch.randn(2, 4)
    try:
        convert(model, (x,), target="tpu")(x)
    except Exception:  # the same failure is reported per model later
        pass
    if with_inductor:
        try:
            with torch.no_grad():
                torch.compile(copy.deepcopy(model), backend="inductor")(x)
        except Exception:  # reported per model later
            pass


# --------------------------------------------------------------------------- timing


def _time_block(fn: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def measure(contenders: list[Contender], rounds: int, block_s: float, warmup: int) -> None:
    """Warm up, size blocks to ~``block_s`` each, then time alternating blocks."""
    for c in contenders:
        for _ in range(warmup):
            c.call()
        single = _time_block(c.call, 3)
        c.calls_per_block = max(1, min(2000, round(block_s / max(single, 1e-7))))
    for r in range(rounds):
        order = contenders if r % 2 == 0 else contenders[::-1]
        for c in order:
            c.per_call.append(_time_block(c.call, c.calls_per_block))


def median_ratio(a: Contender, b: Contender) -> float:
    """Median over rounds of a's per-call time / b's in the same round."""
    return statistics.median(x / y for x, y in zip(a.per_call, b.per_call))


# --------------------------------------------------------------------------- main


@dataclass
class ModelRun:
    """One model's inputs, reference outputs, contenders and result row."""

    name: str
    model: torch.nn.Module
    args: tuple
    expected: Any
    contenders: list[Contender]
    row: dict


def prepare(name: str, with_inductor: bool) -> ModelRun:
    """Build eager, tpu and (optionally) inductor contenders for one model."""
    model, args = FAMILIES[name]()
    row: dict[str, Any] = {"model": name, "notes": []}
    eager = make_eager(model, args)
    run = ModelRun(name, model, args, eager.call(), [], row)
    try:
        tpu = make_tpu(model, args)
    except Exception as e:  # report (UnsupportedOpError, LoweringError, …) and go on to the next model
        row["notes"].append(f"tpu: {_one_line(e)}")
        return run
    row["tpu_err"] = _rel_error(tpu.call(), run.expected)
    row["tpu_convert_s"] = tpu.compile_s - tpu.jit_s
    row["tpu_jit_s"] = tpu.jit_s
    run.contenders = [tpu, eager]
    if with_inductor:
        try:
            run.contenders.append(make_compile(model, args))
        except Exception as e:  # inductor failures are a peer's result, not ours
            row["notes"].append(f"compile: {_one_line(e)}")
    return run


def add_torchax(run: ModelRun, torchax: Any) -> None:
    """Add the torchax contender (after every inductor compile: see main())."""
    if not run.contenders:
        return
    try:
        run.contenders.append(make_torchax(torchax, run.model, run.args))
    except Exception as e:  # torchax may not support an op; report it
        run.row["notes"].append(f"torchax: {_one_line(e)}")


def finish(run: ModelRun, args_ns: argparse.Namespace) -> dict:
    """Check the peers' outputs, time all contenders, fill the row."""
    row = run.row
    if not run.contenders:
        return row
    tpu, eager = run.contenders[:2]
    for c in run.contenders[2:]:
        row[f"{c.name}_s"] = c.compile_s
        err = _rel_error(c.call(), run.expected)
        if err > 1e-3:
            row["notes"].append(f"{c.name}: max rel error {err:.2g} vs eager")
    measure(run.contenders, args_ns.rounds, args_ns.block_ms / 1000, args_ns.warmup)
    row["eager_ms"] = statistics.median(eager.per_call) * 1e3
    row["tpu_ms"] = statistics.median(tpu.per_call) * 1e3
    noisy = []
    for c in run.contenders[1:]:
        row[f"tpu/{c.name}"] = median_ratio(tpu, c)
        ratios = [x / y for x, y in zip(tpu.per_call, c.per_call)]
        if max(ratios) > 1.5 * min(ratios):
            noisy.append(f"tpu/{c.name} {min(ratios):.2f}–{max(ratios):.2f}")
    if noisy:
        row["notes"].append("noisy, per-round ratios ranged " + ", ".join(noisy))
    return row


def _fmt(v: Any, spec: str) -> str:
    width = int(re.match(r"\d*", spec).group() or 0)
    return "—".rjust(width) if v is None else format(v, spec)


def print_table(rows: list[dict], torchax_note: str | None) -> None:
    head = (f"{'model':8s} {'eager ms':>9s} {'tpu ms':>8s} {'tpu/eager':>9s} {'tpu/compile':>11s} "
            f"{'tpu/torchax':>11s} | {'tpu conv s':>10s} {'tpu jit s':>9s} {'inductor s':>10s} "
            f"{'torchax s':>9s} {'tpu err':>8s}")
    print(head)
    print("-" * len(head))
    for r in rows:
        print(f"{r['model']:8s} {_fmt(r.get('eager_ms'), '9.3f')} {_fmt(r.get('tpu_ms'), '8.3f')} "
              f"{_fmt(r.get('tpu/eager'), '9.2f')} {_fmt(r.get('tpu/compile'), '11.2f')} "
              f"{_fmt(r.get('tpu/torchax'), '11.2f')} | {_fmt(r.get('tpu_convert_s'), '10.2f')} "
              f"{_fmt(r.get('tpu_jit_s'), '9.2f')} {_fmt(r.get('compile_s'), '10.2f')} "
              f"{_fmt(r.get('torchax_s'), '9.2f')} {_fmt(r.get('tpu_err'), '8.1e')}")
    notes = [f"  {r['model']}: {n}" for r in rows for n in r["notes"]]
    if torchax_note:
        notes.insert(0, f"  {torchax_note}")
    if notes:
        print("notes:")
        print("\n".join(notes))
    print("ratios: median over rounds of per-round tpu time / peer time (< 1: tpu faster). "
          "ms: median per-call time. conv s: capture+lower+build; jit s: XLA compile of the first call; "
          "inductor/torchax s: until the first result.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="fewer, shorter rounds (~3 minutes on 2 cores)")
    p.add_argument("--models", default=",".join(DEFAULT_MODELS), help=f"comma list of {', '.join(FAMILIES)}")
    p.add_argument("--rounds", type=int, default=None, help="alternating rounds (default 15, quick 5)")
    p.add_argument("--block-ms", type=float, default=None, help="target block length (default 50, quick 15)")
    p.add_argument("--warmup", type=int, default=5, help="warm-up calls per contender")
    p.add_argument("--threads", type=int, default=THREADS, help=f"torch intra-op threads (default {THREADS})")
    p.add_argument("--no-inductor", action="store_true", help="skip torch.compile")
    p.add_argument("--no-torchax", action="store_true", help="skip torchax")
    a = p.parse_args(argv)
    a.rounds = a.rounds or (5 if a.quick else 15)
    a.block_ms = a.block_ms or (15.0 if a.quick else 50.0)
    models = [m.strip() for m in a.models.split(",") if m.strip()]
    unknown = [m for m in models if m not in FAMILIES]
    if unknown:
        print(f"error: unknown model(s) {', '.join(unknown)}; choose from {', '.join(FAMILIES)}", file=sys.stderr)
        return 2

    torch.set_num_threads(a.threads)
    warnings.filterwarnings("ignore")
    print(f"torch {torch.__version__}, threads={torch.get_num_threads()}, rounds={a.rounds}, "
          f"block={a.block_ms:g} ms, models={','.join(models)}")
    start = time.perf_counter()
    warm_up_toolchains(with_inductor=not a.no_inductor)
    print(f"  toolchains warmed up in {time.perf_counter() - start:.1f} s", flush=True)
    runs = []
    for name in models:
        t0 = time.perf_counter()
        runs.append(prepare(name, with_inductor=not a.no_inductor))
        print(f"  {name}: converted/compiled in {time.perf_counter() - t0:.1f} s", flush=True)
    # Where torchax gets to rename PrivateUse1 to "jax" (no tpu_runtime in the process),
    # Dynamo can no longer compile anything ("PyTorch is not linked with support for jax
    # devices"); functions compiled before keep working. So torchax comes after inductor.
    torchax, torchax_note = None, None
    if a.no_torchax:
        torchax_note = "torchax: skipped (--no-torchax)"
    else:
        try:
            torchax, torchax_note = import_torchax()
        except ImportError as e:
            torchax_note = "torchax: not installed" if "not installed" in str(e) else f"torchax: {_one_line(e)}"
        except Exception as e:  # an import-time incompatibility is a result to report
            torchax_note = f"torchax: not importable ({_one_line(e)})"
    if torchax_note:
        print(torchax_note)
    rows = []
    for run in runs:
        t0 = time.perf_counter()
        if torchax is not None:
            add_torchax(run, torchax)
        rows.append(finish(run, a))
        print(f"  {run.name}: timed in {time.perf_counter() - t0:.1f} s", flush=True)
    print()
    print_table(rows, torchax_note)
    print(f"total {time.perf_counter() - start:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
