"""Constant folding (exporters.fold, both exporters): every NumPy rule gives XLA's bits, per eqn."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from converter import convert
from exporters.litert.emitter import Val
from exporters.fold import NUMPY_RULES, fold

I32 = np.array([[2**31 - 1, -5, 7], [0, -(2**31), 3]], np.int32)
J32 = np.array([[1, -7, 7], [4, -1, -3]], np.int32)
F32 = np.array([[1.5, -0.0, np.inf], [np.nan, -2.25, 3e38]], np.float32)
G32 = np.array([[0.5, 0.0, -np.inf], [1.0, -2.25, 3e38]], np.float32)
BOOL = np.array([[True, False, True], [False, False, True]])

CASES = {
    "arith_int_wraps": (lambda a, b: (a + b, a - b, a * b, -a), [I32, J32]),
    "arith_float": (lambda a, b: (a + b, a - b, a * b, -a), [F32, G32]),
    "compare": (lambda a, b: (a < b, a <= b, a > b, a >= b, a == b, a != b), [F32, G32]),
    "bitwise": (lambda a, b, p: (a & b, a | b, ~a, p & ~p, p | jnp.logical_not(p)), [I32, J32, BOOL]),
    "select": (lambda p, a, b, i: (jax.lax.select_n(p, a, b), jax.lax.select_n(i, a, b, a * 2)),
               [BOOL, F32, G32, np.array([[0, 1, 2], [2, 1, 0]], np.int32)]),
    "convert": (lambda a, f, p: (a.astype(jnp.float32), a.astype(jnp.int8), f.astype(jnp.float16),
                                 f.astype(jnp.bool_), p.astype(jnp.int32), f.astype(jnp.int32)), [I32, F32, BOOL]),
    "layout": (lambda a: (a.reshape(3, 2), a.reshape(1, 2, 3)[0], a.T,
                          jax.lax.rev(a, (1,)), jax.lax.concatenate([a, a * 2], 0), a[:, 1:], a[1:, ::2],
                          jax.lax.slice(a, (0, 2), (2, 3))), [J32]),
}


@pytest.mark.parametrize("name", list(CASES))
def test_fold_numpy_rules_match_xla(name):
    fn, args = CASES[name]
    with jax.enable_x64(True):
        closed = jax.make_jaxpr(fn)(*args)
        want = [np.asarray(w) for w in jax.jit(fn)(*args)]
    env = dict(zip(closed.jaxpr.invars, args))
    on_numpy = 0
    for eqn in closed.jaxpr.eqns:
        ins = [np.asarray(v.val, v.aval.dtype) if hasattr(v, "val") else env[v] for v in eqn.invars]
        env[eqn.outvars[0]] = fold(eqn, [Val(a.shape, a.dtype, const=a) for a in ins], Val)[0].const
        with np.errstate(all="ignore"):
            on_numpy += NUMPY_RULES[eqn.primitive.name](*ins, **eqn.params) is not None
    assert on_numpy >= len(closed.jaxpr.eqns) - 1  # only the float→int cast needs XLA
    for v, w in zip(closed.jaxpr.outvars, want):
        got = env[v]
        assert (got.dtype, got.shape) == (w.dtype, w.shape)
        np.testing.assert_array_equal(got, w)


class _TableRow(torch.nn.Module):
    """A constant table sliced at a position that depends on a dynamic size (GPT-Neo's causal mask of the last
    ``q`` of ``k`` positions): a static output shape, a symbolic start."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("table", torch.arange(32 * 4, dtype=torch.float32).reshape(32, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        return x[-1:] + self.table[n - 1:n]


@pytest.mark.parametrize("target", ["onnx", "litert"])
def test_a_constant_sliced_at_a_symbolic_position_is_not_folded(target):
    """Folding it asked its symbolic start for an int (jax's InconclusiveDimensionOperation ended the export)."""
    model = _TableRow().eval()
    art = convert(model, (torch.randn(5, 4),), target=target,
                  dynamic_shapes=({0: torch.export.Dim("n", min=2, max=32)},))
    for n in (3, 9):
        x = torch.randn(n, 4)
        np.testing.assert_array_equal(np.asarray(art(x)), model(x).numpy())
