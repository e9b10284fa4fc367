"""Error metrics between a reference output and a target's output."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

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

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        d = asdict(self)
        d["shape"] = list(self.shape)
        return d


def _np(x) -> np.ndarray:
    if isinstance(x, torch.Tensor):
        x = x.detach().cpu()
        return x.float().numpy() if x.dtype == torch.bfloat16 else x.numpy()
    return np.asarray(x)


def compare(name: str, ref, got, rtol: float | None = None, atol: float | None = None) -> OutputError:
    """Compare one output; shapes must match exactly, dtypes by kind.

    Relative error is ``max|got - ref| / max(max|ref|, 1e-6)``; an output passes
    when ``max_rel <= rtol`` or ``max_abs <= atol`` (integers and bools: exact).
    """
    dtype = ref.dtype if isinstance(ref, torch.Tensor) else torch.float32
    d_rtol, d_atol = tolerance(dtype)
    rtol = d_rtol if rtol is None else rtol
    atol = d_atol if atol is None else atol
    r, g = _np(ref), _np(got)
    if r.shape != g.shape:
        return OutputError(name, tuple(r.shape), str(dtype), float("inf"), float("inf"), float("inf"), 0.0, False,
                           f"shape {tuple(g.shape)} != {tuple(r.shape)}")
    if r.size == 0:
        return OutputError(name, tuple(r.shape), str(dtype), 0.0, 0.0, 0.0, 1.0, True)
    r64, g64 = r.astype(np.float64), g.astype(np.float64)
    diff = np.abs(r64 - g64)
    both_nan = np.isnan(r64) & np.isnan(g64)
    diff = np.where(both_nan, 0.0, diff)
    max_abs = float(np.nanmax(np.where(np.isnan(diff), np.inf, diff)))
    scale = max(float(np.max(np.abs(np.where(np.isfinite(r64), r64, 0.0)))), 1e-6)
    max_rel = max_abs / scale
    denom = float(np.linalg.norm(r64) * np.linalg.norm(g64))
    cos = float(np.sum(r64 * g64) / denom) if denom > 0 else (1.0 if max_abs == 0 else 0.0)
    exact = r.dtype.kind in "biu"
    passed = max_abs == 0 if exact else (max_rel <= rtol or max_abs <= atol)
    return OutputError(name, tuple(r.shape), str(dtype).replace("torch.", ""), max_abs, max_rel,
                       float(np.mean(diff)), cos, bool(passed))
