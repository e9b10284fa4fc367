"""Pallas kernels vs their plain-XLA references: median step times and ratios.

    python benchmarks/bench_kernels.py            # TPU/GPU: full table, < 5 minutes
    python benchmarks/bench_kernels.py --smoke    # tiny shapes (automatic on CPU)
    python benchmarks/bench_kernels.py --only attention --json out.json

Every row times two jitted programs on the same inputs: the Pallas kernel
(compiled; Pallas interpret mode on CPU, where only a smoke run makes sense)
and ``jax.jit`` of the kernel's ``reference.py`` — the program XLA builds
without the kernel. "ratio" is kernel / reference: below 1 the kernel wins.
Times are medians over repetitions after warmup, each repetition long enough
(several calls) to hide dispatch overhead. A row that fails to compile or run
is reported as FAILED and the run continues.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

import jax
import jax.numpy as jnp

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels import (flash_attention, flash_attention_reference, int8_matmul,  # noqa: E402
                     int8_matmul_reference, layer_norm, layer_norm_reference, paged_attention,
                     paged_attention_reference, quantize_per_channel, rms_norm,
                     rms_norm_reference)
from kernels.dispatch import LOWERING, backend  # noqa: E402

BF16 = jnp.bfloat16


@dataclasses.dataclass
class Row:
    """One benchmark line."""

    group: str
    name: str
    shape: str
    kernel_ms: float | None = None
    reference_ms: float | None = None
    compile_s: float | None = None
    note: str = ""

    @property
    def ratio(self) -> float | None:
        if self.kernel_ms is None or not self.reference_ms:
            return None
        return self.kernel_ms / self.reference_ms


@dataclasses.dataclass
class Case:
    """Something to time: kernel and reference builders over the same inputs."""

    group: str
    name: str
    shape: str
    make_inputs: Callable[[], tuple]
    kernel: Callable
    reference: Callable


def _rand(key, shape, dtype=BF16, scale=1.0):
    return (jax.random.normal(key, shape, jnp.float32) * scale).astype(dtype)


def _fwd_bwd(fn, argnums):
    """fn → a function returning fn's output and its gradients for a fixed cotangent."""
    def run(*args):
        out, vjp = jax.vjp(lambda *diff: fn(*diff, *args[len(argnums):]),
                           *args[:len(argnums)])
        return out, vjp(jnp.ones_like(out))
    return run


# --------------------------------------------------------------------------- cases


def attention_cases(smoke: bool, interpret: bool) -> list[Case]:
    """Causal GQA attention at growing lengths, batch * length held at 8k tokens."""
    if smoke:
        configs = [(1, 4, 2, 64, 32)]
    else:
        configs = [(8, 16, 4, 1024, 128), (4, 16, 4, 2048, 128), (2, 16, 4, 4096, 128),
                   (1, 16, 4, 8192, 128)]
    cases = []
    for b, hq, hkv, length, d in configs:
        def inputs(b=b, hq=hq, hkv=hkv, length=length, d=d):
            kq, kk, kv = jax.random.split(jax.random.PRNGKey(0), 3)
            return (_rand(kq, (b, hq, length, d)), _rand(kk, (b, hkv, length, d)),
                    _rand(kv, (b, hkv, length, d)))
        kernel = lambda q, k, v: flash_attention(q, k, v, causal=True,  # noqa: E731
                                                 interpret=interpret)
        ref = lambda q, k, v: flash_attention_reference(q, k, v, causal=True)  # noqa: E731
        shape = f"B{b} Hq{hq} Hkv{hkv} L{length} D{d} causal"
        cases.append(Case("attention", f"flash_attention fwd L={length}", shape, inputs, kernel,
                          ref))
        cases.append(Case("attention", f"flash_attention fwd+bwd L={length}", shape, inputs,
                          _fwd_bwd(kernel, (0, 1, 2)), _fwd_bwd(ref, (0, 1, 2))))
    return cases


