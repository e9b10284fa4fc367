"""OpInfo samples: elementwise arithmetic, unary math, comparisons/logical/bitwise, conversions.

Ops that the core-ATen decomposition removes (rsub, floor_divide, sgn, frac,
clamp_min, masked_fill, isfinite, nan_to_num, lerp, logit, …) ride along as
extra samples of the OpInfo whose ATen overloads they decompose to, so their
torch semantics are checked without an extra capture.
"""

import math

import torch

from tests.ops.op_db import ErrorSample, OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, bf16, i32, i64, u8 = torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.uint8
NAN, INF = float("nan"), float("inf")


def special(dt=f32):
    """NaN, ±inf, ±0 and halves (rounding ties), as a (2, 5) tensor."""
    return torch.tensor([[NAN, INF, -INF, 0.0, -0.0], [0.5, -1.5, 2.5, -2.7, 3.2]], dtype=dt)


def nonzero(t):
    """``t`` with zeros replaced by 1 (integer division by zero is a documented deviation)."""
    return torch.where(t == 0, torch.ones_like(t), t)


def either(tensor_fn, scalar_op):
    """Call ``tensor_fn`` when both operands are tensors, else the explicit .Scalar overload."""
    def fn(a, b, **kw):
        return tensor_fn(a, b, **kw) if isinstance(b, torch.Tensor) else scalar_op(a, b, **kw)
    return fn


# ---------------------------------------------------------------- binary arithmetic

def _add_samples(dt):
    return [Sample((make((2, 1, 4), dt), make((3, 1), dt)), {"alpha": 2}, name="bcast-alpha"),
            Sample((make((), dt), make((0, 2), dt)), name="empty"),
            Sample((make((3,), i64), make((), f32, seed=1)), name="int+0d-float"),
            Sample((make((3, 4), dt), 2), name="scalar")]


def _sub_samples(dt):
    return [Sample((make((3, 4), dt), make((4,), dt, seed=1)), {"alpha": 2}, name="alpha"),
            Sample((make((3,), dt), 2), name="scalar"),
            Sample((make((2, 3), dt), 3), {"rsub": True}, name="rsub"),
            Sample((make((3,), torch.int16), make((), f64)), name="int16-0d-f64")]


def _sub(a, b, alpha=1, rsub=False):
    if rsub:
        return torch.rsub(a, b, alpha=alpha)
    return torch.sub(a, b, alpha=alpha) if isinstance(b, torch.Tensor) else aten.sub.Scalar(a, b, alpha)


def _mul_samples(dt):
    return [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))),
            Sample((make((2, 3), dt), make((), dt, seed=2)), name="0d"),
            Sample((make((2, 3), dt), 3), name="scalar"),
            Sample((make((4,), torch.bool), make((4,), torch.bool, seed=3)), name="bool")]


def _div_samples(dt):
    b = make((3, 4), dt, seed=1)
    return [Sample((make((3, 4), dt), b if dt.is_floating_point else nonzero(b))),
            Sample((special(), torch.tensor([[2.0, 0.0, -1.0, 0.0, -0.0]])), name="special"),
            Sample((make((2, 3), dt), 4), name="scalar"),
            Sample((make((5,), i64, low=-9, high=9), nonzero(make((5,), i32, seed=2))), name="int-true-div")]


def _div_mode(a, b, rounding_mode=None, floordiv=False):
    if floordiv:
        return a // b
    if isinstance(b, torch.Tensor):
        return torch.div(a, b, rounding_mode=rounding_mode)
    return aten.div.Scalar_mode(a, b, rounding_mode=rounding_mode)


