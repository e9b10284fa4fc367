"""OpInfo samples: segment reductions (forward and backward), ``hash_tensor``, ``gcd`` / ``lcm``."""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, bf16, i8, i32, i64 = torch.float32, torch.float64, torch.bfloat16, torch.int8, torch.int32, torch.int64
_REDUCTIONS = ("sum", "mean", "max", "min", "prod")


def _data(dt, shape=(7, 3)):
    """Data with zeros (prod), a tie (max/min) and a NaN-free spread."""
    x = make(shape, dt)
    x[2, 1] = x[3, 1] = 0
    x[4, 2] = x[5, 2]
    return x


def _lengths():
    return torch.tensor([2, 0, 3, 2])


def _segment(data, lengths, offsets, reduce, axis=0, unsafe=False, initial=None):
    return torch.segment_reduce(data, reduce, lengths=lengths, offsets=offsets, axis=axis, unsafe=unsafe,
                                initial=initial)


def _segment_samples(dt):
    offsets = torch.cat([torch.zeros(1, dtype=i64), _lengths().cumsum(0)])
    samples = [Sample((_data(dt), _lengths(), None, r), name=r) for r in _REDUCTIONS]
    samples += [Sample((_data(dt), _lengths(), None, r), {"initial": 1.5}, name=f"{r}_initial")
                for r in _REDUCTIONS]
    samples += [Sample((_data(dt), None, offsets, "max"), name="offsets"),
                Sample((make((2, 5, 3), dt), torch.tensor([[2, 3], [1, 4]]), None, "mean"), {"axis": 1},
                       name="axis1_batched_lengths"),
                Sample((_data(dt), torch.tensor([1, 2]), None, "sum"), {"unsafe": True}, name="unsafe_short")]
    return samples


def _segment_backward(grad, output, data, lengths, reduce, initial=None):
    return aten._segment_reduce_backward(grad, output, data, reduce, lengths=lengths, initial=initial)


def _backward_samples(dt):
    samples = []
    for r in _REDUCTIONS:
        for initial in (None, 2.0):
            data = _data(dt)
            out = torch.segment_reduce(data.float(), r, lengths=_lengths(), initial=initial).to(dt)
            grad = make(tuple(out.shape), dt, seed=1)  # both signs: torch divides only positive max/min shares
            samples.append(Sample((grad, out, data, _lengths(), r, initial), name=f"{r}_{initial}"))
    return samples


def _hash_samples(dt):
    return [Sample((make((3, 4), dt),)), Sample((make((3, 4), dt), 1), name="dim"),
            Sample((make((3, 4), dt), 0), {"keepdim": True}, name="keepdim"),
            Sample((make((2, 3, 2), dt), [0, 2]), name="dims")]


def _int_pairs(dt):
    lo, hi = (-128, 127) if dt == i8 else (-60, 60)
    samples = [Sample((make((4, 5), dt, low=lo, high=hi), make((4, 5), dt, low=lo, high=hi, seed=1))),
               Sample((make((3, 1), dt, low=lo, high=hi), make((4,), dt, low=lo, high=hi, seed=2)), name="broadcast")]
    info = torch.iinfo(dt)
    edge = torch.tensor([0, 0, info.min, info.min, info.max, -7], dtype=dt)
    samples.append(Sample((edge, torch.tensor([0, 5, info.min, 0, 2, 0], dtype=dt)), name="edges"))
    return samples


def _to_padded(values, offsets, max_length, padding_value):
    return aten._jagged_to_padded_dense_forward(values, [offsets], [max_length], padding_value)


OPS = [
    OpInfo("jagged_to_padded_dense", _to_padded, (aten._jagged_to_padded_dense_forward.default,),
           lambda dt: [Sample((make((6, 3), dt), torch.tensor([0, 2, 2, 6]), 4, -1.0)),
                       Sample((make((6, 2, 3), dt), torch.tensor([0, 1, 6]), 3, 0.5), name="truncated")],
           dtypes=(f32, i64)),
    OpInfo("segment_reduce", _segment, (aten.segment_reduce.default,), _segment_samples, dtypes=(f32, f64, bf16),
           tol={bf16: (2e-2, 2e-2)}),
    OpInfo("segment_reduce_backward", _segment_backward, (aten._segment_reduce_backward.default,),
           _backward_samples, dtypes=(f32, f64), tol={f32: (1e-5, 1e-5)}),
    OpInfo("hash_tensor", torch.hash_tensor, (aten.hash_tensor.default,), _hash_samples,
           dtypes=(f32, f64, i32, i64, torch.bool)),
    OpInfo("gcd", torch.gcd, (aten.gcd.default,), _int_pairs, dtypes=(i8, i32, i64)),
    OpInfo("lcm", torch.lcm, (aten.lcm.default,), _int_pairs, dtypes=(i8, i32, i64)),
]
