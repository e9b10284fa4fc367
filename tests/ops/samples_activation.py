"""OpInfo samples: activations (the preserved ones are checked as composites)."""

import torch
import torch.nn.functional as F

from tests.ops.op_db import ErrorSample, OpInfo, Sample, make

aten = torch.ops.aten
f32, bf16, i32, i64 = torch.float32, torch.bfloat16, torch.int32, torch.int64
NAN, INF = float("nan"), float("inf")


def special(dt=f32):
    return torch.tensor([[NAN, INF, -INF, 0.0, -0.0], [0.5, -1.5, -3.0, 3.0, 25.0]], dtype=dt)


def act_samples(*, ints=False, bf16_special=True):
    """A (3, 4) sample, 0-d, empty, special values (and an int32 sample when the op takes ints)."""
    def samples(dt):
        out = [Sample((make((3, 4), dt, low=-5, high=5),)), Sample((make((), dt),), name="0d"),
               Sample((make((0, 3), dt),), name="empty")]
        if dt == f32 or bf16_special:
            out.append(Sample((special(dt),), name="special"))
        if ints:
            out[2] = Sample((make((2, 3), i32),), name="int")
        return out
    return samples


def _softmax(a, dim, dtype=None, variant="F"):
    if variant == "_softmax":
        return aten._softmax.default(a, dim, False)
    if variant == "_log_softmax":
        return aten._log_softmax.default(a, dim, False)
    return getattr(F, variant)(a, dim, dtype=dtype)


def _softmax_samples(log):
    name = "log_softmax" if log else "softmax"

    def samples(dt):
        return [Sample((make((2, 3, 4), dt, low=-9, high=9), -1, None, name), name="lastdim"),
                Sample((make((3, 4), dt), 0, None, "_" + name), name="_" + name),
                Sample((torch.tensor([[0.0, -INF, 3.0], [-INF, -INF, 1.0]]).to(dt), 1, torch.float32, name), name="dtype-inf"),
                Sample((make((), dt), 0, None, name), name="0d")]
    return samples


def _hardtanh(a, lo=None, hi=None):
    return F.relu6(a) if lo is None else F.hardtanh(a, lo, hi)


def _elu(a, alpha=1.0, selu=False):
    return F.selu(a) if selu else F.elu(a, alpha)


def _decomposed(a, which):
    return {"softplus": lambda: F.softplus(a), "softplus-beta": lambda: F.softplus(a, beta=2.0, threshold=5.0),
            "celu": lambda: F.celu(a, 0.5), "hardshrink": lambda: F.hardshrink(a, 1.0),
            "threshold": lambda: F.threshold(a, 0.5, -2.0), "softshrink": lambda: F.softshrink(a, 0.5),
            "tanhshrink": lambda: F.tanhshrink(a), "softsign": lambda: F.softsign(a)}[which]()


OPS = [
    OpInfo("relu", torch.relu, (aten.relu.default,),
           lambda dt: [Sample((special(),)), Sample((make((3, 4), bf16),), name="bf16"), Sample((make((), dt),), name="0d"),
                       Sample((make((2, 3), i32),), name="int")]),
    OpInfo("hardtanh", _hardtanh, (aten.hardtanh.default,),
           lambda dt: [Sample((special(dt),), name="relu6"), Sample((make((3, 4), dt), -2.0, 2.0), name="hardtanh"),
                       Sample((make((), bf16), 0.0, 1.0), name="0d-bf16"), Sample((make((2, 3), i64), -1, 1), name="int")]),
    OpInfo("leaky_relu", F.leaky_relu, (aten.leaky_relu.default,), act_samples()),
    OpInfo("elu", _elu, (aten.elu.default,),
           lambda dt: [Sample((special(dt),)), Sample((make((3, 4), dt), 0.5), name="alpha"),
                       Sample((make((3, 4), dt),), {"selu": True}, name="selu"), Sample((make((0,), dt),), name="empty")]),
    OpInfo("sigmoid", torch.sigmoid, (aten.sigmoid.default,), act_samples(ints=True), dtypes=(f32, bf16)),
    OpInfo("tanh", torch.tanh, (aten.tanh.default,), act_samples(ints=True)),
    OpInfo("gelu", lambda a, approximate="none": F.gelu(a, approximate=approximate), (aten.gelu.default,),
           # +inf left out: torch's vectorized CPU gelu gives nan there on some CPUs (its scalar path, inf)
           lambda dt: [Sample((make((3, 4), dt, low=-6, high=6),)), Sample((special(dt)[special(dt) != INF],),
                                                                          name="special"),
                       Sample((make((3, 4), dt, low=-6, high=6), "tanh"), name="tanh"), Sample((make((), dt),), name="0d")],
           dtypes=(f32, bf16),
           errors=[ErrorSample((make((3,)), "erf"), "approximate")]),
    OpInfo("silu", F.silu, (aten.silu.default,), act_samples(), dtypes=(f32, bf16)),
    OpInfo("hardswish", F.hardswish, (aten.hardswish.default,), act_samples()),
    OpInfo("hardsigmoid", F.hardsigmoid, (aten.hardsigmoid.default,), act_samples()),
    OpInfo("mish", F.mish, (aten.mish.default,), act_samples()),
    OpInfo("softmax", _softmax, (aten.softmax.int, aten._softmax.default), _softmax_samples(False), dtypes=(f32, bf16)),
    OpInfo("log_softmax", _softmax, (aten.log_softmax.int, aten._log_softmax.default), _softmax_samples(True),
           dtypes=(f32, bf16)),
    OpInfo("decomposed_activations", _decomposed, (aten.where.self,),
           lambda dt: [Sample((special(),), {"which": w}, name=w)
                       for w in ("softplus", "softplus-beta", "celu", "hardshrink")] +
           [Sample((make((3, 4), dt),), {"which": w}, name=w) for w in ("threshold", "softshrink", "tanhshrink", "softsign")]),
]
