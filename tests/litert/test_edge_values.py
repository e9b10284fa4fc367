"""Edge values and dtypes through the LiteRT exporter: broadcasting into ATAN2 and STABLEHLO_SHIFT_LEFT (the
binary kernels that do not broadcast), shifts by negative or wide amounts, the sign of a negated zero, fully
masked attention rows, dtypes a TFLite kernel lacks (8/16-bit integers, bool, int64 ARG_MAX), ``x ** 0``,
logcumsumexp at ±inf, exact float remainder, the inverse trigonometric and hyperbolic functions, log1p and expm1
near 0. Each case is exported, run in the LiteRT Interpreter (XNNPACK on) and compared with PyTorch or JAX."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from converter.api import convert
from converter.errors import UnsupportedOpError
from exporters.litert import build
from tests.litert.adapter import JaxProgram
from tests.litert.conftest import (REL_TOL, XNNPACK_EXTREMES, check_model, outputs, rel_error,  # noqa: F401
                                   xnnpack_loses_float_extremes)  # (the mark's condition)

ROOT = Path(__file__).resolve().parents[2]
inf, nan = float("inf"), float("nan")


class Fn(nn.Module):
    """``fn(*tensors)`` as a module."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *xs: torch.Tensor):
        return self.fn(*xs)


def litert_vs_torch(fn, *args: torch.Tensor, exact: bool = False):
    """Convert ``fn`` to LiteRT, run it on ``args``; return (artifact, outputs, torch's outputs), checked."""
    return check_model(Fn(fn).eval(), args, exact)


# -- broadcasting ---------------------------------------------------------------------------------------


def test_atan2_broadcasts_its_operands_like_torch():
    """ATAN2 checks ranks only and reads out of bounds for unequal shapes: a row, a column, a 0-d tensor."""
    y, row, col, s = torch.randn(2, 3), torch.tensor([2.0, -1.0, 0.5]), torch.randn(2, 1), torch.tensor(-2.0)
    art, _, _ = litert_vs_torch(lambda y, row, col, s: (torch.atan2(y, row), torch.atan2(col, row),
                                                        torch.atan2(y, s), torch.atan2(s, y)), y, row, col, s)
    assert art.ops["ATAN2"] == 4


def test_atan2_broadcast_in_jax():
    """The same through a hand-written JAX function (a pending ``broadcast_in_dim`` on each side)."""
    x = np.random.default_rng(0).standard_normal((4, 1, 3)).astype(np.float32)
    z = np.random.default_rng(1).standard_normal((5, 1)).astype(np.float32)
    prog = JaxProgram(lambda x, z: (jnp.arctan2(x, z), jnp.arctan2(z, 2.0), jnp.arctan2(3.0, x)), [x, z])
    art = build(prog)
    for g, w in zip(outputs(art(x, z)), prog.reference(x, z)):
        assert rel_error(g, w) <= REL_TOL


# -- attention --------------------------------------------------------------------------------------------


def _qkv(L: int = 3, S: int = 4):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(2, 2, L, 8, generator=g), torch.randn(2, 2, S, 8, generator=g),
            torch.randn(2, 2, S, 8, generator=g))


def test_sdpa_fully_masked_row_gives_zero_not_nan():
    """The issue's example: a bool mask input whose first row masks every key."""
    q, k, v = torch.ones(1, 1, 2, 4), torch.ones(1, 1, 3, 4), torch.ones(1, 1, 3, 4)
    mask = torch.tensor([[[[False, False, False], [True, False, True]]]])
    art, got, _ = litert_vs_torch(F.scaled_dot_product_attention, q, k, v, mask)
    assert art.ops["SOFTMAX"] == 1  # the composite rule, not the decomposition
    np.testing.assert_array_equal(got[0][0, 0, 0], 0.0)


