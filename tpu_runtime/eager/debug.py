"""Debug eager: strict, but synchronous, with optional checks after every op.

* ``check_nan`` (default on): raise :class:`NonFiniteError` naming the first op whose
  output has a NaN (an earlier op would have been named for a NaN input; one that came from the host or from
  before debug mode is said to be);
  ``check_inf`` (default off: ``-inf`` attention masks are legitimate) does the
  same for infinities;
* ``compare_cpu``: run the same ATen op with PyTorch on CPU copies of the inputs
  and raise :class:`~converter.errors.ParityError` naming the first op whose
  output differs beyond tolerance. Random ops are not compared (JAX's PRNG draws
  other values by design; the fused attention op, tagged random for a dropout it is never asked for, is), nor ops whose CPU output is uninitialized memory
  (``empty_like``, ``new_empty``), runtime-internal steps (view replay, scatter) have
  no ATen op to compare against, and ops PyTorch's CPU kernels lack for a dtype
  (float8 arithmetic) are counted in ``REPORT.uncompared``. Outputs that are not unique
  are judged by what is: singular vectors and eigenvectors (a sign or phase each), and the
  bookkeeping outputs of ``embedding_bag`` and ``ctc_loss`` are not compared
  (:data:`_NOT_UNIQUE`); the indices of a selection op (``sort``, ``topk``, ``median`` …)
  may pick another of equal values, and pass when the input at them holds the CPU's values.
  An output outside tolerance passes when it is no farther than twice the CPU's from the
  op run in float64 (half precision: the device rounds once where the CPU rounds per step),
  or, in float32, when its error there is within 4 units in the last place of the output's
  largest value (an ill-conditioned op magnifies each side's rounding).

:data:`REPORT` counts the ops run and checked since debug mode was entered and
keeps every finding (also when ``raise_on_error=False``). A finding names where the op came from: the user's
source line, and in ``backward()`` the autograd node running (``MulBackward0``), with the forward line that made it
under ``torch.autograd.set_detect_anomaly(True)``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import torch

from converter.errors import ParityError, caller_location, stack_location
from converter.lowering.dtypes import FLOAT8
from tpu_runtime.eager.strict import run_now

aten = torch.ops.aten

#: (rtol, atol) per dtype. Mirrors validators/tolerances.py BY_DTYPE: the runtime may
#: not import validators (DESIGN.md dependency direction), so the numbers are repeated.
TOLERANCES = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
    # one unit in the last place of 3 (e4m3) or 2 (e5m2) mantissa bits: a scale applied in another order
    **{d: (0.25, 0.0) for d in FLOAT8},
}


class NonFiniteError(FloatingPointError):
    """An op produced NaN or Inf in debug mode with ``check_nan=True``."""


@dataclass
class DebugOptions:
    """What debug mode checks (see the module docstring)."""

    check_nan: bool = True
    check_inf: bool = False
    compare_cpu: bool = False
    raise_on_error: bool = True
    rtol: float | None = None
    atol: float | None = None


@dataclass
class DebugReport:
    """Counters and the first finding of debug mode."""

    ops: int = 0
    compared: int = 0
    uncompared: int = 0  # ops with no CPU kernel in PyTorch for their dtypes
    findings: list[str] = field(default_factory=list)

    @property
    def first(self) -> str | None:
        """The first finding, or ``None``."""
        return self.findings[0] if self.findings else None


REPORT = DebugReport()

#: Ops whose output the CPU leaves uninitialized: nothing to compare (the tpu's reads as zeros).
_UNINITIALIZED = frozenset({"aten::empty_like", "aten::new_empty", "aten::new_empty_strided", "aten::empty",
                            "aten::empty_strided", "aten::empty_permuted"})

#: Ops tagged random (for their dropout) that draw nothing as the runtime calls them (the fused attention op: the
#: runtime passes ``dropout_p=0``, its lowering refuses another): compared as any other op.
_NO_DRAW = frozenset({"aten::_scaled_dot_product_fused_attention_overrideable"})


#: Outputs the CPU and the device may both get right and still differ in: op → {output index: why}. Not compared.
_NOT_UNIQUE = {
    "aten::_linalg_svd": {0: "singular vectors: each unique up to a sign", 2: "as U"},
    "aten::_linalg_eigh": {1: "eigenvectors: each unique up to a sign"},
    "aten::linalg_eig": {1: "eigenvectors: each unique up to a phase"},
    **{name: {1: "offset2bag", 2: "bag_size", 3: "max_indices: the CPU kernel's bookkeeping (its fast path leaves "
                                                "them empty)"} for name in ("aten::_embedding_bag",
                                                                               "aten::_embedding_bag_forward_only")},
    "aten::_ctc_loss": {1: "log_alpha: past each target's length, the kernel's scratch"},
}
#: Selection ops whose output 1 indexes the input along ``dim`` where output 0 holds the values: equal values may be
#: picked in another order (an unstable sort, a partial sort, a median of repeated values).
_TIES = frozenset({"aten::sort", "aten::topk", "aten::kthvalue", "aten::median", "aten::nanmedian", "aten::mode",
                   "aten::max", "aten::min", "aten::cummax", "aten::cummin"})


class DebugExecutor:
    """Runs each op now, waits for it, and checks it."""

    name = "debug"
    #: Dynamic python floats reach :meth:`run` as python floats (jit takes them as weakly typed
    #: scalars), so the CPU comparison calls the op with the float its schema asks for
    #: (``mul.Scalar(Tensor, Scalar)`` refuses a 0-d tensor).
    raw_floats = True

    def __init__(self, options: DebugOptions):
        self.options = options
        REPORT.ops, REPORT.compared, REPORT.uncompared = 0, 0, 0  # each switch to debug mode: a fresh report
        REPORT.findings.clear()

    def run(self, plan: Any, values: list) -> tuple:
        """Run ``plan`` synchronously and apply the configured checks."""
        outs = run_now(plan, values)
        jax.block_until_ready(outs)
        REPORT.ops += 1
        if self.options.check_nan or self.options.check_inf:
            for i, o in enumerate(outs):
                arr = np.asarray(o)
                if arr.dtype.kind not in "fcV":
                    continue
                arr = arr.astype(np.float32) if arr.dtype.kind == "V" else arr  # bfloat16
                bad = (self.options.check_nan and np.isnan(arr).any()) or \
                      (self.options.check_inf and np.isinf(arr).any())
                if bad:
                    what = "NaN" if np.isnan(arr).any() else "Inf"
                    self._finding(NonFiniteError, f"{plan.name} produced {what} in output {i} (shape "
                                                  f"{list(arr.shape)}, dtype {arr.dtype}) {_where()}"
                                                  f"{_held_before(values, what)}")
        if self.options.compare_cpu and plan.op is not None and "targs" in plan.extra \
                and (not plan.random or plan.op._schema.name in _NO_DRAW) and plan.op._schema.name not in _UNINITIALIZED:
            self._compare(plan, values, outs)
        return outs

    def sync(self, cause: str = "sync") -> None:
        """Nothing is pending in debug mode."""

    def _finding(self, kind: type, message: str) -> None:
        REPORT.findings.append(message)
        if self.options.raise_on_error:
            raise kind(message)

    def _compare(self, plan: Any, values: list, outs: tuple) -> None:
        from tpu_runtime.plans import _fill
        from tpu_runtime.values import array_to_torch

        cpu = [array_to_torch(v) if hasattr(v, "shape") else v for v in values]
        targs, tkwargs = _on_cpu(plan.extra["targs"]), _on_cpu(plan.extra["tkwargs"])
        try:
            refs = _reference(plan, targs, tkwargs, cpu)
        except NotImplementedError:  # e.g. "add_stub" not implemented for 'Float8_e4m3fn'
            REPORT.uncompared += 1
            return
        REPORT.compared += 1
        name = plan.op._schema.name
        skip = _NOT_UNIQUE.get(name, {})
        for i, o in enumerate(outs):
            r = refs.get(i)
            if i in skip or r is None:  # (the CPU computed no such output: nothing to compare it with)
                continue
            got = array_to_torch(o)
            if got.shape != r.shape:
                self._finding(ParityError, f"first op that differs from PyTorch CPU: {plan.name} output {i} "
                                           f"(shape {list(got.shape)}, the CPU's {list(r.shape)}) {_where()}")
                return
            if i == 1 and name in _TIES and _same_picks(plan.op, _fill(targs, cpu), _fill(tkwargs, cpu), got,
                                                        refs[0]):
                continue
            if r.dtype.is_floating_point or r.dtype.is_complex:
                part = r.real.dtype if r.dtype.is_complex else r.dtype
                if got.dtype.is_floating_point and torch.finfo(got.dtype).eps > torch.finfo(part).eps:
                    part = got.dtype  # (torch's meta kernel gives a coarser dtype than its CPU kernel: judged at it)
                rtol, atol = TOLERANCES.get(torch.float32 if part is torch.float64 and name in _CPU_LESS_ACCURATE
                                            else part, (1e-4, 1e-5))
                rtol = self.options.rtol if self.options.rtol is not None else rtol
                atol = self.options.atol if self.options.atol is not None else atol
                wide = torch.float32 if r.dtype.itemsize == 1 else r.dtype  # float8: no CPU allclose
                ok = torch.allclose(got.to(wide), r.to(wide), rtol=rtol, atol=atol, equal_nan=True) or \
                    (r.dtype in _WIDE and _as_exact(plan, targs, tkwargs, cpu, i, got, r))
                both = (got.to(wide), r.to(wide)) if r.dtype.is_complex else (got.double(), r.double())
                err = (both[0] - both[1]).abs().nan_to_num(0).max().item() if r.numel() else 0.0
            else:
                ok = torch.equal(got.to(r.dtype), r)
                err = float("nan") if not ok else 0.0
            if not ok:
                shapes = ", ".join(f"{list(c.shape)}:{str(c.dtype)[6:]}" for c in cpu if isinstance(c, torch.Tensor))
                self._finding(ParityError, f"first op that differs from PyTorch CPU: {plan.name} output {i} "
                                           f"(max abs error {err:.3g}; inputs {shapes}) {_where()}")
                return


def _where() -> str:
    """Where the running op came from, for a finding: the user's source line; in ``backward()``, the autograd
    node running (``MulBackward0``) and the forward line that made it when anomaly detection recorded it
    (``torch.autograd.set_detect_anomaly(True)``), then the ``backward()`` call's line."""
    here = f"at {caller_location()}"
    node = torch._C._current_autograd_node()
    if node is None:
        return here
    made = stack_location("".join(node.metadata.get("traceback_") or ()))
    made = f"made at {made}" if made.file else "torch.autograd.set_detect_anomaly(True) names the forward line"
    return f"in {node.name()} ({made}) during the backward() {here}"