def _div_mode_samples(dt):
    a, b = make((3, 4), dt, low=-9, high=9), make((3, 4), dt, seed=1)
    if not dt.is_floating_point:
        b = nonzero(b)
    else:
        a, b = torch.cat([a, special()[:, :4]]), torch.cat([b, torch.tensor([[2.0, 0.0, -0.1, 0.1], [-0.0, 0.5, -1, 3]])])
    return [Sample((a, b), {"rounding_mode": "floor"}, name="floor"),
            Sample((a, b), {"rounding_mode": "trunc"}, name="trunc"),
            Sample((a, -3), {"rounding_mode": "floor"}, name="scalar-floor"),
            Sample((torch.tensor([[1.0, -7.0, 7.0, -0.0], [5.0, -5.0, 0.3, 2.0]]), torch.tensor([0.1, 2.0, -2.0, 3.0])),
                   {"floordiv": True}, name="floor_divide-bcast")]


def _rem_samples(dt):
    a, b = make((3, 4), dt, low=-9, high=9), make((3, 4), dt, seed=1)
    if not dt.is_floating_point:
        b = nonzero(b)
    else:
        a, b = torch.cat([a, special()[:, :4]]), torch.cat([b, torch.tensor([[2.0, 0.0, -2.0, 2.0], [0.5, -0.3, 3, -3]])])
    return [Sample((a, b)), Sample((a, -4), name="scalar"), Sample((7, b), name="scalar-tensor"),
            Sample((make((0, 3), dt), make((3,), dt, seed=3) if dt.is_floating_point else nonzero(make((3,), dt, seed=3))),
                   name="empty-bcast")]


def _rem(a, b):
    return torch.remainder(a, b) if isinstance(a, torch.Tensor) else aten.remainder.Scalar_Tensor(a, b)


def _fmod_samples(dt):
    b = make((3, 4), dt, seed=1)
    return [Sample((make((3, 4), dt, low=-9, high=9), b if dt.is_floating_point else nonzero(b))),
            Sample((make((2, 3), dt, low=-9, high=9), -4), name="scalar"),
            Sample((make((3, 4), i32, low=-9, high=9), nonzero(make((4,), i32, seed=2))), name="int")]


def _pow_samples(dt):
    if dt.is_floating_point:
        base = make((3, 4), dt, low=0.1, high=3)
        return [Sample((base, make((3, 4), dt, seed=1))),
                Sample((make((2, 5), dt), 2), {"extra": (3, 0.5, -0.5, -1, -2, 0, 1.7)}, name="scalar-fastpaths"),
                Sample((2.5, make((4,), dt)), name="scalar-base"),
                Sample((special(), torch.tensor([2.0, 0.0, -1.0, 0.5, 3.0])), name="special")]
    return [Sample((make((3, 4), dt, low=-4, high=4), make((3, 4), dt, low=-2, high=6, seed=1))),
            Sample((make((2, 5), dt), 3), {"extra": (0, 1, 2, 0.5)}, name="scalar"),
            Sample((3, make((4,), dt, low=0, high=10)), name="scalar-base"),
            Sample((torch.tensor([3, -3, 2, 1, -1, 0]), torch.tensor([40, 41, 64, -5, -5, 0])), name="overflow")]


def _pow(a, b, extra=()):
    return (torch.pow(a, b), *[torch.pow(a, e) for e in extra])


def _float_binary_samples(dt):
    return [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))),
            Sample((special(), special().flip(-1)), name="special"),
            Sample((make((2, 3), i32), make((3,), i64, seed=2)), name="int"),
            Sample((make((0, 2), dt), make((), dt, seed=3)), name="empty")]


