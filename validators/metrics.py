"""Error metrics between a reference output and a target's output."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np
import torch

from converter.lowering.dtypes import FLOAT8, tensor_to_numpy
from validators.tolerances import tolerance


@dataclass(frozen=True)
class OutputError:
    """How far one output is from its reference."""

    name: str
    shape: tuple
    dtype: str
    max_abs: float
    max_rel: float
    mean_abs: float
    cosine: float
    passed: bool
    detail: str = ""
    #: element counts of ``|got - ref|`` per bin of :data:`HISTOGRAM_EDGES` (the last
    #: bin also holds non-finite errors); empty when shapes differ.
    histogram: tuple = ()
    #: how ``passed`` was decided: "tolerance" (rtol/atol), "exact" (integers and
    #: bools), "top1" (classifier agreement) or "snr" (signal-to-noise in dB).
    mode: str = "tolerance"
    top1_agreement: float | None = None
    snr_db: float | None = None

    def to_json(self) -> dict:
        """A JSON-ready dict (non-finite floats as strings "inf" / "nan")."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        d["histogram"] = list(self.histogram)
        return {k: _finite(v) for k, v in d.items()}


#: Bin edges of the absolute-error histogram: exact zeros, then decades 1e-10 … 1e2.
HISTOGRAM_EDGES: tuple = (0.0,) + tuple(10.0 ** k for k in range(-10, 3))


def _finite(v):
    if isinstance(v, float) and not np.isfinite(v):
        return "nan" if np.isnan(v) else ("inf" if v > 0 else "-inf")
    return v


def histogram(diff: np.ndarray) -> tuple:
    """Counts of ``diff`` per bin: ``[0]``, ``(0, 1e-10]``, …, ``(1e1, 1e2]``, ``> 1e2`` or non-finite."""
    flat = np.asarray(diff, dtype=np.float64).ravel()
    finite = flat[np.isfinite(flat)]
    counts = [int(np.sum(finite == 0))]
    for lo, hi in zip(HISTOGRAM_EDGES[:-1], HISTOGRAM_EDGES[1:]):
        counts.append(int(np.sum((finite > lo) & (finite <= hi))))
    counts.append(int(np.sum(finite > HISTOGRAM_EDGES[-1]) + (flat.size - finite.size)))
    return tuple(counts)


#: dtypes NumPy lacks (ml_dtypes aside): compared as float32, which holds each of their values exactly.
_WIDENED = (torch.bfloat16, *FLOAT8)


def to_numpy(x: Any) -> np.ndarray:
    """A tensor (or array-like) as NumPy for comparison; bfloat16 and float8 widened to float32."""
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return tensor_to_numpy((x.float() if x.dtype in _WIDENED else x).contiguous())
    return np.asarray(x)