def _held_before(values: list, what: str) -> str:
    """A note when an input of the op already held ``what`` (NaN or Inf): the op passed it on, it came from the
    host or from before debug mode."""
    test = np.isnan if what == "NaN" else np.isinf
    for i, v in enumerate(values):
        kind = np.dtype(v.dtype).kind if hasattr(v, "dtype") else None
        if kind in ("f", "c", "V") and test(np.asarray(v, np.complex128 if kind == "c" else np.float64)).any():
            return f"; its input {i} already held {what} (copied from the host, or made before debug mode)"
    return ""


#: Ops whose float64 CPU kernel is less accurate than the device's: their float64 outputs are compared at float32's
#: tolerance. (Measured on 2001 points in [-30, 30] against SciPy: the CPU 2e-7 to 8e-7 off near |x| = 5, where its
#: approximations meet; the device 1e-14.)
_CPU_LESS_ACCURATE = frozenset({"aten::special_bessel_j0", "aten::special_bessel_j1", "aten::special_bessel_y0",
                                "aten::special_bessel_y1"})
#: The dtypes whose outputs, outside tolerance, are judged against the op run in a wider one (:func:`_as_exact`).
_WIDE = {torch.float16: torch.float64, torch.bfloat16: torch.float64, torch.float32: torch.float64,
         torch.complex64: torch.complex128}


