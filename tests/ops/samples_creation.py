"""OpInfo samples: tensor creation.

zeros/ones/new_*, *_like, fill_/zero_, eye, linspace, logspace, tril/triu
decompose into full / full_like / arange (plus elementwise ops) and ride along
as samples of those OpInfos. ``empty*`` results are always filled before they
are compared: their contents are undefined in PyTorch (we produce zeros).
"""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, bf16, i32, i64, b8 = torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool


def _apply(table):
    """An OpInfo fn that runs ``table[how](*args)``, ``how`` given per sample."""
    return lambda *args, how: table[how](*args)


def _arange(*args, dtype=None):
    return torch.arange(*args, dtype=dtype)


TRI = {
    "tril-triu": lambda x: (x.tril(1), x.triu(-1)),
    "eye": lambda x: (torch.eye(3, 4) + x, torch.eye(2, dtype=i64)),
    "linspace-logspace": lambda x: (torch.linspace(-1, 1, 4) + x, torch.logspace(0, 2, 3)),
    "diag_embed": lambda x: torch.diag_embed(x),
}
FULL = {
    "zeros-ones": lambda x: (torch.zeros(2, 3), torch.ones(2, dtype=i32), torch.zeros(0, 2)),
    "full-bool-int": lambda x: (torch.full((2, 2), True), torch.full((3,), 7)),
    "new_full": lambda x: (x.new_full((3,), 2.5), x.new_zeros(2, 1), x.new_ones(1)),
    "full-dtype": lambda x: torch.full((2, 3), 1.5, dtype=bf16),
}
FULL_LIKE = {
    "zeros_ones_like": lambda x: (torch.zeros_like(x), torch.ones_like(x, dtype=i64)),
    "full_like": lambda x: torch.full_like(x, 7),
    "fill-zero": lambda x: (x.clone().fill_(3), x.clone().zero_()),
    "empty-input": lambda x: torch.full_like(x, -1),
}
EMPTY = {
    "empty-fill": lambda x: torch.empty(2, 3, dtype=i32).fill_(5) + x.sum().to(i32),
    "new_empty": lambda x: x.new_empty(3, 2).fill_(1) * x[0, 0],
    "cat-legacy": lambda x: torch.cat([x, torch.empty(0)]),
}
EMPTY_OTHER = {
    "empty_strided": lambda x: torch.empty_strided((2, 3), (1, 2)).fill_(2) + x,
    "empty_like": lambda x: torch.empty_like(x).fill_(1) - x,
    "new_empty_strided": lambda x: aten.new_empty_strided.default(x, [3, 2], [2, 1]).zero_() + x[0, 0],
}


def _arange_samples(dt):
    return [Sample((5,), {"dtype": dt if dt != f32 else None}, name="int"),
            Sample((0.5, 2.3, 0.3), {"dtype": dt if dt != i64 else None}, name="float"),
            Sample((10, 0, -3), {"dtype": dt if dt != f32 else None}, name="neg-step"),
            Sample((-2, 3.5), {"dtype": f64}, name="mixed-f64")]


CREATION = [
    OpInfo("arange", _arange, (aten.arange.start_step,), _arange_samples, dtypes=(f32, i64, bf16)),
    OpInfo("tri_eye_linspace", _apply(TRI), (aten.arange.start_step,),
           lambda dt: [Sample((make((3, 4), dt),), {"how": h}, name=h) for h in TRI]),
    OpInfo("full", _apply(FULL), (aten.full.default,),
           lambda dt: [Sample((make((2, 3), dt),), {"how": h}, name=h) for h in FULL], dtypes=(f32, i64)),
    OpInfo("full_like", _apply(FULL_LIKE), (aten.full_like.default,),
           lambda dt: [Sample((make((2, 3) if h != "empty-input" else (0, 2), dt),), {"how": h}, name=h)
                       for h in FULL_LIKE], dtypes=(f32, b8, bf16)),
    OpInfo("empty", _apply(EMPTY), (aten.empty.memory_format,),
           lambda dt: [Sample((make((2, 3) if h != "cat-legacy" else (3,), dt),), {"how": h}, name=h) for h in EMPTY]),
    OpInfo("empty_strided", _apply(EMPTY_OTHER), (aten.empty_strided.default,),
           lambda dt: [Sample((make((2, 3), dt),), {"how": "empty_strided"})]),
    OpInfo("empty_permuted", _apply(EMPTY_OTHER), (aten.empty_permuted.default,),
           lambda dt: [Sample((make((2, 3), dt),), {"how": "empty_like"})], dtypes=(f32, i32)),
    OpInfo("new_empty_strided", _apply(EMPTY_OTHER), (aten.new_empty_strided.default,),
           lambda dt: [Sample((make((2, 3), dt),), {"how": "new_empty_strided"})]),
    OpInfo("tril_indices", torch.tril_indices, (aten.tril_indices.default,),
           lambda dt: [Sample((3, 4)), Sample((4, 3, -1), name="neg-offset"),
                       Sample((2, 5, 2), {"dtype": i32}, name="dtype")]),
    OpInfo("triu_indices", torch.triu_indices, (aten.triu_indices.default,),
           lambda dt: [Sample((3, 4)), Sample((4, 3, 1), name="offset"), Sample((0, 3), name="empty")]),
    OpInfo("hann_window", torch.hann_window, (aten.hann_window.default, aten.hann_window.periodic),
           lambda dt: [Sample((8,)), Sample((7, False), name="symmetric")]),
    OpInfo("hamming_window", torch.hamming_window,
           (aten.hamming_window.default, aten.hamming_window.periodic, aten.hamming_window.periodic_alpha,
            aten.hamming_window.periodic_alpha_beta),
           lambda dt: [Sample((6,)), Sample((7, False), name="symmetric"), Sample((8, True, 0.5), name="alpha"),
                       Sample((8, True, 0.5, 0.5), name="alpha-beta"),
                       Sample((5, True, 0.6, 0.4), {"dtype": f64}, name="f64")]),
    OpInfo("blackman_window", torch.blackman_window, (aten.blackman_window.default, aten.blackman_window.periodic),
           lambda dt: [Sample((8,)), Sample((7, False), name="symmetric"), Sample((1, True), name="one")]),
    OpInfo("bartlett_window", torch.bartlett_window, (aten.bartlett_window.default, aten.bartlett_window.periodic),
           lambda dt: [Sample((8,)), Sample((7, False), name="symmetric"), Sample((0, True), name="empty")]),
    OpInfo("kaiser_window", torch.kaiser_window,
           (aten.kaiser_window.default, aten.kaiser_window.periodic, aten.kaiser_window.beta),
           lambda dt: [Sample((8,)), Sample((7, False), name="symmetric"), Sample((8, True, 5.0), name="beta"),
                       Sample((6, True, 8.0), {"dtype": bf16}, name="bf16")]),
]

OPS = CREATION
