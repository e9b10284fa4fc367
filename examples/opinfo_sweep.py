"""Sweep PyTorch's own OpInfo database (``torch.testing._internal``'s ``op_db``, ~700 ops) over the tpu device.

Each op's first samples run on the CPU and on the tpu device, compared: shape and dtype exactly, values at
``rtol=1e-4, atol=1e-5``; outside these, in float16/bfloat16/float32/complex64, a mismatch counts only when the device
is more than twice as far as the CPU from a float64 (complex128) run of the same inputs. Ops run in chunks in
subprocesses, resumed after the op that crashed one.
Variants:

* ``forward``: the op's output;
* ``grad``: its gradients (``autograd.grad`` of the floating outputs, times 0.5) for the inputs that require one;
* ``inplace``: its in-place variant on a copy of the input (the result and the input after it).

Modes: ``strict`` and ``fused`` eager, ``compile`` (``torch.compile(backend="tpu")``, two samples per op), ``debug``
(debug eager comparing every op with the CPU: a sample whose result matches the CPU's but that debug eager flagged
is a false alarm, reported with the op debug eager named). Random ops
compare shapes only. :data:`KNOWN` lists the differences that are the CPU's own choices (tie orders, eigenvector
signs); they are reported apart. One JSON line per op with a difference, then a summary (it needs the test
extras: ``torch.testing._internal`` imports ``expecttest``)::

    python examples/opinfo_sweep.py --mode strict --dtype float32                  # about 3 minutes
    python examples/opinfo_sweep.py --mode fused --variant grad --ops addmm,gather,stft
    python examples/opinfo_sweep.py --mode compile --variant grad                  # about 15 minutes
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent

#: Ops drawing random numbers (values differ from the CPU's by design; shapes compared).
RANDOM = ("rand", "normal", "bernoulli", "multinomial", "dropout", "uniform", "exponential", "geometric", "cauchy",
          "log_normal", "poisson", "empty", "svd_lowrank", "pca_lowrank", "rrelu", "fractional_max_pool",
          "scaled_dot_product_attention", "multi_head_attention_forward")
#: Differences that are the CPU's own choices, not the device's errors: op name prefix → why (the first that
#: matches).
KNOWN = {
    "sort": "an unstable sort's order of equal keys (the device's sort is stable, which torch allows)",
    "argsort": "as sort", "topk": "the order of equal values is the CPU's partial sort's, not a rule",
    "kthvalue": "as topk",
    "linalg.eigh": "eigenvectors are unique up to a sign", "linalg.eig": "eigenvectors are unique up to a phase",
    "as_strided.partial_views": "the sample's input is a view: .to('tpu') copies only the view (as .to('cuda'))",
    "tensor_split": "the sample moves the CPU index tensor to the device too, which torch refuses (as on CUDA)",
    "native_batch_norm": "eval mode's saved statistics: the CPU returns empty ones, torch's meta kernel (and the "
                         "device) full ones", "_native_batch_norm_legit": "as native_batch_norm",
    "native_layer_norm": "half-precision statistics: float32 as torch's meta kernel (the CPU keeps the input dtype)",
    "_batch_norm_with_update": "as native_layer_norm",
    "nn.functional.linear_cross_entropy": "torch picks no float32 accumulation for a device other than CPU and CUDA",
    "addbmm": "the CPU's addbmm_ resizes a broadcast self (no other in-place op does)",
    "matrix_exp": "gradients of an ill-conditioned sample (values up to 4e3): the device's error against float64, "
                  "3e-5 of the largest value, is 2-3x the CPU's (the two scale and square differently)",
    "chalf": "complex32 has no JAX type (refused by name)",
    "sparse": "sparse layouts are refused by name", "to_sparse": "as sparse",
}


def _on_device(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return x.detach().to("tpu").requires_grad_(x.requires_grad)
    return x


def _difference(want: Any, got: Any, dtype: torch.dtype, redo: Any) -> str | None:
    """Why ``got`` (the device's) differs from ``want`` (the CPU's), or None; ``redo()`` runs the op in float64."""
    tree = torch.utils._pytree
    a, b = tree.tree_leaves(want), tree.tree_leaves(got)
    if len(a) != len(b):
        return f"{len(a)} vs {len(b)} leaves"
    for i, (x, y) in enumerate(zip(a, b)):
        if not isinstance(x, torch.Tensor):
            if x != y and not (isinstance(x, float) and x != x and y != y):
                return f"{i}: {x!r} vs {y!r}"
            continue
        y = y.detach().cpu()
        if x.shape != y.shape or x.dtype != y.dtype:
            return f"{i}: {tuple(x.shape)} {x.dtype} vs {tuple(y.shape)} {y.dtype}"
        if x.layout != torch.strided:
            continue
        if torch.allclose(y, x.detach(), rtol=1e-4, atol=1e-5, equal_nan=True) if x.dtype.is_floating_point or \
                x.dtype.is_complex else torch.equal(x, y):
            continue
        if dtype in _WIDE and redo is not None:
            try:
                ref = [t for t in tree.tree_leaves(redo()) if isinstance(t, torch.Tensor)][i].to(_WIDE[dtype])
            except Exception:  # noqa: BLE001 (no reference: the difference stands)
                ref = None
            if ref is not None and ref.shape == x.shape:
                cpu, dev = ((t.to(ref.dtype) - ref).abs().nan_to_num(1e9).max().item() for t in (x.detach(), y))
                if dev <= 2 * cpu + 1e-6:
                    continue
                return f"{i}: error against {str(ref.dtype)[6:]} {dev:.3g} (the CPU's {cpu:.3g})"
        return f"{i}: max difference {(x.detach().double() - y.double()).abs().nan_to_num(1e9).max().item():.3g}"
    return None


#: The reference precision of each dtype whose results are judged against one: a device result that differs from
#: the CPU's counts only when it is more than twice as far as the CPU's from the sample run in this dtype (the two
#: round differently; float32 gradients of long recurrences, ``ctc_loss``'s, differ by ~1e-4 relative).
_WIDE = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
         torch.complex64: torch.complex128}


def _in_wide(op: Any, s: Any, dtype: torch.dtype, variant: str) -> Any:
    """The variant's result on the CPU with the sample's ``dtype`` tensors in :data:`_WIDE` precision (the
    reference a difference is judged by)."""
    def wide(t: Any) -> Any:
        if isinstance(t, torch.Tensor) and t.dtype == dtype:
            return t.detach().to(_WIDE[dtype]).requires_grad_(t.requires_grad)
        return t

    tree = torch.utils._pytree
    sample = types.SimpleNamespace(input=wide(s.input), args=tree.tree_map(wide, s.args),
                                   kwargs=tree.tree_map(wide, s.kwargs))
    return _call(op, variant, "strict", _WIDE[dtype], sample, False)


def _call(op: Any, variant: str, mode: str, dtype: torch.dtype, s: Any, device: bool) -> Any:
    """The sample's result (``device``: on tpu tensors, in ``mode``), as the variant defines it."""
    tree = torch.utils._pytree
    args, kwargs = (s.input, *s.args), dict(s.kwargs)
    if device:
        args, kwargs = tree.tree_map(_on_device, (args, kwargs))
    fn = op.op if variant != "inplace" else (lambda x, *a, **k: (lambda y: (op.inplace_variant(y, *a, **k), y))(
        x.clone()))
    if device and mode == "compile":
        torch._dynamo.reset()
        fn = torch.compile(fn, backend="tpu")
    out = fn(*args, **kwargs)
    if variant == "grad":
        floating = lambda t: isinstance(t, torch.Tensor) and (t.dtype.is_floating_point or t.dtype.is_complex)  # noqa
        outs = [t for t in tree.tree_leaves(out) if floating(t) and t.requires_grad]
        ins = [t for t in tree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor) and t.requires_grad]
        out = torch.autograd.grad(outs, ins, [torch.ones_like(t) * 0.5 for t in outs], allow_unused=True) \
            if outs else ()
    return out


