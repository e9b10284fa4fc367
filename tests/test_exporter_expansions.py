"""The exporters' shared jaxpr mechanisms (``exporters/jaxpr_walk.py``, ``exporters/expansions.py``), run through both
formats: short scans unrolled (carries, stacked outputs, reversed, constant inputs) and primitives neither format has
an operator for (``erfc``, ``log1p``, ``expm1``, ``erf_inv``; ``lgamma``, ``digamma``, ``bessel_i0e``/``i1e``,
``zeta``; ``igamma``/``igammac``, loops), element by element against SciPy / NumPy / PyTorch in float64."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import scipy.special
import torch

from converter.errors import UnsupportedOpError
from exporters.litert import build as build_litert
from exporters.onnx import build as build_onnx
from tests.litert.adapter import JaxProgram
from tests.litert.conftest import XNNPACK_EXTREMES, xnnpack_loses_float_extremes  # noqa: F401 (the mark's condition)

BUILD = {"onnx": build_onnx, "litert": build_litert}
R = np.random.default_rng(0)
X = R.standard_normal((5, 3)).astype(np.float32)
COEFFS = np.array([0.5, -1.25, 2.0, 0.75], np.float32)


def _scans(x):
    carry, ys = jax.lax.scan(lambda h, a: (h * 0.5 + a, h * a), x[0], x)
    _, back = jax.lax.scan(lambda h, a: (h + a, h), jnp.zeros_like(x[0]), x, reverse=True)
    poly, _ = jax.lax.scan(lambda h, k: (h * x[1] + k, None), jnp.zeros_like(x[1]), jnp.asarray(COEFFS))
    return carry, ys, back, poly


#: The expansions' inputs: erfc's whole range (both signs, the tail to 1e-37, ±inf, NaN), log1p/expm1 near 0.
TAIL = np.concatenate([np.linspace(-9.0, 9.0, 721), [np.inf, -np.inf, np.nan, 0.0]]).astype(np.float32)
SMALL = np.concatenate([np.linspace(-0.3, 0.3, 601), [1e-7, -1e-9, 5.0, -0.999, np.nan]]).astype(np.float32)
#: erf_inv's domain to its ends (±1: ±inf), past them (NaN), and the last float below 1.
UNIT = np.concatenate([np.linspace(-1.0, 1.0, 801), [0.99999994, -0.9999, 1.5, -2.0, np.nan]]).astype(np.float32)


def _close(got, want, rtol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want))
    ok = np.isclose(got, want, rtol=rtol, atol=0) | (np.isnan(want)) | ((np.abs(want) < 1e-37) & (np.abs(got) < 1e-37))
    assert ok.all(), f"at {np.nonzero(~ok)[0][:5]}: {got[~ok][:5]} vs {want[~ok][:5]}"


@pytest.mark.parametrize("target", list(BUILD))
def test_short_scans_are_unrolled(target):
    program = JaxProgram(_scans, [X])
    got = BUILD[target](program)(X)
    for g, w in zip(got, program.reference(X)):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("target", ["onnx", pytest.param("litert", marks=XNNPACK_EXTREMES)])
def test_expansions_keep_their_digits(target):
    program = JaxProgram(lambda t, s, u: (jax.lax.erfc(t), jnp.log1p(s), jnp.expm1(s), jax.lax.erf_inv(u)),
                         [TAIL, SMALL, UNIT])
    got = BUILD[target](program)(TAIL, SMALL, UNIT)
    want = [scipy.special.erfc(TAIL.astype(np.float64)), np.log1p(SMALL.astype(np.float64)),
            np.expm1(SMALL.astype(np.float64)), scipy.special.erfinv(UNIT.astype(np.float64))]
    for g, w, rtol in zip(got, want, (1e-5, 2e-6, 2e-6, 1e-6)):
        _close(g, w, rtol)


@pytest.mark.parametrize("target", list(BUILD))
def test_an_expansion_refuses_what_it_does_not_cover(target):
    program = JaxProgram(lambda u: jax.lax.erf_inv(u), [UNIT.astype(np.float64)])
    with jax.enable_x64(True), pytest.raises(UnsupportedOpError, match="erfinv of float64"):
        BUILD[target](program)


#: lgamma/digamma over both half-lines: the poles (0, ±0, negative integers), near-poles, the roots 1, 2 and
#: 1.4616, tiny and huge values, ±inf and NaN; Bessel arguments on both sides of the split at 8.
GAMMA = np.concatenate([np.linspace(-9.7, 30.0, 398), [0.0, -0.0, -1.0, -3.0, -2.999, 1.0, 2.0, 1.4616321, 1e-30,
                                                      3e4, 1e20, np.inf, -np.inf, np.nan]]).astype(np.float32)
BESSEL = np.concatenate([np.linspace(-40.0, 40.0, 401), [7.999, 8.0, 8.001, 700.0, np.inf, -np.inf,
                                                         np.nan]]).astype(np.float32)
#: The Hurwitz zeta's (s, q) pairs whose value float32 holds as a normal number.
ZETA_S, ZETA_Q = (np.float32(v) for v in zip(*[
    (s, q) for s in (1.5, 2.0, 3.25, 9.0, 30.0) for q in (0.01, 0.5, 1.0, 2.5, 7.0, 40.0, 1e3, 3.0e5)
    if 1e-30 < scipy.special.zeta(s, q) < 1e30]))


def _near(got, want, rtol, atol):
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert np.array_equal(np.isnan(got), np.isnan(want)), f"NaN at {np.nonzero(np.isnan(got) != np.isnan(want))[0]}"
    inf = np.isinf(want)
    assert np.array_equal(got[inf], want[inf]), f"{got[inf]} vs {want[inf]}"
    fin = np.isfinite(want)
    ok = np.abs(got[fin] - want[fin]) <= rtol * np.abs(want[fin]) + atol
    assert ok.all(), f"at {want[fin][~ok][:5]}: {got[fin][~ok][:5]}"


@pytest.mark.parametrize("target", list(BUILD))
def test_gamma_bessel_and_zeta_expansions_match_pytorch(target):
    fn = lambda g, b, s, q: (jax.lax.lgamma(g), jax.lax.digamma(g), jax.lax.bessel_i0e(b),  # noqa: E731
                             jax.lax.bessel_i1e(b), jax.lax.zeta(s, q))
    program = JaxProgram(fn, [GAMMA, BESSEL, ZETA_S, ZETA_Q])
    got = BUILD[target](program)(GAMMA, BESSEL, ZETA_S, ZETA_Q)
    g, b = torch.from_numpy(GAMMA).double(), torch.from_numpy(BESSEL).double()
    want = [torch.lgamma(g), torch.digamma(g), torch.special.i0e(b), torch.special.i1e(b),
            torch.special.zeta(torch.from_numpy(ZETA_S).double(), torch.from_numpy(ZETA_Q).double())]
    # (lgamma and digamma: 2e-6 of 1 + |value|, as XLA's own (Lanczos) lgamma on the device: near the roots and
    # the reflection's cancellations, float32 keeps no relative digits)
    for o, w, (rtol, atol) in zip(got, want, [(2e-6, 2e-6), (2e-6, 1e-6), (1e-6, 0), (1e-6, 0), (2e-6, 0)]):
        _near(o, w.numpy(), rtol, atol)



@pytest.mark.parametrize("target", list(BUILD))
def test_incomplete_gamma_functions_export_as_loops(target):
    # JAX's own series and continued fraction, each a while loop until every element converges (refused before)
    a = np.concatenate([np.geomspace(0.05, 60.0, 40), [1.0, 2.0, 0.0, -1.0, np.nan]]).astype(np.float32)
    x = np.concatenate([np.geomspace(0.01, 80.0, 40), [0.0, np.inf, 1.0, 1.0, 1.0]]).astype(np.float32)
    program = JaxProgram(lambda a, x: (jax.lax.igamma(a, x), jax.lax.igammac(a, x)), [a, x])
    got = BUILD[target](program)(a, x)
    a64, x64 = a.astype(np.float64), x.astype(np.float64)
    with np.errstate(invalid="ignore"):
        want = [np.where((a64 < 0) | ((a64 == 0) & (x64 == 0)), np.nan, scipy.special.gammainc(a64, x64)),
                np.where((a64 < 0) | ((a64 == 0) & (x64 == 0)), np.nan, scipy.special.gammaincc(a64, x64))]
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=1e-6)