BINARY = [
    OpInfo("add", either(torch.add, aten.add.Scalar), (aten.add.Tensor, aten.add.Scalar), _add_samples,
           dtypes=(f32, i32, bf16)),
    OpInfo("sub", _sub, (aten.sub.Tensor, aten.sub.Scalar), _sub_samples),
    OpInfo("mul", either(torch.mul, aten.mul.Scalar), (aten.mul.Tensor, aten.mul.Scalar), _mul_samples,
           dtypes=(f32, bf16)),
    OpInfo("div", either(torch.div, aten.div.Scalar), (aten.div.Tensor, aten.div.Scalar), _div_samples),
    OpInfo("div_mode", _div_mode, (aten.div.Tensor_mode, aten.div.Scalar_mode), _div_mode_samples,
           dtypes=(f32, i64), errors=[ErrorSample((make((3,)), make((3,))), "rounding_mode", {"rounding_mode": "up"})]),
    OpInfo("remainder", _rem, (aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor),
           _rem_samples, dtypes=(f32, i64)),
    OpInfo("fmod", torch.fmod, (aten.fmod.Tensor, aten.fmod.Scalar), _fmod_samples),
    OpInfo("pow", _pow, (aten.pow.Tensor_Tensor, aten.pow.Tensor_Scalar, aten.pow.Scalar), _pow_samples,
           dtypes=(f32, i64), tol={f32: (2e-5, 1e-5)},
           errors=[ErrorSample((torch.tensor([2, 3]), -1), "negative integer powers")]),
    OpInfo("atan2", torch.atan2, (aten.atan2.default,), _float_binary_samples),
    OpInfo("hypot", torch.hypot, (aten.hypot.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))),
                       Sample((special(), special().flip(-1)), name="special"),
                       Sample((torch.tensor([3e38, 1e-30]), torch.tensor([3e38, 1e-30])), name="no-overflow")]),
    OpInfo("copysign", torch.copysign, (aten.copysign.Tensor, aten.copysign.Scalar),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))), Sample((special(), -0.0), name="scalar"),
                       Sample((make((2, 3), i32), special()[:, :3]), name="int")]),
    OpInfo("ldexp", torch.ldexp, (aten.ldexp.Tensor,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), i32, low=-5, high=5))),
                       Sample((make((3,), i64), make((3,), i64, seed=1)), name="int")]),
    OpInfo("nextafter", torch.nextafter, (aten.nextafter.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))),
                       Sample((torch.tensor([0.0, 1.0, -1.0, INF]), torch.tensor([1.0, 2.0, -2.0, 0.0])), name="edges"),
                       Sample((make((3,), f64), make((3,), f64, seed=1)), name="f64")]),
]


# ---------------------------------------------------------------- unary math

def _unary(name, fn, op, low=-3.0, high=3.0, *, dtypes=(f32,), extra=(), ints=True, tol=None):
    """One unary OpInfo: a (3, 4) sample in [low, high), 0-d, empty, an int32 sample, extras."""
    def samples(dt):
        out = [Sample((make((3, 4), dt, low=low, high=high),)), Sample((make((), dt, low=low, high=high),), name="0d"),
               Sample((make((0, 3), dt),), name="empty")]
        if ints:
            out.append(Sample((make((2, 3), i32, low=max(low, -1000), high=max(high, 2)),), name="int"))
        return out + [s for s in extra if dt == f32]
    return OpInfo(name, fn, (op,), samples, dtypes=dtypes, tol=tol or {})


def _one(values, name="special"):
    return Sample((torch.tensor(values),), name=name)