def norm_cases(smoke: bool, interpret: bool) -> list[Case]:
    """RMS and layer norm over wide rows, forward and forward+backward."""
    rows, width = (64, 256) if smoke else (16384, 8192)
    shape = f"x[{rows}, {width}] bf16"

    def inputs():
        kx, kw, kb = jax.random.split(jax.random.PRNGKey(1), 3)
        return (_rand(kx, (rows, width)), _rand(kw, (width,)), _rand(kb, (width,)))

    rms = lambda x, w, b: rms_norm(x, w, eps=1e-6, interpret=interpret)  # noqa: E731
    rms_ref = lambda x, w, b: rms_norm_reference(x, w, eps=1e-6)  # noqa: E731
    ln = lambda x, w, b: layer_norm(x, w, b, interpret=interpret)  # noqa: E731
    ln_ref = layer_norm_reference
    return [
        Case("norm", "rms_norm fwd", shape, inputs, rms, rms_ref),
        Case("norm", "rms_norm fwd+bwd", shape, inputs, _fwd_bwd(rms, (0, 1)),
             _fwd_bwd(rms_ref, (0, 1))),
        Case("norm", "layer_norm fwd", shape, inputs, ln, ln_ref),
        Case("norm", "layer_norm fwd+bwd", shape, inputs, _fwd_bwd(ln, (0, 1, 2)),
             _fwd_bwd(ln_ref, (0, 1, 2))),
    ]


def int8_cases(smoke: bool, interpret: bool) -> list[Case]:
    """int8 weight-only matmul against a bf16 matmul of the same (dequantized) weight."""
    configs = [(8, 256, 256)] if smoke else [(16, 8192, 8192), (2048, 8192, 8192)]
    cases = []
    for m, k, n in configs:
        def inputs(m=m, k=k, n=n):
            kx, kw = jax.random.split(jax.random.PRNGKey(2))
            w_int8, scales = jax.jit(quantize_per_channel)(_rand(kw, (k, n), jnp.float32))
            w_bf16 = (w_int8.astype(jnp.float32) * scales).astype(BF16)
            return _rand(kx, (m, k)), w_int8, scales, w_bf16

        kernel = lambda x, w, s, wb: int8_matmul(x, w, s, interpret=interpret)  # noqa: E731
        bf16 = lambda x, w, s, wb: jnp.dot(x, wb, preferred_element_type=jnp.float32  # noqa: E731
                                           ).astype(BF16)
        shape = f"x[{m}, {k}] @ w[{k}, {n}]"
        cases.append(Case("int8", f"int8_matmul M={m} vs bf16 matmul", shape, inputs, kernel,
                          bf16))
        cases.append(Case("int8", f"int8_matmul M={m} vs int8 reference", shape, inputs, kernel,
                          lambda x, w, s, wb: int8_matmul_reference(x, w, s)))
    return cases


def paged_cases(smoke: bool, interpret: bool) -> list[Case]:
    """One decode step over a paged cache with ragged lengths."""
    b, h, hkv, d, page, max_pages = (2, 4, 2, 32, 16, 4) if smoke else (32, 32, 8, 128, 16, 128)
    num_pages = b * max_pages
    shape = f"B{b} H{h} Hkv{hkv} D{d} page{page} <= {max_pages * page} tokens"

    def inputs():
        kq, kk, kv, kp, kl = jax.random.split(jax.random.PRNGKey(3), 5)
        tables = jax.random.permutation(kp, num_pages).reshape(b, max_pages).astype(jnp.int32)
        lengths = jax.random.randint(kl, (b,), 1, max_pages * page + 1, jnp.int32)
        return (_rand(kq, (b, h, d)), _rand(kk, (hkv, num_pages, page, d)),
                _rand(kv, (hkv, num_pages, page, d)), tables, lengths)

    kernel = lambda *a: paged_attention(*a, interpret=interpret)  # noqa: E731
    return [Case("paged", "paged_attention decode", shape, inputs, kernel,
                 paged_attention_reference)]


GROUPS = {"attention": attention_cases, "norm": norm_cases, "int8": int8_cases,
          "paged": paged_cases}


# --------------------------------------------------------------------------- timing


#: Interpret-mode programs are large loops over the grid; XLA:CPU's optimizing
#: backend needs seconds for each. A smoke run measures nothing, so skip that.
_CPU_SMOKE_COMPILE = {"xla_backend_optimization_level": 0,
                      "xla_llvm_disable_expensive_passes": True,
                      "xla_cpu_use_fusion_emitters": False}


def _compile(fn, args, cheap: bool):
    start = time.perf_counter()
    compiled = jax.jit(fn).lower(*args).compile(_CPU_SMOKE_COMPILE if cheap else None)
    return compiled, time.perf_counter() - start


