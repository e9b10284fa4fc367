"""Out-of-range gather/scatter indices (lax's CLIP / FILL_OR_DROP / PROMISE_IN_BOUNDS modes),
SCATTER_ND index dtypes, zero-size and bfloat16 constants, statically empty results,
non-contiguous flips and float64 outputs: each model is exported, run in the LiteRT
Interpreter and compared with JAX or PyTorch."""

from __future__ import annotations

from typing import Callable

import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

from converter.api import convert
from exporters.litert import LiteRTArtifact, build
from tests.litert.adapter import JaxProgram
from tests.litert.conftest import REL_TOL, check_program, outputs, rel_error

aten = torch.ops.aten
R = np.random.default_rng(0)


def r(*shape: int) -> np.ndarray:
    """Standard-normal float32 samples."""
    return R.standard_normal(shape).astype(np.float32)


class Fn(nn.Module):
    """A module calling ``fn`` on its tensor inputs."""

    def __init__(self, fn: Callable):
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor):
        return self.fn(*xs)


def check_torch(fn: Callable, *xs: torch.Tensor) -> LiteRTArtifact:
    """Convert ``fn`` for LiteRT, run it in the Interpreter and compare with PyTorch (dtypes exactly)."""
    art = convert(Fn(fn).eval(), xs, target="litert")
    want = outputs(fn(*xs))
    got = art.run_raw(*[x.numpy() for x in xs])
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == w.dtype, f"output {i}: {g.dtype} != {w.dtype}"
        err = rel_error(g, w)
        assert err <= REL_TOL, f"output {i}: relative error {err:.3g} (got {g}, want {w})"
    return art


# -- 1. out-of-range indices: gathers clamp or fill, scatters drop (or clamp) --------------------
OOB = np.array([-3, 0, 5, 2, 4])  # rows -3, 5 and 4 are out of range of a length-4 dim


def test_gather_out_of_range_indices_clamp_or_fill():
    def fn(x, i, k):
        return (jnp.take(x, i, axis=0, mode="clip"), jnp.take(x, i, axis=1, mode="fill", fill_value=-1.0),
                x.at[i].get(mode="promise_in_bounds"), x.at[i % 4, i].get(mode="fill", fill_value=7.0),
                k.at[i].get(mode="fill"), jnp.take(x, np.array([7, 1]), axis=0, mode="fill", fill_value=2.0))

    check_program(JaxProgram(fn, [r(4, 6), OOB, np.arange(4, dtype=np.int32)]))


def test_scatter_out_of_range_updates_are_dropped():
    def fn(x, i, u, j):
        return (x.at[i].add(u, mode="drop"), x.at[i].set(u, mode="drop"), x.at[j].set(u[:3], mode="clip"),
                x.at[i, i % 3].add(u[:, 0], mode="drop"), x.at[np.array([0, 9])].add(1.0, mode="drop"),
                x.at[i[:0]].set(u[:0], mode="drop"))

    check_program(JaxProgram(fn, [r(4, 3), OOB, r(5, 3), np.array([1, 6, -9])]))


def test_torch_ops_with_out_of_range_indices_match_pytorch():
    def fn(x, m, s, k):
        return (torch.histc(x, bins=3, min=0, max=3), torch.masked_scatter(torch.zeros(4), m, s),
                torch.nonzero_static(k, size=2))

    check_torch(fn, torch.tensor([0.5, 5.0, -1.0, 2.5]), torch.tensor([False, True, False, True]),
                torch.arange(4.0), torch.tensor([1, 1, 1]))


# -- 2. SCATTER_ND indices and shape share a dtype (int64 index constants) ----------------------
def test_upsample_nearest_backward_matches_pytorch():
    def fn(g1, g2, g3):
        return (aten.upsample_nearest1d_backward(g1, [5], [1, 2, 2]),
                aten._upsample_nearest_exact1d_backward(g1, [5], [1, 2, 3]),
                aten.upsample_nearest2d_backward(g2, [4, 6], [1, 2, 2, 3]),
                aten._upsample_nearest_exact2d_backward(g2, [4, 6], [1, 2, 3, 4]),
                aten.upsample_nearest3d_backward(g3, [2, 4, 4], [1, 1, 1, 2, 3]))

    check_torch(fn, torch.randn(1, 2, 5), torch.randn(1, 2, 4, 6), torch.randn(1, 1, 2, 4, 4))


# -- 3. zero-size constants are stored; bfloat16 runs as float32 ----------------------------------
def test_zero_size_constants_match_pytorch():
    def fn(x, i):
        return x, torch.zeros(0, 2), torch.index_select(x, 0, i)

    check_torch(fn, torch.ones(3, 4), torch.zeros(0, dtype=torch.int64))


def test_bfloat16_runs_as_float32_and_comes_back_as_bfloat16():
    """TFLite has no bfloat16: it computes as float32, the file's inputs and outputs are float32 and the artifact
    casts (a constant, a conversion, a bfloat16 input)."""
    def fn(x, b):
        return torch.full((2,), 1.5, dtype=torch.bfloat16), x.to(torch.bfloat16) * 2, b * b + 1

    x, b = torch.tensor([1.0, -3.0]), torch.tensor([0.5, 7.0], dtype=torch.bfloat16)
    art = convert(Fn(fn).eval(), (x, b), target="litert")
    for got, want in zip(art(x, b), fn(x, b), strict=True):
        assert got.dtype == torch.bfloat16 and torch.equal(got, want)
    assert {d["dtype"] for d in art.interpreter().get_input_details()} == {np.float32}


# -- 4. statically empty results and empty-operand reductions are constants ---------------------
def test_empty_results_match_pytorch():
    def fn(p, x, a, b, e):
        return (torch.pdist(p), torch.diagonal(x, 5), torch.mm(a, b), e.sum(1), e.amax(0), a @ b + 1,
                nn.functional.linear(a, torch.ones(2, 0)), torch.cat([x, x[:0]]) * 2)

    art = check_torch(fn, torch.ones(1, 3), torch.ones(3, 2), torch.zeros(3, 0), torch.zeros(0, 2),
                      torch.ones(2, 0))
    assert not {"BATCH_MATMUL", "FULLY_CONNECTED", "SUM"} & set(art.ops)


# -- 5. REVERSE_V2 takes contiguous axes only -----------------------------------------------------
def test_flip_of_non_contiguous_axes_matches_jax():
    def fn(x):
        return (jnp.flip(x, (0, 2)), jnp.flip(x, (0, 1)), jnp.flip(x), jnp.flip(x.transpose(2, 0, 1), (1, 2)),
                jnp.flip(jnp.broadcast_to(x[:1], x.shape), (0, 2)) + 0)

    art = check_program(JaxProgram(fn, [r(2, 3, 4)]))
    assert art.ops["REVERSE_V2"] == 6


# -- 6. float64 outputs come back as float64 (also from a saved and loaded file) ----------------
def test_float64_outputs_are_cast_back_to_the_declared_dtype(tmp_path):
    program = JaxProgram(lambda x: (x.astype(jnp.float64).sum(0), x * 2), [r(2, 3)])
    art = build(program)
    x = program.samples[0]
    want = program.reference(x)
    path = tmp_path / "m.tflite"
    art.save(path)
    for a in (art, LiteRTArtifact.load(path)):
        got = a.run_raw(x)
        assert [g.dtype for g in got] == [np.dtype(np.float64), np.dtype(np.float32)]
        assert all(rel_error(g, w) <= REL_TOL for g, w in zip(got, want))
        assert a(torch.from_numpy(x))[0].dtype == torch.float64