UNARY = [
    _unary("neg", torch.neg, aten.neg.default),
    _unary("abs", torch.abs, aten.abs.default, extra=[_one([-0.0, NAN, -INF])]),
    OpInfo("sign", lambda a, sgn=False: torch.sgn(a) if sgn else torch.sign(a), (aten.sign.default,),
           lambda dt: [Sample((special(dt),)), Sample((make((3, 4), dt),), {"sgn": True}, name="sgn"),
                       Sample((make((2, 3), i32),), name="int"), Sample((make((4,), torch.bool),), name="bool")]),
    OpInfo("signbit", torch.signbit, (aten.signbit.default,),
           lambda dt: [Sample((special(),)), Sample((make((2, 3), i32),), name="int"),
                       Sample((make((0,), f32),), name="empty")]),
    _unary("exp", torch.exp, aten.exp.default, dtypes=(f32, bf16), extra=[_one([INF, -INF, NAN, 88.0, -104.0])]),
    _unary("exp2", torch.exp2, aten.exp2.default, extra=[_one([INF, -INF, 10.0, -20.0])]),
    _unary("expm1", torch.expm1, aten.expm1.default, extra=[_one([1e-7, -1e-7, INF, -INF])]),
    OpInfo("log", lambda a, logit=False: torch.logit(a, eps=1e-6 if logit == "eps" else None) if logit else torch.log(a),
           (aten.log.default,),
           lambda dt: [Sample((make((3, 4), dt, low=0.01, high=5),)), Sample((make((2, 3), i32, low=0, high=9),), name="int"),
                       _one([0.0, -1.0, INF, NAN]),
                       Sample((torch.tensor([0.0, 0.3, 1.0, 1.5, 1e-7]),), {"logit": "eps"}, name="logit")],
           dtypes=(f32,)),
    _unary("log2", torch.log2, aten.log2.default, 0.01, 9.0, ints=False, extra=[_one([0.0, 1024.0, 0.125, -1.0])]),
    _unary("log10", torch.log10, aten.log10.default, 0.01, 9.0, ints=False, extra=[_one([0.0, 1000.0, 1e-3, -1.0])]),
    _unary("log1p", torch.log1p, aten.log1p.default, -0.9, 5.0, extra=[_one([1e-8, -1.0, -2.0, INF])]),
    _unary("sqrt", torch.sqrt, aten.sqrt.default, 0.0, 9.0, extra=[_one([-1.0, -0.0, INF])]),
    _unary("rsqrt", torch.rsqrt, aten.rsqrt.default, 0.1, 9.0, extra=[_one([0.0, -0.0, INF, -1.0])]),
    _unary("reciprocal", torch.reciprocal, aten.reciprocal.default, 0.1, 9.0, extra=[_one([0.0, -0.0, INF])]),
    _unary("sin", torch.sin, aten.sin.default, -6.0, 6.0),
    _unary("cos", torch.cos, aten.cos.default, -6.0, 6.0),
    _unary("tan", torch.tan, aten.tan.default, -1.4, 1.4),
    _unary("asin", torch.asin, aten.asin.default, -1.0, 1.0, extra=[_one([1.0, -1.0, 1.5])]),
    _unary("acos", torch.acos, aten.acos.default, -1.0, 1.0, extra=[_one([1.0, -1.0, 1.5])]),
    _unary("atan", torch.atan, aten.atan.default, -9.0, 9.0, extra=[_one([INF, -INF])]),
    _unary("sinh", torch.sinh, aten.sinh.default),
    _unary("cosh", torch.cosh, aten.cosh.default),
    _unary("asinh", torch.asinh, aten.asinh.default, -9.0, 9.0),
    _unary("acosh", torch.acosh, aten.acosh.default, 1.0, 9.0, extra=[_one([1.0, 0.5])]),
    _unary("atanh", torch.atanh, aten.atanh.default, -0.9, 0.9, ints=False, extra=[_one([1.0, -1.0, 2.0])]),
    _unary("erf", torch.erf, aten.erf.default, extra=[_one([INF, -INF, 1e-4])]),
    _unary("erfc", torch.erfc, aten.erfc.default, extra=[_one([6.0, 9.0, -INF])], tol={f32: (1e-4, 1e-6)}),
    _unary("erfinv", torch.erfinv, aten.erfinv.default, -0.99, 0.99, ints=False, extra=[_one([1.0, -1.0, 1.5, 0.0])],
           tol={f32: (1e-4, 1e-5)}),
    _unary("lgamma", torch.lgamma, aten.lgamma.default, 0.1, 9.0, extra=[_one([0.0, -1.0, -2.5, INF])],
           tol={f32: (1e-4, 1e-5)}),
    _unary("digamma", torch.digamma, aten.digamma.default, 0.1, 9.0, extra=[_one([0.0, -0.0, -1.0, -2.5])],
           tol={f32: (1e-4, 1e-5)}),
    OpInfo("polygamma", lambda x, n: torch.polygamma(n, x), (aten.polygamma.default,),
           lambda dt: [Sample((make((3, 4), dt, low=0.1, high=9.0), n), name=f"n{n}") for n in (0, 1, 2, 3)]
           + [Sample((torch.tensor([0.0, -0.0, 1.0]), 0), name="n0_special")]
           + [Sample((torch.tensor([-8.4784, -2.5, -0.3, -5.75]), n), name=f"negative_n{n}") for n in (1, 2, 3)]
           + [Sample((torch.tensor([0.0, -0.0, -1.0, -2.0]), n), name=f"poles_n{n}") for n in (2, 3, 4)]
           # (near the poles: the cotangent's π·x rounding was 2e-4 off at -3.002 (so is the CPU's float32 trigamma,
           # whose formula is that one: n = 1 stays farther); trigamma(inf) = 0)
           + [Sample((torch.tensor([-3.002, -1.02, -0.999, 1e-3, float("inf")]), n), name=f"near_poles_n{n}")
              for n in (2, 3)]
           + [Sample((torch.tensor([-1.02, -0.999, 1e-3, float("inf")]), 1), name="near_poles_n1")],
           tol={f32: (2e-5, 1e-5)}),
    _unary("i0", torch.i0, aten.i0.default, -9.0, 9.0, tol={f32: (1e-5, 1e-5)}),
    _unary("floor", torch.floor, aten.floor.default, extra=[Sample((special(),), name="special")]),
    _unary("ceil", torch.ceil, aten.ceil.default, extra=[Sample((special(),), name="special")]),
    OpInfo("trunc", lambda a, frac=False: torch.frac(a) if frac else torch.trunc(a), (aten.trunc.default,),
           lambda dt: [Sample((special(),)), Sample((make((3, 4), dt, low=-9, high=9),), {"frac": True}, name="frac"),
                       Sample((make((2, 3), i64),), name="int"), Sample((make((), f32),), name="0d")]),
    OpInfo("round", lambda a, decimals=None: torch.round(a) if decimals is None else torch.round(a, decimals=decimals),
           (aten.round.default, aten.round.decimals),
           lambda dt: [Sample((special(dt),)), Sample((make((2, 3), i32),), name="int"),
                       Sample((torch.tensor([1.2345, 2.5, 0.125, -0.375, 1e30], dtype=dt),), {"decimals": 2}, name="decimals"),
                       Sample((torch.tensor([1250.0, 1350.0, -49.0], dtype=dt),), {"decimals": -2}, name="neg-decimals")],
           dtypes=(f32, bf16)),
]


