"""OpInfo samples: the ``*_copy`` twins of view ops (``converter/lowering/ops/view_copy.py``).

torch.export keeps these ops whole, as functionalized graphs (torch.compile's) carry them.
"""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, i64, b8 = torch.float32, torch.int64, torch.bool


def _one(name, fn, op, *shapes_and_args, dtypes=(f32, i64)):
    """An OpInfo of ``fn(tensor, *args)`` per ``(shape, *args)`` sample."""
    def samples(dt):
        return [Sample((make(shape, dt, seed=i), *args), name=f"s{i}") for i, (shape, *args) in
                enumerate(shapes_and_args)]
    return OpInfo(name, fn, (op,), samples, dtypes=dtypes)


def _complex_copy(x):
    return torch.view_as_real_copy(torch.view_as_complex_copy(x)) * 2


def _conj_copy(x):
    return torch.view_as_real(torch._conj_copy(torch.view_as_complex(x)))


OPS = [
    _one("view_copy", lambda x, s: aten.view_copy.default(x, s), aten.view_copy.default,
         ((2, 3, 4), [6, 4]), ((2, 3), [-1]), ((), [1, 1])),
    _one("view_copy_dtype", lambda x, d: aten.view_copy.dtype(x, d), aten.view_copy.dtype,
         ((2, 4), torch.int32), ((2, 4), torch.float16), dtypes=(f32,)),
    _one("permute_copy", torch.permute_copy, aten.permute_copy.default, ((2, 3, 4), (2, 0, 1)), ((3, 2), (1, 0))),
    _one("expand_copy", lambda x, s: aten.expand_copy.default(x, s), aten.expand_copy.default,
         ((3, 1), [2, 3, 4]), ((1,), [-1])),
    _one("transpose_copy", torch.transpose_copy, aten.transpose_copy.int, ((2, 3, 4), 0, -1), ((3,), 0, 0)),
    _one("t_copy", torch.t_copy, aten.t_copy.default, ((3, 4),), ((5,),)),
    _one("squeeze_copy", torch.squeeze_copy, aten.squeeze_copy.default, ((2, 1, 3, 1),), ((1,),)),
    _one("squeeze_copy_dim", lambda x, d: torch.squeeze_copy(x, d), aten.squeeze_copy.dim, ((2, 1, 3), 1),
         ((2, 3), 0)),
    _one("squeeze_copy_dims", lambda x, d: torch.squeeze_copy(x, d), aten.squeeze_copy.dims,
         ((1, 2, 1, 3), (0, 2)), ((2, 3), ())),
    _one("unsqueeze_copy", torch.unsqueeze_copy, aten.unsqueeze_copy.default, ((2, 3), -1), ((), 0)),
    _one("select_copy", torch.select_copy, aten.select_copy.int, ((2, 3, 4), 1, -1), ((3,), 0, 2)),
    _one("slice_copy", lambda x, d, a, b, s: torch.slice_copy(x, d, a, b, s), aten.slice_copy.Tensor,
         ((2, 9), 1, 1, 8, 3), ((5, 2), 0, -3, None, 1)),
    _one("diagonal_copy", torch.diagonal_copy, aten.diagonal_copy.default, ((3, 4), 1), ((2, 3, 3), 0, 1, 2)),
    _one("alias_copy", torch.alias_copy, aten.alias_copy.default, ((2, 3),)),
    _one("detach_copy", torch.detach_copy, aten.detach_copy.default, ((2, 3),), ((),)),
    _one("as_strided_copy", torch.as_strided_copy, aten.as_strided_copy.default,
         ((2, 3, 4), (3, 2), (1, 3)), ((4, 4), (2, 2), (4, 1), 5)),
    _one("unfold_copy", torch.unfold_copy, aten.unfold_copy.default, ((2, 7), 1, 3, 2)),
    _one("unbind_copy", torch.unbind_copy, aten.unbind_copy.int, ((2, 3, 4), 1), ((3, 2), -2)),
    _one("split_copy", torch.split_copy, aten.split_copy.Tensor, ((7, 2), 3), ((2, 6), 2, 1)),
    _one("split_with_sizes_copy", torch.split_with_sizes_copy, aten.split_with_sizes_copy.default,
         ((6, 2), [1, 5]), ((2, 5), [2, 0, 3], 1)),
    OpInfo("view_as_complex_copy", _complex_copy, (aten.view_as_complex_copy.default, aten.view_as_real_copy.default),
           lambda dt: [Sample((make((3, 2), dt),)), Sample((make((2, 4, 2), dt, seed=1),), name="3d")],
           dtypes=(f32,)),
    OpInfo("conj_copy", _conj_copy, (aten._conj_copy.default,),
           lambda dt: [Sample((make((3, 2), dt),))], dtypes=(f32,)),
    _one("neg_view_copy", torch._neg_view_copy, aten._neg_view_copy.default, ((3, 2),)),
]
