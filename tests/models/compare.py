"""Output comparison for model tests: max relative error against PyTorch fp32.

``rel_error(a, b) = max|a - b| / max(max|b|, 1e-6)`` over one output tensor. Float
outputs must stay within a tolerance of it; integer and bool outputs (argmax,
top-k indices, masks) must be equal. Shapes and dtypes must match exactly first.
"""

from __future__ import annotations

from typing import Any

import torch

from validators.tolerances import tolerance

#: Max relative error allowed between a target and PyTorch fp32 (1e-4), from the one
#: tolerance table (validators/tolerances.py, STYLE.md #9), which defines it the same way.
FP32_REL_TOL = tolerance(torch.float32)[0]


def flat_outputs(out: Any) -> list[torch.Tensor]:
    """The tensors of a model's output structure (tuple, dict, single tensor), in order."""
    return [t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]


def rel_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    """``max|got - expected| / max(max|expected|, 1e-6)``; equal infinities count as equal,
    a NaN in only one of the two is an infinite error."""
    a, b = got.detach().double(), expected.detach().double()
    if b.numel() == 0:
        return 0.0
    nan_a, nan_b = torch.isnan(a), torch.isnan(b)
    if not torch.equal(nan_a, nan_b):
        return float("inf")
    same = (a == b) | nan_b
    diff = torch.where(same, torch.zeros_like(a), (a - b).abs())
    finite = b[torch.isfinite(b)]
    scale = max(finite.abs().max().item() if finite.numel() else 0.0, 1e-6)
    return diff.max().item() / scale


def assert_outputs_close(got: Any, expected: Any, tol: float = FP32_REL_TOL, what: str = "") -> None:
    """Assert two output structures agree: count, then per output shape, dtype and values.

    Args:
        got: outputs of the target (any pytree of tensors).
        expected: outputs of the reference.
        tol: max relative error for floating outputs.
        what: a label for failure messages (e.g. "resnet/tpu").
    """
    got, expected = flat_outputs(got), flat_outputs(expected)
    assert len(got) == len(expected), f"{what}: {len(got)} outputs, expected {len(expected)}"
    errors = []
    for i, (g, e) in enumerate(zip(got, expected)):
        label = f"{what} output {i}"
        assert tuple(g.shape) == tuple(e.shape), f"{label}: shape {tuple(g.shape)} != {tuple(e.shape)}"
        assert g.dtype == e.dtype, f"{label}: dtype {g.dtype} != {e.dtype}"
        if e.dtype.is_floating_point or e.dtype.is_complex:
            err = rel_error(g, e)
            if not err <= tol:
                errors.append(f"{label} {list(e.shape)}: max rel error {err:.3g} > {tol:g}")
        elif not torch.equal(g, e):
            n = int((g != e).sum())
            errors.append(f"{label} {list(e.shape)} {e.dtype}: {n} of {e.numel()} values differ")
    assert not errors, "; ".join(errors)