# ---------------------------------------------------------------- comparison, logical, bitwise

def _cmp_samples(dt):
    a = make((3, 4), i32, low=-2, high=2).to(dt)
    b = make((3, 4), i32, low=-2, high=2, seed=1).to(dt)
    return [Sample((a, b)), Sample((special(), torch.tensor([NAN, INF, 0.0, -0.0, 2.5])), name="special"),
            Sample((make((2, 3), i64), 1.5), name="scalar-int-vs-float"),
            Sample((make((0, 3), i32), make((), i64)), name="empty-int")]


def _cmp(name, fn, tensor_op, scalar_op):
    return OpInfo(name, fn, (tensor_op, scalar_op), _cmp_samples)


COMPARE = [
    _cmp("eq", torch.eq, aten.eq.Tensor, aten.eq.Scalar), _cmp("ne", torch.ne, aten.ne.Tensor, aten.ne.Scalar),
    _cmp("lt", torch.lt, aten.lt.Tensor, aten.lt.Scalar), _cmp("le", torch.le, aten.le.Tensor, aten.le.Scalar),
    _cmp("gt", torch.gt, aten.gt.Tensor, aten.gt.Scalar), _cmp("ge", torch.ge, aten.ge.Tensor, aten.ge.Scalar),
]


def _logical_samples(dt):
    return [Sample((special(), torch.tensor([[1.0], [0.0]]))),
            Sample((make((3, 4), i32), make((4,), torch.bool)), name="int-bool"),
            Sample((make((0, 2), torch.bool), make((), torch.bool)), name="empty")]


