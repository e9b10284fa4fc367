"""Eager-mode speed of the ``tpu`` device, side by side in one process.

Three comparisons, each as paired alternating blocks (A B, B A, …) after a
warm-up, reporting the median over rounds of the per-round time ratio
(/work/shared/PEERS.md):

1. **fused vs strict eager** on a training step (forward, backward, AdamW step,
   ``loss.item()``) of each model: ``fused throughput / strict throughput``
   (target ≥ 2); with ``AdamW()`` (torch's default for the tpu device, as for any
   PrivateUse1 device: its foreach path, one op per foreach call) and, on more lines,
   ``AdamW(foreach=False)`` (the per-parameter loop: one op per parameter and update)
   and ``AdamW(fused=True)`` (one optimizer op per step); the paired measurement runs ``--repeats`` times (default
   3) and the median of those is printed with their range (this machine's speed drifts by ±15% within minutes:
   one paired run of 9 rounds read anywhere from 1.7x to 2.2x for the same code). Each side runs its timed blocks in its eager mode,
   entered once per block as a training loop runs in one mode (a mode switch is a sync point: switching
   around every step flushed a second fused graph per step that no training loop has). ``mlp`` and ``mingpt`` are
   ``examples/train.py``'s tiny models (per-op overhead dominates); ``mlp-wide`` is the
   same MLP 128 → 512 → 128 on a batch of 64, where the compute of each op counts too;
   ``mlp-large`` is 1024 → 2048 → 1024 on a batch of 8 (4.2M parameters), where the
   optimizer's elementwise passes over the parameters dominate (the work fusion is for);
   every timed block ends by waiting for the model's parameters and optimizer state (strict
   mode's last optimizer ops may still run after ``loss.item()``: they are paid for in their
   own block);
   then, per model, where a step's time goes (``--breakdown``, default on): the part spent
   in the runtime (inside ``__torch_dispatch__`` and in fused graph flushes) and the rest
   (torch's own autograd, module and optimizer code, the same in both modes), and the
   ceiling that rest puts on the ratio: ``strict step / fused rest`` is what fused/strict
   would be if the fused runtime cost nothing (strict and fused measured in alternating rounds, the median of each
   part: :func:`paired_breakdown`); the subclass floor (default and loop AdamW): the same step on
   tensors of a subclass whose ATen calls do no work (``subclass_floor.py``), ``strict time / floor time``
   bounding what any Python ``__torch_dispatch__`` runtime can reach, however little it records and runs;
   and for the MLPs the XLA floor: the same step written in JAX as one
   ``jax.jit`` (``xla_floor.py``, checked against PyTorch), ``strict time / floor time`` bounding what
   fused/strict can reach on this machine however cheap the runtime;
2. **per-op dispatch** of strict eager against torchax eager on a chain of small
   elementwise ops: ``tpu time / torchax time`` (target ≤ 0.5; skipped with a note
   when torchax is not importable);
3. **compiled vs PyTorch eager on CPU**: a ``torch.compile(backend="tpu")``
   training step against the same step in plain PyTorch on CPU: ``compiled time /
   PyTorch time``; first with the model and data on the CPU (each call moves the inputs to
   the device and the outputs back; the optimizer is PyTorch's own on the CPU), then as
   TorchTPU users write it: ``model.to("tpu")``, the compiled forward and backward on the
   device, the optimizer step in strict and in fused eager, and compiled (``torch.compile(opt.step)``);
4. **attention in eager**: ``F.scaled_dot_product_attention`` forward and backward on tpu tensors
   (B=4, L=64, H=4, E=16, causal, the heads split as models split them) as the one fused op the
   runtime runs against torch's math decomposition (``sdpa_kernel([SDPBackend.MATH])``), in strict
   and in fused eager: ``math time / fused-op time``;
5. **linear and matmul as one op** in eager: each model's training step with ``F.linear`` / ``torch.matmul``
   as one op forward and one backward (``tpu_runtime/whole_ops.py``) against torch's decomposition
   (``whole_ops.decomposed()``), in strict and in fused eager: ``decomposed time / whole time``.

    python benchmarks/bench_eager.py                   # mlp, mingpt, mlp-wide, mlp-large; 9 rounds
    python benchmarks/bench_eager.py --models mlp --rounds 5 --block 3

Absolute times are printed only as context; compare the ratios.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable, Iterator

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

import tpu_runtime  # noqa: E402
from benchmarks.subclass_floor import floor_training_step  # noqa: E402
from benchmarks.timing import alternating  # noqa: E402
from benchmarks.xla_floor import floor_step  # noqa: E402
from examples.models import MLP  # noqa: E402
from examples.train import Task, make_task  # noqa: E402

THREADS = 2


def paired(a: Callable[[], Any], b: Callable[[], Any], rounds: int, block: int) -> tuple[float, float, float]:
    """Median over rounds of time(a)/time(b), alternating A B / B A blocks; plus median seconds of each.

    A side's ``sync`` attribute, when it has one, ends each of its timed blocks (its device work is
    all done: work one side left in flight would otherwise be paid for in the other side's block); its
    ``mode`` attribute, the eager mode each of its blocks runs in (entered once per block, as a training
    loop runs in one mode: switching modes is a sync point)."""
    return alternating(a, b, rounds, block, around=_timed_block)


@contextlib.contextmanager
def _timed_block(fn: Callable[[], Any]) -> Iterator[None]:
    """What one of ``fn``'s timed blocks runs in (see :func:`paired`): its eager mode, its ``sync`` at the end."""
    with _mode_of(fn):
        yield
        done = getattr(fn, "sync", None)
        if done is not None:
            done()


