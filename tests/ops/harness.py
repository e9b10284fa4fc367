"""Run one torch callable through capture → lowering → jax.jit and compare with PyTorch."""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np
import torch

from converter.capture import capture
from converter.lowering import lower
from converter.lowering.dtypes import numpy_to_tensor, tensor_to_numpy, to_torch_dtype


class FnModule(torch.nn.Module):
    """Wrap ``fn`` so tensor args are inputs and everything else is constant."""

    def __init__(self, fn: Callable, args: tuple, kwargs: dict):
        super().__init__()
        self.fn, self.template, self.kwargs = fn, args, kwargs

    def forward(self, *tensors: torch.Tensor) -> Any:
        it = iter(tensors)
        args = [next(it) if isinstance(a, torch.Tensor) else a for a in self.template]
        return self.fn(*args, **self.kwargs)


def run_both(fn: Callable, args: tuple, kwargs: dict | None = None, target: str = "tpu"):
    """Return ``(torch_outputs, our_outputs, ops_in_graph)`` as flat lists of tensors."""
    kwargs = kwargs or {}
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    module = FnModule(fn, args, kwargs).eval()
    with torch.no_grad():
        expected = module(*[t.clone() for t in tensors])
    expected = [e for e in torch.utils._pytree.tree_leaves(expected)]
    ep = capture(module, tensors)
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    prog = lower(ep, target=target)
    with jax.enable_x64(True):
        state = {k: jax.numpy.asarray(v) for k, v in prog.state.items()}
        inputs = [to_jax(t) for t in tensors]
        outs, _ = jax.jit(prog.fn)(state, *inputs)
        got = [to_torch(o) for o in outs]
    return expected, got, ops


def to_jax(t: torch.Tensor) -> jax.Array:
    """torch → JAX (bfloat16 and float8 via a bit view; ``device_put``: ``jnp.asarray`` compiles a copy)."""
    return jax.device_put(tensor_to_numpy(t.detach().cpu().contiguous()))


def to_torch(a: Any) -> torch.Tensor:
    """JAX → torch (bfloat16 and float8 via a bit view)."""
    return numpy_to_tensor(np.array(a, copy=True))


def assert_close(got: torch.Tensor, expected: Any, rtol: float, atol: float, what: str = "") -> None:
    """Shape and dtype exactly, then values (NaN positions must agree)."""
    if not isinstance(expected, torch.Tensor):
        expected = torch.tensor(expected)
    assert tuple(got.shape) == tuple(expected.shape), f"{what} shape {tuple(got.shape)} != {tuple(expected.shape)}"
    assert got.dtype == expected.dtype, f"{what} dtype {got.dtype} != {expected.dtype}"
    if expected.dtype.is_floating_point or expected.dtype.is_complex:
        wide = torch.complex128 if expected.dtype.is_complex else torch.float64  # complex: both parts
        torch.testing.assert_close(got.to(wide), expected.to(wide), rtol=rtol, atol=atol, equal_nan=True,
                                   msg=lambda m: f"{what}: {m}")
    else:
        assert torch.equal(got, expected), f"{what}: values differ\n{got}\n{expected}"
