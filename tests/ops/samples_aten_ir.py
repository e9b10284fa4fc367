"""OpInfo samples: ATen ops the one-pass capture keeps (see converter/lowering/ops/aten_ir.py)."""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten

F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64


def _view_of_transposed(x):
    return x.transpose(0, 1).reshape(-1, 2)    # transpose.int, then clone + _unsafe_view


def _arange(x):
    return x + torch.arange(2, 2 + x.shape[-1]) + torch.arange(x.shape[-1], dtype=torch.float32)


def _factories(x):
    return x + torch.zeros(x.shape[-1]), x * torch.ones(x.shape[-1], dtype=x.dtype), torch.zeros_like(x), \
        x.new_ones(3)


def _constant(x):
    return x + torch.tensor([1.0, -2.0, 3.0], dtype=x.dtype)


OPS = [
    OpInfo("transpose_int", lambda x, d0=0, d1=2: torch.transpose(x, d0, d1) * 2, (aten.transpose.int,),
           lambda dt: [Sample((make((2, 3, 4), dt),)), Sample((make((2, 3, 4), dt),), {"d0": -1, "d1": 1}, name="neg"),
                       Sample((make((5,), dt),), {"d0": 0, "d1": -1}, name="1d")], dtypes=(F32, BF16)),
    OpInfo("_unsafe_view", _view_of_transposed, (aten.transpose.int, aten._unsafe_view.default),
           lambda dt: [Sample((make((2, 3, 4), dt),))]),
    OpInfo("split_tensor", lambda x: torch.split(x, 2, dim=1), (aten.split.Tensor,),
           lambda dt: [Sample((make((3, 5), dt),)), Sample((make((3, 4), dt),), name="even")], dtypes=(F32, I64)),
    OpInfo("masked_fill_scalar", lambda x, m: x.masked_fill(m, -1.5), (aten.masked_fill.Scalar,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), torch.bool))),
                       Sample((make((3, 4), dt), make((4,), torch.bool, seed=1)), name="broadcast_mask")]),
    OpInfo("arange_start_default", _arange, (aten.arange.start, aten.arange.default),
           lambda dt: [Sample((make((2, 5), dt),))]),
    OpInfo("zeros_ones_like_new_ones", _factories,
           (aten.zeros.default, aten.ones.default, aten.zeros_like.default, aten.new_ones.default),
           lambda dt: [Sample((make((2, 3), dt),))], dtypes=(F32, I64)),
    OpInfo("stack", lambda x, y: torch.stack([x, y], 1), (aten.stack.default,),
           lambda dt: [Sample((make((2, 3), dt), make((2, 3), dt, seed=1)))], dtypes=(F32, I64)),
    OpInfo("sum_default", lambda x: x.sum(), (aten.sum.default,),
           lambda dt: [Sample((make((3, 4), dt),))], dtypes=(F32, I64)),
    OpInfo("lift_fresh_copy", _constant, (aten.lift_fresh_copy.default,),
           lambda dt: [Sample((make((2, 3), dt),))]),
]