LOGICAL = [
    OpInfo("logical_and", torch.logical_and, (aten.logical_and.default,), _logical_samples),
    OpInfo("logical_or", torch.logical_or, (aten.logical_or.default,), _logical_samples),
    OpInfo("logical_xor", torch.logical_xor, (aten.logical_xor.default,), _logical_samples),
    OpInfo("logical_not", torch.logical_not, (aten.logical_not.default,),
           lambda dt: [Sample((special(),)), Sample((make((3,), i64),), name="int"),
                       Sample((make((2, 2), torch.bool),), name="bool")]),
]


def _bitwise(name, fn, ops):
    def call(a, b):
        return fn(a, b) if isinstance(a, torch.Tensor) else ops[2](a, b)

    def samples(dt):
        return [Sample((make((3, 4), i32, low=-50, high=50), make((3, 4), i32, low=-50, high=50, seed=1))),
                Sample((make((2, 3), i64, low=-50, high=50), 6), name="scalar"),
                Sample((5, make((2, 3), u8, low=0, high=200)), name="scalar-tensor"),
                Sample((make((4,), torch.bool), make((4,), torch.bool, seed=1)), name="bool")]
    return OpInfo(name, call, ops, samples,
                  errors=[ErrorSample((make((2,)), make((2,))), "not implemented for 'Float'")])


def _shift(kind):
    op, fn = getattr(aten, f"__{kind[0]}shift__"), getattr(aten, f"bitwise_{kind}_shift")

    def call(a, b, variant):
        if variant == "op":
            return a << b if kind == "left" else a >> b
        if variant == "fn":
            return getattr(torch, f"bitwise_{kind}_shift")(a, b)
        return getattr(torch, f"bitwise_{kind}_shift")(a, b), fn.Scalar_Tensor(-3, b)

    def samples(dt):
        a = torch.tensor([1, -1, 5, -8, 8, 7], dtype=i32)
        b = torch.tensor([31, 32, -1, 3, 40, 0], dtype=i32)
        return [Sample((a, b, "op"), name="op-tensor"), Sample((make((2, 3), i64, low=-9, high=9), 2, "op"), name="op-scalar"),
                Sample((torch.stack([a, -a]).to(i64), b.to(i64) * 2, "fn+scalar-tensor"), name="fn-tensor-bcast"),
                Sample((torch.tensor([1, 200, 255], dtype=u8), 3, "fn"), name="fn-scalar-uint8")]
    return OpInfo(f"{kind}_shift", call, (op.Tensor, op.Scalar, fn.Tensor, fn.Tensor_Scalar, fn.Scalar_Tensor), samples)


BITWISE = [
    _bitwise("bitwise_and", torch.bitwise_and, (aten.bitwise_and.Tensor, aten.bitwise_and.Scalar, aten.bitwise_and.Scalar_Tensor)),
    _bitwise("bitwise_or", torch.bitwise_or, (aten.bitwise_or.Tensor, aten.bitwise_or.Scalar, aten.bitwise_or.Scalar_Tensor)),
    _bitwise("bitwise_xor", torch.bitwise_xor, (aten.bitwise_xor.Tensor, aten.bitwise_xor.Scalar, aten.bitwise_xor.Scalar_Tensor)),
    OpInfo("bitwise_not", torch.bitwise_not, (aten.bitwise_not.default,),
           lambda dt: [Sample((make((3, 4), i32, low=-50, high=50),)), Sample((make((3,), torch.bool),), name="bool"),
                       Sample((torch.tensor([0, 1, 255], dtype=u8),), name="uint8")]),
    _shift("left"), _shift("right"),
]