def _eager_mode(mode: str) -> Any:
    """The eager mode a sample runs in (``compile``: strict around the compiled call; ``debug``: comparing each op
    with the CPU, reporting instead of raising)."""
    import tpu_runtime

    if mode == "debug":
        return tpu_runtime.set_eager_mode("debug", compare_cpu=True, check_nan=False, raise_on_error=False)
    return tpu_runtime.set_eager_mode("strict" if mode == "compile" else mode)


def sweep(start: int, names: set | None, mode: str, dtype: torch.dtype, variant: str, per_op: int) -> None:
    """Run ops ``start``… of ``op_db`` (those named in ``names``), printing ``OP <index>`` before each and a JSON
    line for each op with a difference."""
    import tpu_runtime
    from torch.testing._internal.common_methods_invocations import op_db

    def alarm(*_: Any) -> None:
        raise TimeoutError("over 60 s")

    signal.signal(signal.SIGALRM, alarm)
    torch.set_num_threads(1)
    for index in range(start, len(op_db)):
        op = op_db[index]
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        differentiable = op.supports_autograd and (dtype.is_floating_point or dtype.is_complex)
        if (names and name not in names) or dtype not in op.supported_dtypes("cpu") \
                or (variant == "grad" and not differentiable) or (variant == "inplace" and op.inplace_variant is None):
            continue
        print(f"OP {index}", flush=True)
        problems, ran = [], 0
        for s in list(op.sample_inputs("cpu", dtype, requires_grad=variant == "grad"))[:per_op]:
            try:
                want = _call(op, variant, mode, dtype, s, False)
            except Exception:  # noqa: BLE001 (the CPU refuses the sample too: not compared)
                continue
            ran += 1
            signal.alarm(60)
            try:
                with _eager_mode(mode):
                    got = _call(op, variant, mode, dtype, s, True)
                    if any(r in name for r in RANDOM):
                        shape = lambda t: t.shape if isinstance(t, torch.Tensor) else t  # noqa: E731
                        want, got = torch.utils._pytree.tree_map(shape, (want, got))
                    why = _difference(want, got, dtype, lambda: _in_wide(op, s, dtype, variant))
                if not why and mode == "debug" and tpu_runtime.eager.REPORT.findings:
                    why = f"debug eager's false alarm: {tpu_runtime.eager.REPORT.first}"
            except Exception as e:  # noqa: BLE001 (the difference reported)
                why = " ".join(f"{type(e).__name__}: {e}".split())[:300]
            finally:
                signal.alarm(0)
            if why:
                problems.append(why)
        if problems:
            known = next((why for prefix, why in KNOWN.items() if name.startswith(prefix)), None)
            print(json.dumps({"op": name, "samples": ran, "differ": len(problems), "first": problems[0],
                              **({"known": known} if known else {})}), flush=True)