def compare(name: str, ref, got, rtol: float | None = None, atol: float | None = None) -> OutputError:
    """Compare one output; shapes must match exactly, dtypes by kind.

    Relative error is ``max|got - ref| / max(max|ref|, 1e-6)``; an output passes
    when ``max_rel <= rtol`` or ``max_abs <= atol`` (integers and bools: exact; complex values: by their real
    and imaginary parts).
    """
    dtype = ref.dtype if isinstance(ref, torch.Tensor) else torch.float32
    d_rtol, d_atol = tolerance(dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    r, g = to_numpy(ref), to_numpy(got)
    if r.shape != g.shape:
        return OutputError(name, tuple(r.shape), str(dtype), float("inf"), float("inf"), float("inf"), 0.0, False,
                           f"shape {tuple(g.shape)} != {tuple(r.shape)}")
    if r.size == 0:
        return OutputError(name, tuple(r.shape), str(dtype), 0.0, 0.0, 0.0, 1.0, True)
    if np.iscomplexobj(r) or np.iscomplexobj(g):  # both parts compared (a real cast dropped the imaginary one)
        r, g = (np.stack([np.real(v), np.imag(v)], axis=-1) for v in (r, g))
    r64, g64 = r.astype(np.float64), g.astype(np.float64)
    equal = (r64 == g64) | (np.isnan(r64) & np.isnan(g64))  # also the same infinity, and NaN against NaN
    with np.errstate(invalid="ignore"):  # inf - inf where they are equal (masked)
        diff = np.where(equal, 0.0, np.abs(r64 - g64))
    max_abs = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)))
    scale = max(float(np.max(np.abs(np.where(np.isfinite(r64), r64, 0.0)))), 1e-6)
    max_rel = max_abs / scale
    finite = np.isfinite(r64) & np.isfinite(g64)  # the cosine of the finite part (the rest is in max_abs)
    rf, gf = np.where(finite, r64, 0.0), np.where(finite, g64, 0.0)
    denom = float(np.linalg.norm(rf) * np.linalg.norm(gf))
    cos = float(np.sum(rf * gf) / denom) if denom > 0 else (1.0 if max_abs == 0 else 0.0)
    exact = r.dtype.kind in "biu"
    passed = max_abs == 0 if exact else (max_rel <= rtol or max_abs <= atol)
    return OutputError(name, tuple(r.shape), str(dtype).replace("torch.", ""), max_abs, max_rel,
                       float(np.mean(diff)), cos, bool(passed), histogram=histogram(diff),
                       mode="exact" if exact else "tolerance")


def snr_db(ref, got) -> float:
    """Signal-to-noise ratio ``10·log10(Σref² / Σ(ref − got)²)`` in dB (``inf`` when equal)."""
    r, g = to_numpy(ref).astype(np.float64), to_numpy(got).astype(np.float64)
    noise = float(np.sum((r - g) ** 2))
    signal = float(np.sum(r ** 2))
    if noise == 0:
        return float("inf")
    if not np.isfinite(noise):
        return float("-inf")
    return float(10 * np.log10(max(signal, 1e-30) / noise))


def top1_agreement(ref, got) -> float:
    """Fraction of rows (all dims but the last) whose argmax over the last dim agrees."""
    r, g = to_numpy(ref).astype(np.float64), to_numpy(got).astype(np.float64)
    if r.ndim == 0 or r.size == 0:
        return 1.0
    return float(np.mean(np.argmax(r, axis=-1) == np.argmax(g, axis=-1)))


def task_agreement(name: str, ref, got, precision: str, task: str | None = None) -> OutputError:
    """Judge a low-precision (fp16 / bf16 / int8) artifact by task-level agreement.

    The element-wise metrics are still computed (and reported); ``passed`` comes
    from top-1 agreement for classifier outputs or from the SNR for regressions,
    against the thresholds of :data:`validators.tolerances.TASK_LEVEL`.

    Args:
        name: the output's name.
        ref: the reference output (PyTorch).
        got: the target's output.
        precision: "fp16", "bf16" or "int8".
        task: "classification" or "regression"; by default a floating output of
            rank 2 (batch × classes) is a classifier and anything else a regression.

    Returns:
        An :class:`OutputError` with ``mode`` "top1" or "snr" (integer outputs stay exact).
    """
    from validators.tolerances import task_thresholds

    base = compare(name, ref, got)
    if base.mode == "exact" or base.detail:
        return base
    r = to_numpy(ref)
    if task is None:
        task = "classification" if r.ndim == 2 and r.shape[-1] >= 2 else "regression"
    min_top1, min_snr = task_thresholds(precision)
    top1 = top1_agreement(ref, got) if r.ndim >= 1 and r.shape[-1] >= 2 else None
    snr = snr_db(ref, got)
    if task == "classification" and top1 is not None:
        mode, passed = "top1", top1 >= min_top1
    else:
        mode, passed = "snr", snr >= min_snr
    return replace(base, passed=bool(passed), mode=mode, top1_agreement=top1, snr_db=snr,
                   detail=f"{precision} artifact judged by {'top-1 agreement' if mode == 'top1' else 'SNR'}")