def _where(c, a, b, masked_fill=False):
    return a.masked_fill(c, b) if masked_fill else torch.where(c, a, b)


def _clamp(a, lo=None, hi=None, which="clamp"):
    return {"clamp": torch.clamp, "min": lambda x, l, h: torch.clamp_min(x, l),
            "max": lambda x, l, h: torch.clamp_max(x, h)}[which](a, lo, hi)


def _minmax(name, fn, op):
    return OpInfo(name, fn, (op,), lambda dt: [
        Sample((make((3, 4), bf16), make((4,), bf16, seed=1)), name="bf16"), Sample((special(), special().flip(-1)), name="nan"),
        Sample((make((3,), i32), make((), f32, seed=2)), name="int-0d-float"),
        Sample((make((3,), torch.bool), make((3,), torch.bool, seed=3)), name="bool")])


SELECT = [
    OpInfo("where", _where, (aten.where.self,),
           lambda dt: [Sample((make((3, 1), torch.bool), make((3, 4), dt), make((4,), dt, seed=1))),
                       Sample((make((2, 3), torch.bool), make((2, 3), i32), make((), f32)), name="int-0d-float"),
                       Sample((make((2, 3), torch.bool), make((2, 3), dt), -1.5), {"masked_fill": True}, name="masked_fill"),
                       Sample((make((0, 3), torch.bool), make((0, 3), bf16), make((), bf16)), name="empty-bf16")]),
    OpInfo("isnan", lambda a, fix=False: torch.nan_to_num(a, posinf=9.0) if fix else torch.isnan(a), (aten.isnan.default,),
           lambda dt: [Sample((special(),)), Sample((make((3,), i32),), name="int"),
                       Sample((special(),), {"fix": True}, name="nan_to_num"),
                       Sample((torch.complex(special(), special().flip(1)),), name="complex")]),
    OpInfo("nan_to_num", torch.nan_to_num, (aten.nan_to_num.default,),
           lambda dt: [Sample((special(dt),)), Sample((special(dt),), {"nan": 1.0, "posinf": 1e10, "neginf": -2.0},
                                                      name="replacements"),
                       Sample((torch.complex(special(), special().flip(1)),), name="complex"),
                       Sample((make((3,), i32),), name="int")],
           dtypes=(f32, torch.float16)),
    OpInfo("isinf", lambda a, which="isinf": getattr(torch, which)(a), (aten.isinf.default,),
           lambda dt: [Sample((special(),)), Sample((make((3,), i32),), name="int"),
                       Sample((special(),), {"which": "isfinite"}, name="isfinite"),
                       Sample((special(),), {"which": "isposinf"}, name="isposinf"),
                       Sample((torch.complex(special(), special().flip(1)),), name="complex")]),
    OpInfo("clamp", _clamp, (aten.clamp.default,),
           lambda dt: [Sample((special() if dt == f32 else make((2, 5), dt), -1, 2)),
                       Sample((make((3, 4), i32), 2, 1), name="min>max-int"),
                       Sample((make((2, 3), i64), 0.5, None, "min"), name="clamp_min-int-float"),
                       Sample((make((), dt), None, 0, "max"), name="clamp_max-0d")]),
    OpInfo("clamp_tensor", _clamp, (aten.clamp.Tensor,),
           lambda dt: [Sample((make((3, 4), dt), make((4,), dt, seed=1), make((3, 1), dt, seed=2) + 1)),
                       Sample((special(), make((5,), f32), None, "min"), name="clamp_min"),
                       Sample((make((3,), i32), None, make((3,), i64, seed=3), "max"), name="clamp_max-int")]),
    _minmax("maximum", torch.maximum, aten.maximum.default), _minmax("minimum", torch.minimum, aten.minimum.default),
    OpInfo("fmax", torch.fmax, (aten.fmax.default,), lambda dt: [
        Sample((make((3, 4), dt), make((4,), dt, seed=1))), Sample((special(), special().flip(-1)), name="nan")]),
    OpInfo("fmin", torch.fmin, (aten.fmin.default,), lambda dt: [
        Sample((make((3, 4), dt), make((4,), dt, seed=1))), Sample((special(), special().flip(-1)), name="nan")]),
]