def main(argv: list[str] | None = None) -> int:
    """Run the sweep in subprocesses (resumed past an op that crashed one) and print a summary."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", default="strict", choices=("strict", "fused", "compile", "debug"))
    p.add_argument("--dtype", default="float32")
    p.add_argument("--variant", default="forward", choices=("forward", "grad", "inplace"))
    p.add_argument("--ops", default="", help="comma-separated op names (default: all)")
    p.add_argument("--samples", type=int, default=0, help="samples per op (default: 6, compile 2)")
    p.add_argument("--start", type=int, default=None, help=argparse.SUPPRESS)
    opts = p.parse_args(argv)
    dtype, names = getattr(torch, opts.dtype), set(filter(None, opts.ops.split(",")))
    per_op = opts.samples or (2 if opts.mode == "compile" else 6)
    if opts.start is not None:
        sweep(opts.start, names, opts.mode, dtype, opts.variant, per_op)
        return 0
    start, rows = 0, []
    while True:
        cmd = [sys.executable, __file__, *(argv if argv is not None else sys.argv[1:]), "--start", str(start)]
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        last = None
        for line in proc.stdout.splitlines():
            if line.startswith("OP "):
                last = int(line.split()[1])
            elif line.startswith("{"):
                rows.append(json.loads(line))
                print(line, flush=True)
        if proc.returncode == 0:
            break
        if last is None:  # (it failed before any op: torch.testing's OpInfo needs the test extras' expecttest)
            print(f"error: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
            return 1
        row = {"op": f"#{last}", "crash": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
        rows.append(row)
        print(json.dumps(row), flush=True)
        start = last + 1
    new = [r["op"] for r in rows if "known" not in r]
    print(f"differences: {len(new)} ({', '.join(new) or 'none'}); known: {sum('known' in r for r in rows)}")
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