def repeated(a: Callable[[], Any], b: Callable[[], Any], rounds: int, block: int,
             repeats: int) -> tuple[float, float, float, float, float]:
    """:func:`paired` run ``repeats`` times one after the other: the median of the repeats' ratios, the lowest and
    highest of them (how far this machine's drift moved the ratio while it was measured), and the median seconds of
    each side."""
    runs = [paired(a, b, rounds, block) for _ in range(max(1, repeats))]
    ratios = [r[0] for r in runs]
    return (statistics.median(ratios), min(ratios), max(ratios), statistics.median(r[1] for r in runs),
            statistics.median(r[2] for r in runs))


def _no_dropout(model: torch.nn.Module) -> torch.nn.Module:
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    return model


#: AdamW variants of part 1: torch's default (foreach on the tpu device), the per-parameter loop, fused.
_OPTIMIZERS = {"default": {}, "loop": {"foreach": False}, "fused": {"fused": True}}
#: The same AdamW variants on :mod:`benchmarks.subclass_floor`'s shadow tensors (meta device: torch's default there is
#: the per-parameter loop, so the tpu device's default, foreach, is asked for).
_SHADOW_OPTIMIZERS = {"default": {"foreach": True}, "loop": {"foreach": False}}


def _task(name: str) -> Task:
    """``examples/train.py``'s task ``name``; ``mlp-wide``: its MLP 128 → 512 → 128 on a batch of 64
    (~0.2M parameters: compute per op outweighs the per-op overhead the tiny models measure);
    ``mlp-large``: 1024 → 2048 → 1024 on a batch of 8 (4.2M parameters: the optimizer's elementwise
    passes over the parameters dominate, the work fusion is for)."""
    sizes = {"mlp-wide": (128, 512, 64), "mlp-large": (1024, 2048, 8)}.get(name)
    if sizes is None:
        return make_task(name)
    d, hidden, batch = sizes
    g = torch.Generator().manual_seed(1234)
    data = [(torch.randn(batch, d, generator=g), torch.randn(batch, d, generator=g))]
    return Task(name, lambda: MLP(d, hidden, d), data, torch.nn.functional.mse_loss)


