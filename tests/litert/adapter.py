"""A LoweredProgram stand-in for hand-written JAX functions (same conventions:
composites named ``aten.<op>`` with schema-named attributes and ``operands``)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import jax
import numpy as np
import torch

from converter.lowering.dtypes import to_torch_dtype
from converter.lowering.interpreter import TensorSpec


@dataclass
class JaxProgram:
    """``fn(*inputs) -> tuple`` with sample inputs; ``dynamic`` maps input index → {axis: name}."""

    fn: Callable
    samples: Sequence[np.ndarray]
    dynamic: dict | None = None

    def closed(self) -> Callable:
        def f(*xs: Any) -> tuple:
            out = self.fn(*xs)
            return tuple(out) if isinstance(out, (tuple, list)) else (out,)
        return f

    def example_inputs(self) -> list:
        return [jax.ShapeDtypeStruct(np.shape(s), np.asarray(s).dtype) for s in self.samples]

    @property
    def inputs(self) -> list[TensorSpec]:
        specs = []
        for i, s in enumerate(self.samples):
            shape = list(np.shape(s))
            for axis, name in (self.dynamic or {}).get(i, {}).items():
                shape[axis] = name
            specs.append(TensorSpec(f"x{i}", tuple(shape), to_torch_dtype(np.asarray(s).dtype)))
        return specs

    def reference(self, *xs: Any) -> list[np.ndarray]:
        """Run ``fn`` in JAX (x64 on, like the converter)."""
        with jax.enable_x64(True):
            xs = [jax.numpy.asarray(x) for x in xs]
            return [np.asarray(o) for o in jax.jit(self.closed())(*xs)]


def composite(name: str, fn: Callable, operands: str) -> Callable:
    """Wrap ``fn`` as ``jax.lax.composite(name=...)`` the way the lowering registry does."""
    def call(*args: Any, **attrs: Any) -> Any:
        return jax.lax.composite(lambda *a, **_: fn(*a, **attrs), name=name)(*args, operands=operands, **attrs)
    return call


def to_torch(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(x))