@pytest.mark.parametrize("kind", ["bool", "float", "bool_2d", "padding"])
def test_sdpa_masks_with_fully_masked_rows_match_torch(kind):
    """Runtime masks of every kind: bool and additive float (B, 1, L, S), a 2-D bool one and a
    key-padding bool (B, 1, 1, S) one where one batch entry has no key at all."""
    q, k, v = _qkv()
    g = torch.Generator().manual_seed(3)
    allowed = torch.rand(2, 1, 3, 4, generator=g) > 0.4
    allowed[0, 0, 1] = False
    allowed[1, 0, 2] = False
    mask = {"bool": allowed, "float": torch.where(allowed, torch.randn(allowed.shape, generator=g), -inf),
            "bool_2d": allowed[0, 0], "padding": torch.tensor([[True, False, True, True], [False] * 4])[:, None, None]}
    art, got, want = litert_vs_torch(F.scaled_dot_product_attention, q, k, v, mask[kind])
    assert art.ops["SOFTMAX"] == 1
    assert np.all(np.isfinite(got[0]))


class ConstMaskAttention(nn.Module):
    """SDPA with a constant bool mask (folded at export) that masks all of query row 1."""

    def __init__(self, full_row: bool):
        super().__init__()
        m = torch.tril(torch.ones(3, 4, dtype=torch.bool))
        if full_row:
            m[1] = False
        self.register_buffer("mask", m)

    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask)


def test_sdpa_guards_only_where_a_row_can_be_fully_masked():
    """A constant mask masking a whole row gets the guard (a constant row select); no mask, a causal one
    and a constant mask allowing a key in every row keep the bare SOFTMAX."""
    q, k, v = _qkv()
    art, got, _ = litert_vs_torch(ConstMaskAttention(full_row=True), q, k, v)
    assert np.all(got[0][:, :, 1] == 0) and art.ops["SELECT_V2"] == 1 and art.ops["REDUCE_ANY"] == 0
    for fn in (F.scaled_dot_product_attention, lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True),
               ConstMaskAttention(full_row=False)):
        art, _, _ = litert_vs_torch(fn, q, k, v)
        assert art.ops["SOFTMAX"] == 1
        assert art.ops["SELECT_V2"] == art.ops["REDUCE_ANY"] == art.ops["REDUCE_MAX"] == 0, dict(art.ops)


# -- dtypes the kernels lack ----------------------------------------------------------------------------

#: Ops on 8/16-bit integers and bools that reached quantized or missing TFLite kernels (several
#: aborted the process), by name: ``fn(a, b)`` with ``b`` in 1..6.
DTYPE_CASES = {
    "add": "a + b", "sub": "a - b", "mul": "a * b", "mul_scalar": "a * 3", "bcast_add": "a + b[:1]",
    "div_trunc": "torch.div(a, b, rounding_mode='trunc')", "div_floor": "torch.div(a, b, rounding_mode='floor')",
    "remainder": "torch.remainder(a, b)", "fmod": "torch.fmod(a, b)", "eq": "a == b", "ne": "a != b",
    "ne_bcast": "a != b[:, :1]", "lt": "a < b", "ge": "a >= b", "where": "torch.where(a > b, a, b)",
    "bitwise_not": "~a", "neg": "-a", "abs": "torch.abs(a)", "sign": "torch.sign(a)", "square": "a * a",
    "pow3": "a ** 3", "pow0": "a ** 0", "sum": "torch.sum(a, -1, dtype=a.dtype)",
    "cumsum": "torch.cumsum(a, -1, dtype=a.dtype)", "cumprod": "torch.cumprod(a, -1, dtype=a.dtype)",
    "cummax": "torch.cummax(a, -1)[0]", "amax": "torch.amax(a, -1)", "amin": "torch.amin(a, 0)",
    "argmax": "torch.argmax(a, -1)", "argmin": "torch.argmin(a, 0)", "maximum": "torch.maximum(a, b)",
    "minimum": "torch.minimum(a, b[:, :1])", "clamp": "torch.clamp(a, 1, 5)",
}
DTYPES = ["uint8", "int8", "int16", "bool"]