def _reference(plan: Any, targs: Any, tkwargs: Any, cpu: list) -> dict[int, torch.Tensor]:
    """The outputs of ``plan``'s op run with PyTorch on the CPU values ``cpu`` (filling the templates ``targs``,
    ``tkwargs``), lazy conjugates and negations resolved, by the index of the device output each stands beside.
    They are matched by their place in the op's result (``plan.structure``): where the CPU returns ``None`` (a
    gradient its ``output_mask`` does not ask for) the device may still return a tensor, or the other way round."""
    from tpu_runtime.cpu_semantics import cpu_semantics
    from tpu_runtime.plans import _fill, _Slot
    from tpu_runtime.whole_ops import CPU_REFERENCES  # (imports the device: not at debug's import)

    def pair(structure: Any, ref: Any, out: dict) -> dict:
        if type(structure) is _Slot and isinstance(ref, torch.Tensor):
            out[structure.i] = ref.resolve_conj().resolve_neg()
        elif isinstance(structure, (list, tuple)) and isinstance(ref, (list, tuple)):
            for s, r in zip(structure, ref):
                pair(s, r, out)
        return out

    call = CPU_REFERENCES.get(plan.op) or _STATS_IN_PARAMS_DTYPE.get(plan.op) or plan.op
    with cpu_semantics():
        return pair(plan.structure, call(*_fill(targs, cpu), **_fill(tkwargs, cpu)), {})