def _median_ms(compiled, args, reps: int) -> float:
    jax.block_until_ready(compiled(*args))  # warmup
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))
    once = time.perf_counter() - start
    inner = max(1, min(100, int(0.01 / max(once, 1e-6))))  # >= ~10 ms per repetition
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        for _ in range(inner):
            out = compiled(*args)
        jax.block_until_ready(out)
        samples.append((time.perf_counter() - start) / inner)
    return statistics.median(samples) * 1e3


def _short(error: Exception) -> str:
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    return text[:160]


def run_case(case: Case, reps: int, cheap_compile: bool = False) -> Row:
    row = Row(case.group, case.name, case.shape)
    try:
        args = case.make_inputs()
    except Exception as e:  # noqa: BLE001 - a benchmark row reports its failure and moves on
        row.note = f"inputs FAILED {_short(e)}"
        return row
    try:
        compiled, row.compile_s = _compile(case.kernel, args, cheap_compile)
        row.kernel_ms = _median_ms(compiled, args, reps)
        del compiled
    except Exception as e:  # noqa: BLE001
        row.note = f"kernel FAILED {_short(e)}"
    try:
        compiled, _ = _compile(case.reference, args, cheap_compile)
        row.reference_ms = _median_ms(compiled, args, reps)
    except Exception as e:  # noqa: BLE001 - e.g. the reference's L x L scores do not fit
        row.note = (row.note + "; " if row.note else "") + f"reference FAILED {_short(e)}"
    return row


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def print_table(rows: list[Row]) -> None:
    header = ("kernel", "shape", "kernel ms", "ref ms", "ratio", "compile s", "note")
    lines = [(r.name, r.shape, _fmt(r.kernel_ms, ".3f"), _fmt(r.reference_ms, ".3f"),
              _fmt(r.ratio, ".2f"), _fmt(r.compile_s, ".1f"), r.note) for r in rows]
    widths = [max(len(str(x)) for x in col) for col in zip(header, *lines)]
    widths[-1] = 0
    for line in (header, *lines):
        print("  ".join(str(x).ljust(w) if i < 2 or i == 6 else str(x).rjust(w)
                        for i, (x, w) in enumerate(zip(line, widths))).rstrip())


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--smoke", action="store_true", help="tiny shapes (default on CPU)")
    parser.add_argument("--only", choices=sorted(GROUPS), action="append",
                        help="run only these groups (repeatable)")
    parser.add_argument("--reps", type=int, default=None, help="timed repetitions per program")
    parser.add_argument("--budget-s", type=float, default=270.0,
                        help="stop starting new rows after this many seconds")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = parser.parse_args(argv)

    family = backend()
    interpret = family == "cpu"
    smoke = args.smoke or interpret
    device = jax.devices()[0]
    print(f"jax {jax.__version__} | backend {jax.default_backend()} | device "
          f"{getattr(device, 'device_kind', device.platform)}")
    if interpret:
        print("No TPU/GPU: Pallas compiles only for accelerators, so this is a smoke run of tiny "
              "shapes with the kernels in interpret mode. Times and ratios below say nothing "
              "about kernel speed.")
    else:
        print(f"Pallas lowering: {LOWERING[family]}" + (" (smoke shapes)" if smoke else ""))
    reps = args.reps or (3 if smoke else 10)

    start = time.perf_counter()
    rows: list[Row] = []
    for group in args.only or list(GROUPS):
        for case in GROUPS[group](smoke, interpret):
            if time.perf_counter() - start > args.budget_s:
                rows.append(Row(case.group, case.name, case.shape, note="skipped: time budget"))
                continue
            rows.append(run_case(case, reps, cheap_compile=interpret))
            print(f"  [{time.perf_counter() - start:6.1f}s] {rows[-1].name}: kernel "
                  f"{_fmt(rows[-1].kernel_ms, '.3f')} ms, ref "
                  f"{_fmt(rows[-1].reference_ms, '.3f')} ms {rows[-1].note}", flush=True)
    print()
    print_table(rows)
    ratios = [r.ratio for r in rows if r.ratio]
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"\ngeometric mean ratio (kernel / reference) over {len(ratios)} rows: {geo:.2f}")
    print(f"total {time.perf_counter() - start:.1f}s")
    if args.json:
        args.json.write_text(json.dumps([dataclasses.asdict(r) | {"ratio": r.ratio}
                                         for r in rows], indent=2))
    failed = [r for r in rows if "FAILED" in r.note]
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