_RUNNER = r"""
import json, sys, warnings
import torch
from converter.api import convert
warnings.filterwarnings("ignore")
class Fn(torch.nn.Module):
    def __init__(self, srcs):
        super().__init__(); self.srcs = srcs
    def forward(self, a, b):
        return tuple(eval(src) for src in self.srcs)
def inputs(dt):
    g = torch.Generator().manual_seed(0)
    if dt == "bool":
        return tuple(torch.rand(3, 4, generator=g) > 0.5 for _ in range(2))
    lo, hi = (0, 250) if dt == "uint8" else (-120, 120)
    return (torch.randint(lo, hi, (3, 4), generator=g).to(getattr(torch, dt)),
            torch.randint(1, 7, (3, 4), generator=g).to(getattr(torch, dt)))
def report(name, dt, res):
    print(json.dumps([name, dt, res]), flush=True)
def run(srcs, a, b):
    got = convert(Fn(srcs).eval(), (a, b), target="litert")(a, b)
    return got if isinstance(got, (tuple, list)) else (got,)  # (one output comes back bare)
def same(got, want):
    return got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want)
def one(name, src, dt, a, b, want):
    report(name, dt, "started")  # a kernel that aborts leaves this last
    try:
        got = run([src], a, b)[0]
    except Exception as e:
        return report(name, dt, f"{type(e).__name__}: {str(e).splitlines()[0]}")
    report(name, dt, "ok" if same(got, want) else f"{got.tolist()} != {want.tolist()}")
grouped, cases = json.loads(sys.argv[1]), json.loads(sys.argv[2])
for dt in dict.fromkeys(dt for _, _, dt in cases):
    a, b = inputs(dt)
    todo = {}
    for name, src, d in cases:
        if d == dt:
            try:
                todo[name] = (src, Fn([src]).eval()(a, b)[0])
            except Exception:
                report(name, dt, "torch refuses")
    if grouped and todo:  # one file for every case of the dtype; the cases one by one where that fails
        report("*", dt, "started")
        try:
            got = run([src for src, _ in todo.values()], a, b)
            if all(same(g, w) for g, (_, w) in zip(got, todo.values(), strict=True)):
                for name in todo:
                    report(name, dt, "ok")
                continue
        except Exception:
            pass
    for name, (src, want) in todo.items():
        one(name, src, dt, a, b, want)
"""


def _run_isolated(cases: list, grouped: bool) -> dict:
    """Run ``cases`` in a child interpreter (a kernel may abort the process); ``{(name, dtype): result}``.

    ``grouped``: each dtype's cases converted as one model first (the cases one by one where it fails)."""
    proc = subprocess.run([sys.executable, "-c", _RUNNER, json.dumps(grouped), json.dumps(cases)], cwd=ROOT,
                          capture_output=True, text=True, timeout=900)
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("["):
            name, dt, res = json.loads(line)
            results[(name, dt)] = res
    if proc.returncode != 0:
        last = [k for k, v in results.items() if v == "started"]
        raise AssertionError(f"the child died (rc {proc.returncode}) on {last[-1:]}: {proc.stderr[-600:]}")
    return results


@functools.lru_cache(maxsize=None)
def _dtype_results() -> dict:
    """Every case on every dtype, in one child; where that child dies, again one case per conversion (which
    names the kernel that aborts)."""
    cases = [[name, src, dt] for dt in DTYPES for name, src in DTYPE_CASES.items()]
    try:
        return _run_isolated(cases, grouped=True)
    except AssertionError:
        return _run_isolated(cases, grouped=False)


@pytest.mark.xdist_group("litert-dtype-cases")
@pytest.mark.parametrize("dtype", DTYPES)
def test_ops_on_dtypes_the_kernels_lack_match_torch(dtype):
    """Every case exports, runs without aborting the interpreter and equals torch exactly (wrapping included)."""
    results = {name: r for (name, dt), r in _dtype_results().items() if dt == dtype and name != "*"}
    assert set(results) == set(DTYPE_CASES)
    bad = {name: r for name, r in results.items() if r not in ("ok", "torch refuses")}
    assert not bad, bad
    assert sum(r == "ok" for r in results.values()) >= len(DTYPE_CASES) // 2