def training_step(name: str, where: str, optimizer: str = "default") -> Callable[[], float]:
    """One AdamW step of ``name`` on ``where`` (``strict``/``fused`` tpu, ``compile``, ``cpu``;
    ``compile-strict``/``compile-fused``: the compiled model on the tpu device, the rest in that eager mode;
    ``compile-all``: the compiled model and a compiled ``opt.step`` on the tpu device);
    ``optimizer`` ``"loop"``/``"fused"`` builds ``AdamW(..., foreach=False)`` (one op per parameter
    and update) / ``AdamW(..., fused=True)`` (one optimizer op per step)."""
    task = _task(name)
    torch.manual_seed(0)
    model = _no_dropout(task.make().train())
    mode = where.removeprefix("compile-")
    device = "tpu" if mode in ("strict", "fused", "all") else "cpu"
    model = model.to(device)
    forward = torch.compile(model, backend="tpu") if where.startswith("compile") else model
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **_OPTIMIZERS[optimizer])
    update = torch.compile(opt.step, backend="tpu") if where == "compile-all" else opt.step
    x, y = (t.to(device) for t in task.batches[0])

    def step() -> float:
        loss = task.loss(forward(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        update()
        return loss.item()

    def sync() -> None:
        """Wait for the step's device work: the parameters' and optimizer state's last writes."""
        from tpu_runtime.values import ready_array

        state = [v for st in opt.state.values() for v in st.values() if isinstance(v, torch.Tensor)]
        arrays = {}  # (values a fused graph packed share one array: waited for once, not cut out)
        for t in [*model.parameters(), *state]:
            if t.device.type == "tpu":
                a = ready_array(t)
                arrays[id(a)] = a
        for a in arrays.values():
            a.block_until_ready()

    step.sync = sync
    if device == "tpu":
        step.mode = "strict" if mode == "all" else mode  # (each timed block runs in it: see paired)
    return step


def _mode_of(fn: Callable[..., Any]) -> Any:
    """The eager-mode context of ``fn``'s ``mode`` attribute (none: a context that does nothing), with
    ``tpu_runtime.whole_ops.decomposed()`` entered too where ``fn.decomposed`` is set."""
    mode = getattr(fn, "mode", None)
    stack = contextlib.ExitStack()
    if mode is not None:
        stack.enter_context(tpu_runtime.set_eager_mode(mode))
    if getattr(fn, "decomposed", False):
        from tpu_runtime.whole_ops import decomposed

        stack.enter_context(decomposed())
    return stack


class _RuntimeTimer:
    """Times the runtime's share of the calls made while it is installed: every ATen call on tpu
    tensors (``__torch_dispatch__``) and every fused graph flush, nested calls counted once."""

    def __init__(self) -> None:
        from tpu_runtime import tensor as tensor_module
        from tpu_runtime.eager.fused import GRAPH

        self.seconds, self._depth = 0.0, 0
        self._hook, self._dispatch = tensor_module._DISPATCH, tensor_module._DISPATCH[0]
        self._graph, self._flush = GRAPH, GRAPH.flush

    def _timed(self, fn: Callable[..., Any]) -> Callable[..., Any]:
        def run(*args: Any) -> Any:
            self._depth += 1
            start = time.perf_counter()
            try:
                return fn(*args)
            finally:
                self._depth -= 1
                if not self._depth:
                    self.seconds += time.perf_counter() - start
        return run

    def __enter__(self) -> "_RuntimeTimer":
        self._hook[0] = self._timed(self._dispatch)
        self._graph.flush = self._timed(self._flush)
        return self

    def __exit__(self, *exc: Any) -> None:
        self._hook[0] = self._dispatch
        del self._graph.flush  # the instance attribute shadowed the method


def breakdown(step: Callable[[], Any], steps: int,
              sync: Callable[[], Any] | None = None) -> tuple[float, float, float]:
    """Seconds per call of ``step``: in total, inside the runtime (see :class:`_RuntimeTimer`), and
    in the final ``sync`` (by default ``step.sync``, else ``torch.tpu.synchronize``: the wait for
    the device's pending work, the runtime's too)."""
    with _mode_of(step), _RuntimeTimer() as timer:
        start = time.perf_counter()
        for _ in range(steps):
            step()
        waited = time.perf_counter()
        (sync or getattr(step, "sync", None) or torch.tpu.synchronize)()
        end = time.perf_counter()
    return (end - start) / steps, timer.seconds / steps, (end - waited) / steps


def paired_breakdown(a: Callable[[], Any], b: Callable[[], Any], rounds: int,
                     steps: int) -> tuple[tuple[float, float, float], tuple[float, float, float]]:
    """:func:`breakdown` of ``a`` and of ``b``, alternating (A B, B A, …) over ``rounds`` of ``steps`` calls each;
    per side, the median of each part over the rounds (one run of each drifted with the machine's load: a side's
    runtime + rest could exceed its paired step time)."""
    parts: dict = {a: [], b: []}
    for r in range(rounds):
        for fn in ((a, b) if r % 2 == 0 else (b, a)):
            parts[fn].append(breakdown(fn, steps))
    return tuple(tuple(statistics.median(p[k] for p in parts[fn]) for k in range(3)) for fn in (a, b))


class _Null:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def attention_step(fused_op: bool, mode: str) -> Callable[[], None]:
    """One forward and backward of causal ``F.scaled_dot_product_attention`` on tpu tensors in ``mode``: the
    runtime's fused op (``fused_op``) or torch's math decomposition (``sdpa_kernel([SDPBackend.MATH])``)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    b, n, h, e = 4, 64, 4, 16
    x = torch.randn(b, n, 3 * h * e, generator=torch.Generator().manual_seed(0)).to("tpu").requires_grad_()

    def run() -> None:
        with sdpa_kernel([SDPBackend.OVERRIDEABLE if fused_op else SDPBackend.MATH]):
            q, k, v = (t.view(b, n, h, e).transpose(1, 2) for t in x.split(h * e, dim=-1))
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            out.transpose(1, 2).reshape(b, n, h * e).sum().backward()
        x.grad = None

    run.mode = mode
    run.sync = lambda: tpu_runtime.sync()
    return run


def op_chain(n: int = 100) -> Callable[[], Any]:
    """``n`` times ``y = y * 0.5 + x`` (``2n`` ops) on [8, 8] tpu tensors, strict eager; then
    waits for the result's ``jax.Array`` (``block_until_ready``), as :func:`torchax_chain` does."""
    from tpu_runtime.values import materialize

    x = torch.randn(8, 8).to("tpu")

    def run() -> Any:
        with tpu_runtime.set_eager_mode("strict"):
            y = x
            for _ in range(n):
                y = y * 0.5 + x
            return materialize(y).block_until_ready()

    run.x = x.cpu().numpy()
    return run


def jax_chain(n: int = 100) -> Callable[[], Any]:
    """The same chain as two cached ``jax.jit`` functions called from Python: the floor
    any eager runtime on JAX pays per op (one XLA dispatch)."""
    import jax
    import jax.numpy as jnp

    x = jnp.asarray(torch.randn(8, 8).numpy())
    mul, add = jax.jit(lambda a, s: a * s), jax.jit(lambda a, b: a + b)
    half = jnp.asarray(0.5)

    def run() -> Any:
        y = x
        for _ in range(n):
            y = add(mul(y, half), x)
        return y.block_until_ready()

    return run


def torchax_chain(n: int = 100) -> Callable[[], Any]:
    """The same chain (``2n`` ops, same shapes, same python-float operand) in torchax eager
    mode (each op runs as JAX ops on the tensors' ``jax.Array``); then waits for the
    result's ``jax.Array`` (``block_until_ready``), as :func:`op_chain` does.

    Raises:
        ImportError: torchax is not importable.
    """
    from benchmarks.bench_tpu import import_torchax

    torchax, _ = import_torchax()
    env = torchax.default_env()
    with env:
        x = env.to_xla(torch.randn(8, 8))

    def run() -> Any:
        with env:
            y = x
            for _ in range(n):
                y = y * 0.5 + x
            return y.jax().block_until_ready()

    run.x = __import__("numpy").asarray(x.jax())
    return run


def check_chains(ours: Callable[[], Any], theirs: Callable[[], Any], n: int) -> None:
    """Both chains compute ``y = y * 0.5 + x`` from their own ``x``: check each against
    numpy on its input (a benchmark of a wrong computation would mean nothing).

    Raises:
        AssertionError: a chain's result differs.
    """
    import numpy as np

    for name, fn in (("tpu", ours), ("torchax", theirs)):
        x = np.asarray(fn.x)
        y = x
        for _ in range(n):
            y = y * 0.5 + x
        got = np.asarray(fn())
        assert got.shape == (8, 8) and np.allclose(got, y, rtol=1e-5, atol=1e-5), f"{name} chain is wrong"


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default="mlp,mingpt,mlp-wide,mlp-large")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--block", type=int, default=3, help="calls per timed block")
    p.add_argument("--repeats", type=int, default=3,
                   help="part 1: times the paired fused/strict measurement runs (the median of them is printed, "
                        "with their range)")
    p.add_argument("--ops", type=int, default=200, help="ops in the dispatch chain (even)")
    p.add_argument("--optimizers", default="default,loop,fused",
                   help="AdamW variants of part 1 (default, loop, fused)")
    p.add_argument("--no-breakdown", dest="breakdown", action="store_false",
                   help="skip part 1's runtime / torch split of each step")
    args = p.parse_args(argv)
    torch.set_num_threads(THREADS)
    print(f"device: tpu:0 = {torch.tpu.get_device_name()}; rounds {args.rounds} x block {args.block}; "
          "median of paired ratios\n")

    print("1. training step, fused vs strict eager (target fused/strict throughput >= 2)")
    for name in args.models.split(","):
        for optimizer in args.optimizers.split(","):
            strict, fused = training_step(name, "strict", optimizer), training_step(name, "fused", optimizer)
            for fn in (strict, fused, strict, fused, fused):  # compile, then reach the steady-state graph
                with _mode_of(fn):
                    fn()
            ratio, low, high, ts, tf = repeated(strict, fused, args.rounds, args.block, args.repeats)
            label = name + "".join(f", AdamW({k}={v})" for k, v in _OPTIMIZERS[optimizer].items())
            spread = f"; {args.repeats} repeats {low:.2f}-{high:.2f}x" if args.repeats > 1 else ""
            print(f"   {label:30s} fused/strict throughput {ratio:5.2f}x   (strict {ts * 1e3:8.1f} ms, fused "
                  f"{tf * 1e3:8.1f} ms per step{spread})")
            if args.breakdown and optimizer == "default":
                (s_total, s_runtime, s_wait), (f_total, f_runtime, f_wait) = paired_breakdown(
                    strict, fused, args.rounds, max(5, args.block * 3))
                s_runtime, f_runtime = s_runtime + s_wait, f_runtime + f_wait
                print(f"   {'':30s} runtime/rest per step: strict {s_runtime * 1e3:.2f}/{(s_total - s_runtime) * 1e3:.2f}"
                      f" ms, fused {f_runtime * 1e3:.2f}/{(f_total - f_runtime) * 1e3:.2f} ms; ceiling with a free "
                      f"fused runtime {s_total / (f_total - f_runtime):.2f}x; 2x needs fused runtime <= "
                      f"{(s_total / 2 - (f_total - f_runtime)) * 1e3:.2f} ms")
            if optimizer in _SHADOW_OPTIMIZERS:  # (AdamW(fused=True) has no kernel on the meta device)
                task = _task(name)
                torch.manual_seed(0)
                shadow = floor_training_step(_no_dropout(task.make().train()), task.batches[0], task.loss,
                                             **_SHADOW_OPTIMIZERS[optimizer])
                shadow(), shadow()
                ratio, ts, tx = paired(strict, shadow, args.rounds, args.block)
                print(f"   {'':30s} strict/subclass-floor time {ratio:.2f}x (torch's side of the step under a tensor "
                      f"subclass whose ATen calls do no work: {tx * 1e3:.2f} ms; about the most any Python-subclass "
                      "runtime's fused/strict can be)")
            floor = floor_step(_task(name), 1e-3) if optimizer == "default" else None
            if floor is not None:  # (the MLPs: a JAX twin, checked against PyTorch)
                floor(), floor()
                ratio, ts, tx = paired(strict, floor, args.rounds, args.block)
                print(f"   {'':30s} strict/XLA-floor time {ratio:.2f}x (one jax.jit of the whole step, no torch: "
                      f"{tx * 1e3:.2f} ms; the most fused/strict can be)")

    print(f"\n2. per-op dispatch, {args.ops} small ops, strict eager vs torchax eager (target <= 0.5)")
    ours = op_chain(args.ops // 2)
    ours()
    try:
        theirs = torchax_chain(args.ops // 2)
        theirs()
    except Exception as e:  # not installed, or does not run next to tpu_runtime
        theirs = None
        print(f"   torchax: {str(e).splitlines()[0] if str(e) else type(e).__name__} -- skipped")
    if theirs is not None:
        check_chains(ours, theirs, args.ops // 2)
        ratio, to, tt = paired(ours, theirs, args.rounds, args.block)
        print(f"   tpu/torchax time {ratio:5.2f}   ({to / args.ops * 1e6:.1f} vs {tt / args.ops * 1e6:.1f} µs/op)")
    floor = jax_chain(args.ops // 2)
    floor()
    ratio, to, tj = paired(ours, floor, args.rounds, args.block)
    print(f"   tpu/raw jax.jit time {ratio:5.2f}   ({to / args.ops * 1e6:.1f} vs {tj / args.ops * 1e6:.1f} µs/op; "
          "the floor: one cached XLA dispatch per op, no torch)")

    print("\n3. training step, torch.compile(backend='tpu') vs PyTorch eager on CPU")
    places = {"compile": "model on cpu", "compile-strict": "on tpu, strict optimizer",
              "compile-fused": "on tpu, fused optimizer", "compile-all": "on tpu, compiled optimizer"}
    for name in args.models.split(","):
        cpu = training_step(name, "cpu")
        for where, place in places.items():
            compiled = training_step(name, where)
            with _mode_of(compiled):
                compiled(), compiled(), compiled()
            cpu()
            ratio, tc, tp = paired(compiled, cpu, args.rounds, args.block)
            print(f"   {name + ', ' + place:36s} compiled/pytorch time {ratio:5.2f}   (compiled {tc * 1e3:8.1f} ms, "
                  f"pytorch {tp * 1e3:8.1f} ms per step)")

    print("\n4. attention in eager, F.scaled_dot_product_attention forward+backward: math decomposition vs fused op")
    for mode in ("strict", "fused"):
        math, fused_op = attention_step(False, mode), attention_step(True, mode)
        for fn in (math, fused_op, math, fused_op):
            with _mode_of(fn):
                fn()
        ratio, tm, tf = paired(math, fused_op, args.rounds, args.block)
        print(f"   {mode:7s} math/fused-op time {ratio:5.2f}   (math {tm * 1e3:6.2f} ms, fused op {tf * 1e3:6.2f} ms)")

    print("\n5. training step, linear/matmul as one op each way (tpu_runtime/whole_ops.py) vs torch's decomposition")
    for name in args.models.split(","):
        for mode in ("strict", "fused"):
            whole, pieces = training_step(name, mode), training_step(name, mode)
            pieces.decomposed = True
            for fn in (whole, pieces, whole, pieces, whole, pieces):
                with _mode_of(fn):
                    fn()
            ratio, tp, tw = paired(pieces, whole, args.rounds, args.block)
            print(f"   {name:10s} {mode:7s} decomposed/whole time {ratio:5.2f}   (decomposed {tp * 1e3:7.2f} ms, "
                  f"whole {tw * 1e3:7.2f} ms per step)")

    s = tpu_runtime.cache_stats()
    print(f"\ncompile cache: {s.requests} requests, {s.hits} hits, {s.misses} misses ({s.disk_hits} from disk), "
          f"{s.compile_seconds:.1f}s compiling")
    return 0


if __name__ == "__main__":
    sys.exit(main())
