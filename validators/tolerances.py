"""Tolerances in one place (STYLE.md #9): per dtype, with per-op overrides and reasons."""

from __future__ import annotations

import torch

#: (max relative error, max absolute error) a target may show against PyTorch.
#: Relative error is max|got - ref| / max(max|ref|, tiny): robust to zeros.
BY_DTYPE: dict[torch.dtype, tuple[float, float]] = {
    torch.float32: (1e-4, 1e-5),
    torch.float64: (1e-7, 1e-9),
    torch.float16: (1e-2, 1e-3),
    torch.bfloat16: (2e-2, 1e-2),
    torch.complex64: (1e-4, 1e-5),  # (their parts': float32's, float64's)
    torch.complex128: (1e-7, 1e-9),
}

#: Per-op overrides: ATen op name → ((rtol, atol), reason).
BY_OP: dict[str, tuple[tuple[float, float], str]] = {}


def tolerance(dtype: torch.dtype, op: str | None = None) -> tuple[float, float]:
    """Return ``(rtol, atol)`` for outputs of ``dtype`` (exact for integers and bools)."""
    if op is not None and op in BY_OP:
        return BY_OP[op][0]
    return BY_DTYPE.get(dtype, (0.0, 0.0))


#: Task-level thresholds for low-precision artifacts (fp16 / bf16 / int8), judged
#: instead of element-wise fp32 tolerances: (minimum top-1 agreement of
#: classifier outputs, minimum SNR in dB of regression outputs). bf16 keeps 8
#: mantissa bits (~48 dB per rounding), fp16 11 bits; a few layers of accumulated
#: rounding cost ~10-20 dB. int8 is a coarse quantization (~6 dB per bit of 8).
TASK_LEVEL: dict[str, tuple[float, float]] = {
    "fp16": (0.99, 30.0),
    "bf16": (0.95, 20.0),
    "int8": (0.90, 12.0),
}

#: Precisions judged by :data:`TASK_LEVEL` instead of :data:`BY_DTYPE`.
LOW_PRECISION = tuple(TASK_LEVEL)


def task_thresholds(precision: str) -> tuple[float, float]:
    """Return ``(min_top1_agreement, min_snr_db)`` for a low-precision artifact.

    Raises:
        KeyError: ``precision`` is not one of :data:`LOW_PRECISION`.
    """
    return TASK_LEVEL[precision]


def cross_target(rtol: float, atol: float) -> tuple[float, float]:
    """Tolerance between two targets that are each within ``(rtol, atol)`` of PyTorch.

    Doubled by the triangle inequality: two outputs within ``atol`` of the same
    reference are within ``2·atol`` of each other.
    """
    return 2 * rtol, 2 * atol