def test_bool_max_min_use_logical_ops():
    a, b = torch.tensor([[True, False], [False, False]]), torch.tensor([[False, False], [True, False]])
    art, _, _ = litert_vs_torch(lambda a, b: (torch.maximum(a, b), torch.minimum(a, b), torch.amax(a, -1),
                                              torch.amin(b, 0)), a, b)
    assert art.ops["LOGICAL_OR"] == art.ops["LOGICAL_AND"] == art.ops["REDUCE_ANY"] == art.ops["REDUCE_ALL"] == 1
    assert art.ops["MAXIMUM"] == art.ops["MINIMUM"] == art.ops["REDUCE_MAX"] == art.ops["REDUCE_MIN"] == 0


def test_argmax_of_int64_is_exact_beyond_int32():
    """ARG_MAX has no int64 kernel: ``ARG_MAX(x == REDUCE_MAX(x))``, first index on ties, full int64 range."""
    x = torch.tensor([[2, -6, 3, 3], [2**40 + 1, 2**40, 2**40 + 1, -2**62], [-2**63, -2**63, 5, 2**63 - 1]])
    litert_vs_torch(lambda x: (torch.argmax(x, -1), torch.argmin(x, -1), torch.argmax(x, 0), torch.argmin(x, 0)), x)


def test_int64_abs_and_sign_are_exact_beyond_int32():
    """ABS and SIGN have no int64 kernel: MAXIMUM(x, -x) and clamp(x, -1, 1) instead of int32 CASTs."""
    x = torch.tensor([2**40, -2**40 - 3, -7, 0, 2**63 - 1, -2**63, 2**32])
    litert_vs_torch(lambda x: (torch.abs(x), torch.sign(x)), x)


def test_integer_pow_zero_is_ones():
    x = torch.tensor([[1, 2], [3, -4]])
    litert_vs_torch(lambda x: (torch.pow(x, 0), torch.pow(x.to(torch.int32), 0) + x.to(torch.int32)), x)


def test_kernel_without_an_exact_type_is_refused_at_export():
    """int64 has no RIGHT_SHIFT kernel and no wider type: refused when exporting, naming the kernel."""
    x = np.array([-5, 7, 2**40], np.int64)
    with pytest.raises(UnsupportedOpError, match="RIGHT_SHIFT has no int64 kernel"):
        build(JaxProgram(lambda x: jax.lax.shift_right_arithmetic(x, jnp.int64(1)), [x]))


def test_right_shift_by_a_negative_or_wide_amount_fills_with_the_sign():
    """TFLite's RIGHT_SHIFT does not shift for a negative amount; torch (and lax) fill with the sign bit."""
    a = torch.tensor([1, -1, 5, -8, 8, 7], dtype=torch.int32)
    b = torch.tensor([31, 32, -1, 3, 40, 0], dtype=torch.int32)
    litert_vs_torch(lambda a, b: (a >> b, a >> torch.tensor([-2, 33, -1, 1, 0, 2], dtype=torch.int32)), a, b)


def test_left_shift_by_a_negative_or_wide_amount_gives_zero():
    """STABLEHLO_SHIFT_LEFT shifts by the amount modulo 32; torch (and lax) give 0. int64 shifts by constants."""
    a = torch.tensor([1, -1, 5, -8, 8, 7], dtype=torch.int32)
    b = torch.tensor([31, 32, -1, 3, 40, 0], dtype=torch.int32)
    litert_vs_torch(lambda a, b: (a << b, (a.to(torch.int8) << 5), a.long() << 40, a.long() << 3), a, b, exact=True)
    with pytest.raises(UnsupportedOpError, match="int64 by a tensor amount"):
        convert(Fn(lambda a, b: a.long() << b.long()).eval(), (a, b), target="litert")


# -- float edge values ----------------------------------------------------------------------------------


