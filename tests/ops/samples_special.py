"""``torch.special`` functions of ``converter/lowering/ops/special.py``, against PyTorch CPU."""

from __future__ import annotations

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, i32 = torch.float32, torch.float64, torch.int32
TOL = {f32: (1e-5, 1e-5)}


def _unary(name, fn, op, low, high, extra=()):
    def samples(dt):
        ints = [Sample((make((2, 3), i32, low=max(low, -9), high=max(high, 2)),), name="int")] if dt == f32 else []
        return [Sample((make((3, 4), dt, low=low, high=high),)), Sample((make((), dt, low=low, high=high),), name="0d"),
                Sample((make((0, 2), dt),), name="empty")] + ints + \
            [Sample((torch.tensor(v, dtype=dt),), name=n) for n, v in extra]
    return OpInfo(name, fn, (op,), samples, dtypes=(f32, f64), tol=TOL)


def _zeta(x, q, s=None):
    if s is None:
        return torch.special.zeta(x, q)
    return torch.special.zeta(x, s), torch.special.zeta(s + 1.5, q)  # a scalar q, a scalar x


_EDGES = [("edges", [0.0, -1.0, 1e-6, 0.999, 1.0, 39.99, 40.0, 40.01, 500.0, float("inf"), float("nan")])]
#: torch's own float64 J0/Y0 are ~1e-8 from SciPy's (ours: ~1e-12)
_BESSEL_TOL = {f32: (1e-5, 1e-5), f64: (1e-7, 1e-7)}


def _bessel(name, low, high, tol=None):
    # few samples: each is a graph of quadrature loops (compile time)
    def samples(dt):
        edges = torch.tensor(_EDGES[0][1], dtype=dt)
        return [Sample((torch.cat([make((12,), dt, low=low, high=high), edges]),)),
                Sample((make((0, 2), dt),), name="empty")] + \
            ([Sample((make((2, 3), i32, low=0, high=9),), name="int")] if dt == f32 else [])
    return OpInfo(name, getattr(torch.special, name[8:]), (getattr(aten, name).default,), samples, dtypes=(f32, f64),
                  tol=tol or _BESSEL_TOL)


def _gamma_edge_values(dt: torch.dtype) -> tuple:
    """torch's boundary values of the incomplete gamma functions: a = 0, x = 0, infinite a or x, negative a or x."""
    inf, nan = float("inf"), float("nan")
    return (torch.tensor([0.0, 0.0, 3.0, inf, inf, 2.0, -1.0, 2.0, nan, inf], dtype=dt),
            torch.tensor([0.5, 0.0, 0.0, 3.0, inf, inf, 0.5, -0.5, 0.0, nan], dtype=dt))


