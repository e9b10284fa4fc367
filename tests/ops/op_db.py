"""The op test table (STYLE.md #8): one OpInfo per op, gathered from family files.

Each ``samples_<family>.py`` module defines ``OPS: list[OpInfo]``. An OpInfo
names the ATen overloads it covers; the test checks that the captured graph
really contains them (so coverage cannot be claimed by accident), then compares
the lowered program against PyTorch CPU: shape and dtype exactly, then values.
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass, field
from typing import Any, Callable

import torch


@dataclass
class Sample:
    """One sample input: positional tensors/values and keyword arguments."""

    args: tuple
    kwargs: dict = field(default_factory=dict)
    name: str = ""


@dataclass
class ErrorSample:
    """An input that must fail conversion with a message matching ``pattern``."""

    args: tuple
    pattern: str
    kwargs: dict = field(default_factory=dict)


@dataclass
class OpInfo:
    """One op's test record.

    Attributes:
        name: test id.
        fn: the torch callable under test; tensors in ``Sample.args`` become
            model inputs, everything else is passed through as a constant.
        aten: ATen overloads this record covers (must appear in the captured graph).
        samples: a callable ``(dtype) -> list[Sample]``.
        dtypes: dtypes to test.
        tol: ``{dtype: (rtol, atol)}`` overrides of the default tolerances.
        errors: inputs that must raise, with message patterns.
        xfail: ``{sample_name_or_dtype: reason}``; a reason is mandatory.
    """

    name: str
    fn: Callable[..., Any]
    aten: tuple
    samples: Callable[[torch.dtype], list[Sample]]
    dtypes: tuple = (torch.float32,)
    tol: dict = field(default_factory=dict)
    errors: list = field(default_factory=list)
    xfail: dict = field(default_factory=dict)


DEFAULT_TOL = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (2e-2, 2e-2),
}


def all_ops() -> list[OpInfo]:
    """Every OpInfo from every ``samples_*`` module in this package."""
    import tests.ops as pkg

    ops: list[OpInfo] = []
    for info in sorted(pkgutil.iter_modules(pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("samples_"):
            ops.extend(importlib.import_module(f"tests.ops.{info.name}").OPS)
    names = [o.name for o in ops]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"duplicate OpInfo names: {sorted(dup)}")
    return ops


def make(shape: tuple, dtype: torch.dtype = torch.float32, *, low: float = -3, high: float = 3,
         seed: int = 0) -> torch.Tensor:
    """A seeded random tensor (ints in [low, high), bools random)."""
    g = torch.Generator().manual_seed(seed + 17 * len(shape) + sum(shape))
    if dtype == torch.bool:
        return torch.rand(shape, generator=g) > 0.5
    if not dtype.is_floating_point:
        return torch.randint(int(low), int(high), shape, generator=g, dtype=dtype)
    return (torch.rand(shape, generator=g, dtype=torch.float32) * (high - low) + low).to(dtype)