def _stats_in_params_dtype(op: Any, weight_at: int, stats_at: tuple, *args: Any) -> Any:
    """``op`` on the CPU with its statistics (arguments ``stats_at``) in its weight's dtype (argument ``weight_at``),
    or its input's (argument 1) without a weight: the dtype the CPU's own forward saves them in."""
    args = list(args)
    dtype = (args[weight_at] if args[weight_at] is not None else args[1]).dtype
    for i in stats_at:
        if isinstance(args[i], torch.Tensor):
            args[i] = args[i].to(dtype)
    return op(*args)


#: Backward ops whose CPU kernel takes the saved statistics only in the parameters' dtype (the input's without
#: parameters), where the device keeps them in the dtype torch's meta kernel gives (float32 for a half-precision
#: layer or batch norm, as CUDA does; the input's for a group norm with float32 parameters): the CPU call gets
#: them in its dtype instead of refusing the device's. op → (weight's argument, statistics' arguments).
_STATS_IN_PARAMS_DTYPE = {op: functools.partial(_stats_in_params_dtype, op, weight_at, stats_at)
                          for op, weight_at, stats_at in (
                              (aten.native_layer_norm_backward.default, 5, (3, 4)),
                              (aten.native_batch_norm_backward.default, 2, (3, 4, 5, 6)),
                              (aten.native_group_norm_backward.default, 4, (2, 3)))}


def _as_exact(plan: Any, targs: Any, tkwargs: Any, cpu: list, i: int, got: torch.Tensor, want: torch.Tensor) -> bool:
    """Whether the device's output ``i`` (``got``) is at most twice as far as the CPU's (``want``) from the op run
    with its inputs of that precision or lower in float64 (complex128): the two round differently (in half precision
    the device keeps float32 within an op, as GPUs do; an ill-conditioned op, a batch norm's backward over two rows,
    magnifies float32's rounding), and a result nearer the exact one is no difference."""
    wider = _WIDE[want.dtype]
    wide = [c.to(wider if c.is_complex() else torch.float64)
            if isinstance(c, torch.Tensor) and c.dtype in _WIDE and c.dtype.itemsize <= want.dtype.itemsize else c
            for c in cpu]
    try:
        exact = _reference(plan, targs, tkwargs, wide)[i].to(wider)
    except Exception:  # noqa: BLE001 (no wider reference: the difference stands)
        return False
    if exact.shape != got.shape:
        return False
    dev, cpu_err = ((t.to(wider) - exact).abs().nan_to_num(1e9).max().item() for t in (got, want))
    if want.dtype.itemsize < 4:  # (half precision: no farther than the CPU)
        return dev <= 2 * cpu_err + 1e-6
    # float32: or within 4 units in the last place of the largest value (the normwise error of a stable
    # computation: a batch norm's backward over two rows gives small values by cancelling large ones)
    scale = exact.abs().nan_to_num(0, 0, 0).max().item() if exact.numel() else 0.0
    return dev <= max(2 * cpu_err + 1e-6, 4 * torch.finfo(want.dtype).eps * scale)


def _same_picks(op: Any, args: list, kwargs: dict, indices: torch.Tensor, values: torch.Tensor) -> bool:
    """Whether the input of selection op ``op`` (a :data:`_TIES` op, called with ``args``/``kwargs`` on the CPU)
    holds ``values`` (the CPU's output 0) at the device's ``indices``: another pick among equal values is no
    difference."""
    bound = {a.name: args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
             for i, a in enumerate(op._schema.arguments) if i < len(args) or a.name in kwargs or a.has_default_value()}
    x, dim = bound["self"], bound.get("dim", -1)
    if not isinstance(x, torch.Tensor) or not isinstance(dim, int) or indices.dtype != torch.int64:
        return False
    if x.dim() and not bound.get("keepdim", True) and values.dim() < x.dim():  # a reduction dropped ``dim``
        indices, values = indices.unsqueeze(dim), values.unsqueeze(dim)
    try:
        picked = x.gather(dim, indices)
    except (RuntimeError, IndexError):  # an index out of range: the indices are wrong
        return False
    return picked.shape == values.shape and torch.equal(picked.isnan(), values.isnan()) and \
        torch.equal(picked.nan_to_num(0), values.nan_to_num(0))


def _on_cpu(tmpl: Any) -> Any:
    if isinstance(tmpl, torch.device):
        return torch.device("cpu")
    if isinstance(tmpl, (list, tuple)):
        return type(tmpl)(_on_cpu(x) for x in tmpl)
    if isinstance(tmpl, dict):
        return {k: _on_cpu(v) for k, v in tmpl.items()}
    return tmpl