OPS = [
    _bessel("special_bessel_j0", -60.0, 60.0),
    _bessel("special_bessel_j1", -60.0, 60.0),
    _bessel("special_bessel_y0", 0.01, 60.0),
    _bessel("special_bessel_y1", 0.01, 60.0),
    _bessel("special_modified_bessel_k0", 0.01, 30.0),
    _bessel("special_modified_bessel_k1", 0.01, 30.0),
    _bessel("special_scaled_modified_bessel_k0", 0.01, 300.0),
    _bessel("special_scaled_modified_bessel_k1", 0.01, 300.0),
    _bessel("special_airy_ai", -10.0, 8.0, tol={f32: (1e-5, 1e-5), f64: (1e-5, 1e-5)}),  # torch f64: 3e-6 off SciPy
    _unary("special_i0e", torch.special.i0e, aten.special_i0e.default, -20.0, 20.0),
    _unary("special_i1", torch.special.i1, aten.special_i1.default, -9.0, 9.0),
    _unary("special_i1e", torch.special.i1e, aten.special_i1e.default, -20.0, 20.0),
    _unary("special_modified_bessel_i0", torch.special.modified_bessel_i0,
           aten.special_modified_bessel_i0.default, -9.0, 9.0),
    _unary("special_modified_bessel_i1", torch.special.modified_bessel_i1,
           aten.special_modified_bessel_i1.default, -9.0, 9.0),
    _unary("special_erfcx", torch.special.erfcx, aten.special_erfcx.default, -3.0, 30.0),
    _unary("special_log_ndtr", torch.special.log_ndtr, aten.special_log_ndtr.default, -30.0, 8.0),
    # tiny negative values: compared relatively (jax's float32 formula was 6.5% off at 4.94)
    OpInfo("special_log_ndtr_right_tail", torch.special.log_ndtr, (aten.special_log_ndtr.default,),
           lambda dt: [Sample((torch.tensor([3.0, 4.94, 6.0, 8.5, 0.25, float("inf")], dtype=dt),))],
           dtypes=(f32, f64), tol={f32: (2e-5, 0.0), torch.float64: (1e-9, 0.0)}),
    _unary("special_ndtri", torch.special.ndtri, aten.special_ndtri.default, 0.001, 0.999,
           extra=[("ends", [0.0, 1.0, 0.5, 1e-6])]),
    _unary("special_spherical_bessel_j0", torch.special.spherical_bessel_j0,
           aten.special_spherical_bessel_j0.default, -20.0, 20.0,
           extra=[("zero", [0.0, -0.0, 1e-8]), ("infinite", [float("inf"), -float("inf"), float("nan")])]),
    OpInfo("special_zeta", _zeta, (aten.special_zeta.default, aten.special_zeta.other_scalar,
                                   aten.special_zeta.self_scalar),
           lambda dt: [Sample((make((3, 4), dt, low=1.5, high=6.0), make((3, 4), dt, low=0.5, high=4.0, seed=1))),
                       Sample((make((5,), dt, low=1.5, high=6.0), make((), dt, low=1.0, high=2.0, seed=2), 2.0),
                              name="scalar_q"),
                       # torch's values off the series: poles at non-positive integer q, x <= 1
                       Sample((torch.tensor([3.0, 5.0, 0.0, 0.0, 1.0, 0.5, 2.5, 4.0], dtype=dt),
                               torch.tensor([-2.0, 0.0, -4.0, -3.0, 2.0, 1.0, -1.5, -1.5], dtype=dt)),
                              name="edges")], dtypes=(f32, f64), tol=TOL),
    OpInfo("igamma", torch.igamma, (aten.igamma.default,),
           lambda dt: [Sample((make((3, 4), dt, low=0.1, high=8.0), make((3, 4), dt, low=0.0, high=10.0, seed=1))),
                       Sample((make((4,), dt, low=0.5, high=3.0), make((2, 1), dt, low=0.0, high=4.0, seed=2)),
                              name="broadcast"),
                       Sample(_gamma_edge_values(dt), name="edges")], dtypes=(f32, f64), tol=TOL),
    OpInfo("igammac", torch.igammac, (aten.igammac.default,),
           lambda dt: [Sample((make((3, 4), dt, low=0.1, high=8.0), make((3, 4), dt, low=0.0, high=10.0, seed=1))),
                       Sample(_gamma_edge_values(dt), name="edges")],
           dtypes=(f32, f64), tol=TOL),
    OpInfo("frexp", torch.frexp, (aten.frexp.Tensor,),
           lambda dt: [Sample((make((3, 4), dt, low=-1e4, high=1e4),)),
                       Sample((torch.tensor([0.0, -0.0, 1.0, 0.5, -3.0, 1e-30], dtype=dt),), name="special"),
                       Sample((torch.finfo(dt).tiny * torch.tensor([0.5, -1 / 3, 2.0 ** -20, 0.999], dtype=dt),),
                              name="subnormal")],
           dtypes=(f32, f64)),
]


def _polynomial(name):
    fn = getattr(torch.special, name)
    op = getattr(aten, "special_" + name)
    shifted = name.startswith("shifted")

    def call(x, n, scalar=None):
        if scalar == "n":
            return fn(x, 5)
        if scalar == "x":
            return fn(0.3, n)
        return fn(x, n)

    def samples(dt):
        low, high = (0.0, 1.0) if shifted else (-1.2, 1.2)
        x = make((3, 5), dt, low=low, high=high) if dt.is_floating_point else None
        degrees = torch.tensor([[-1, 0, 1, 2, 3], [4, 5, 6, 7, 8], [9, 10, 11, 3, 2]], dtype=torch.float32)
        edges = torch.tensor([1.0, -1.0, 0.0, 0.5, 1.0])
        if not dt.is_floating_point:  # (uint8: 0s and 1s, no negative degree; a shifted 2 * 0 - 1 wrapped to 255)
            x, degrees, edges = torch.arange(15).reshape(3, 5) % 2, degrees.clamp(min=0), edges.clamp(min=0).round()
        x, degrees, edges = x.to(dt), degrees.to(dt), edges.to(dt)
        return [Sample((x, degrees)), Sample((x, degrees), {"scalar": "n"}, name="n_scalar"),
                Sample((x, degrees), {"scalar": "x"}, name="x_scalar"),
                Sample((edges, torch.tensor([3, 4, 7, 0, 12], dtype=dt)), name="edges")]

    return OpInfo(name, call, (op.default, op.x_scalar, op.n_scalar), samples, dtypes=(f32, f64, torch.uint8),
                  tol={f32: (1e-5, 1e-4), torch.uint8: (1e-5, 1e-4)})  # (uint8 inputs: float32 results)


OPS += [_polynomial(name) for name in (
    "chebyshev_polynomial_t", "chebyshev_polynomial_u", "chebyshev_polynomial_v", "chebyshev_polynomial_w",
    "shifted_chebyshev_polynomial_t", "shifted_chebyshev_polynomial_u", "shifted_chebyshev_polynomial_v",
    "shifted_chebyshev_polynomial_w", "hermite_polynomial_h", "hermite_polynomial_he", "laguerre_polynomial_l",
    "legendre_polynomial_p")]