# ---------------------------------------------------------------- decompositions that ride on the ops above

def _decomposed(a, b, which):
    return {"lerp": lambda: torch.lerp(a, b, a.abs() / 4),
            "xlogy": lambda: torch.xlogy(a, b), "logaddexp": lambda: torch.logaddexp(a, b),
            "heaviside": lambda: torch.heaviside(a, b)}[which]()


DECOMPOSED = [
    OpInfo("decomposed_math", _decomposed, (aten.where.self,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1), w), name=w)
                       for w in ("lerp", "xlogy", "logaddexp")] +
           [Sample((special(), special().flip(-1), "heaviside"), name="heaviside")]),
]


# ---------------------------------------------------------------- conversions and identities

def _item_scale(x, t):
    n = t.item()
    torch._check(n >= 0)
    torch._check(n < 100)
    return x * n


def _assert_in_range(x):
    torch._assert_async((x.abs() < 10).all(), "out of range")  # a program computes it; the caller checks it
    return x + 1


CONVERT = [
    OpInfo("_to_copy", lambda a, *dts: tuple(a.to(d) for d in dts), (aten._to_copy.default,),
           lambda dt: [Sample((torch.tensor([-2.7, -0.5, -0.0, 0.5, 2.9, 100.7]), i32, i64, torch.bool, u8, bf16), name="from-float"),
                       Sample((special(), torch.bool), name="special-to-bool"),
                       Sample((make((2, 3), i64), f32, i32, torch.bool), name="from-int"),
                       Sample((make((3,), torch.bool), f32, u8), name="from-bool")]),
    # bit reinterpretation: narrower dtypes grow the last dim, wider ones shrink it; bool and complex too
    OpInfo("view_dtype", lambda a, *dts: tuple(a.view(d) * 1 for d in dts), (aten.view.dtype,),
           lambda dt: [Sample((make((2, 8), f32), i32, u8, torch.float16, i64), name="float32"),
                       Sample((make((2, 4), i64, low=-1000, high=1000), f32, torch.int16, u8), name="int64"),
                       Sample((make((3, 4), torch.bool), u8, torch.int8), name="bool"),
                       Sample((make((2, 3), f32).to(torch.complex64), f32, i64), name="complex")]),
    OpInfo("clone", lambda a: a.clone(), (aten.clone.default,),
           lambda dt: [Sample((make((3, 4), dt),)), Sample((make((), dt),), name="0d"),
                       Sample((make((2,), torch.bool),), name="bool")]),
    OpInfo("scalar_tensor", lambda a, s, d=None: a * torch.scalar_tensor(s, dtype=d), (aten.scalar_tensor.default,),
           lambda dt: [Sample((make((3,), dt), 2.5)), Sample((make((3,), i64), 3, i64), name="int"),
                       Sample((make((2,), dt), math.inf), name="inf")]),
    OpInfo("_assert_scalar", _item_scale, (aten._assert_scalar.default, aten._local_scalar_dense.default),
           lambda dt: [Sample((make((3, 4), dt), torch.tensor(7)))]),
    OpInfo("_assert_async", _assert_in_range, (aten._assert_async.msg,), lambda dt: [Sample((make((3, 4), dt),))]),
]

OPS = BINARY + UNARY + COMPARE + LOGICAL + BITWISE + SELECT + DECOMPOSED + CONVERT