@XNNPACK_EXTREMES
def test_logcumsumexp_keeps_infinities():
    x = torch.tensor([[-inf, -inf, 1.0, -inf], [inf, inf, 0.0, -inf], [-inf, inf, 2.0, 3.0], [0.5, -1.0, 2.0, 80.0]])
    _, got, want = litert_vs_torch(lambda x: (torch.logcumsumexp(x, -1), torch.logcumsumexp(x, 0)), x)
    assert np.isneginf(got[0][0, :2]).all() and np.isposinf(got[0][1, :2]).all()


def test_float_remainder_and_fmod_are_exact():
    """``a / b`` rounding to an integer used to give 0 (or ``b``) instead of fmod's exact result."""
    a = torch.tensor([-1.5, 1.5, 3.0, -3.0, 7.25, 1e7, -0.7, 5.0, inf, 2.0])
    b = torch.tensor([-0.3, 0.1, 1.5, 0.7, -2.0, 3.3, 0.7, inf, 1.0, 0.0])
    litert_vs_torch(lambda a, b: (torch.remainder(a, b), torch.fmod(a, b), torch.fmod(a, 0.3)), a, b, exact=True)


def test_float_floor_division_exports():
    """``torch.div(..., rounding_mode='floor')`` on floats needs ``signbit`` (an arithmetic right shift)."""
    a, b = torch.tensor([7.0, -7.0, 7.5, -0.0, 0.0, 1.0]), torch.tensor([2.0, 2.0, -2.5, 3.0, -3.0, 0.0])
    litert_vs_torch(lambda a, b: (torch.div(a, b, rounding_mode="floor"), a // 2.0), a, b)


_INVERSE_AND_HYPERBOLIC = {"atan": torch.atan, "asin": torch.asin, "acos": torch.acos, "sinh": torch.sinh,
                           "cosh": torch.cosh, "asinh": torch.asinh, "acosh": torch.acosh, "atanh": torch.atanh,
                           "log1p": torch.log1p, "expm1": torch.expm1}


@XNNPACK_EXTREMES
def test_inverse_trigonometric_and_hyperbolic_functions_match_torch_elementwise():
    """No TFLite builtins: built from ATAN2 / EXP / LOG with series where they cancel (|x| < 0.1 for log1p and
    expm1, 1 for sinh); every element within 1e-5 of torch's, relative, the infinities and NaNs the same."""
    x = torch.cat([torch.linspace(-3, 3, 25), torch.tensor([0.0, -0.0, 1e-8, -1e-6, 1e-3, 0.5, -0.999, 1.0, -1.0,
                                                           1.5, 50.0, 85.0, 89.0, -89.0, 1e10, -1e20, inf, -inf, nan])])
    names = list(_INVERSE_AND_HYPERBOLIC)
    art = convert(Fn(lambda t: tuple(_INVERSE_AND_HYPERBOLIC[n](t) for n in names)).eval(), (x,), target="litert")
    for name, got in zip(names, art(x), strict=True):
        want = _INVERSE_AND_HYPERBOLIC[name](x)
        assert torch.equal(torch.isnan(got), torch.isnan(want)), name
        finite = torch.isfinite(want)
        assert torch.equal(got[~finite & ~torch.isnan(want)], want[~finite & ~torch.isnan(want)]), name
        err = ((got[finite] - want[finite]).abs() / want[finite].abs().clamp_min(1e-30)).max().item()
        assert err < 1e-5, f"{name}: relative error {err:.2e}"


def test_negation_keeps_the_sign_of_zero():
    """XNNPACK's NEG gives ``-(+0.0) = +0.0``; ``1 / -x``, ``atan2(-y, x)`` and digamma's ``∓inf`` at ``±0`` read
    that sign (negation is exported as ``MUL(x, -1)``)."""
    x = torch.tensor([0.0, -0.0, 1.0, -2.0, inf])
    _, got, _ = litert_vs_torch(lambda x: (-x, 1 / -x, torch.atan2(-x, torch.full_like(x, -1.0))), x, exact=True)
    assert torch.equal(torch.signbit(torch.as_tensor(got[0])), torch.signbit(-x))
    _, (digamma,), _ = litert_vs_torch(lambda x: (torch.digamma(x),), x)
    assert digamma[0] == -inf and digamma[1] == inf
