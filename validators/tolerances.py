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
}

#: Per-op overrides: ATen op name → ((rtol, atol), reason).
BY_OP: dict[str, tuple[tuple[float, float], str]] = {}


def tolerance(dtype: torch.dtype, op: str | None = None) -> tuple[float, float]:
    """Return ``(rtol, atol)`` for outputs of ``dtype`` (exact for integers and bools)."""
    if op is not None and op in BY_OP:
        return BY_OP[op][0]
    return BY_DTYPE.get(dtype, (0.0, 0.0))
