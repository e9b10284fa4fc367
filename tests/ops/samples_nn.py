"""OpInfo samples: neural-network ops (linalg, conv, pool, norm, attention, embedding, upsample, RNNs).

Random ops (dropout, rand*, bernoulli, …) are checked statistically in test_random.py;
BatchNorm's train-mode buffer mutation through a real module in test_nn_modules.py.
"""

import torch
import torch.nn.functional as F

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten

F32, BF16, I64 = torch.float32, torch.bfloat16, torch.int64
LOW_TOL = {BF16: (3e-2, 3e-2)}


def _nan_self(dt):
    t = make((3, 5), dt)
    if dt.is_floating_point:
        t[0, 0] = float("nan")
    return t


def _f8(shape, dtype=torch.float8_e4m3fn, seed=0):
    return make(shape, F32, seed=seed).to(dtype)


# ----------------------------------------------------------------------------- linalg
LINALG = [
    OpInfo("mm", torch.mm, (aten.mm.default,),
           lambda dt: [Sample((make((3, 4), dt), make((4, 5), dt))),
                       Sample((make((0, 4), dt), make((4, 2), dt)), name="empty"),
                       Sample((make((3, 0), dt), make((0, 2), dt)), name="k0")],
           dtypes=(F32, BF16, I64), tol=LOW_TOL),
    # torch's meta kernel (capture) makes CUDA's checks: bfloat16 inputs, rows of 16 bytes
    OpInfo("grouped_mm", lambda a, b, *offs, **k: torch._grouped_mm(a, b, *offs, **k), (aten._grouped_mm.default,),
           lambda dt: [Sample((make((6, 8), dt), make((2, 8, 8), dt, seed=1), torch.tensor([2, 6], dtype=torch.int32))),
                       Sample((make((6, 8), dt), make((3, 8, 16), dt, seed=1), torch.tensor([1, 1, 6], dtype=torch.int32)),
                              name="empty_group"),
                       Sample((make((8, 16), dt), make((16, 8), dt, seed=1), torch.tensor([8, 16], dtype=torch.int32)),
                              name="2d_2d"),
                       Sample((make((2, 8, 16), dt), make((16, 16), dt, seed=1), torch.tensor([8, 16], dtype=torch.int32)),
                              name="3d_2d"),
                       Sample((make((2, 8, 16), dt), make((2, 16, 8), dt, seed=1)), name="3d_3d")],
           dtypes=(BF16,), tol=LOW_TOL),
    # float8 operands (mat2 column-major, sizes of 16: torch's meta kernel makes CUDA's checks); ``dt``: the result's
    OpInfo("scaled_mm", torch._scaled_mm, (aten._scaled_mm.default,),
           lambda dt: [Sample((_f8((16, 32)), _f8((16, 32), seed=1).T, torch.tensor(0.7), torch.tensor(1.3)),
                              {"out_dtype": dt}),
                       Sample((_f8((16, 32)), _f8((32, 32), seed=1).T, make((16, 1), F32).abs() + 0.5,
                               make((1, 32), F32, seed=2).abs() + 0.5), {"out_dtype": dt}, name="rowwise"),
                       Sample((_f8((16, 32)), _f8((16, 32), torch.float8_e5m2, seed=1).T, torch.tensor(0.7),
                               torch.tensor(1.3)), {"out_dtype": dt, "bias": make((16,), dt, seed=3)}, name="bias")],
           dtypes=(F32, BF16), tol=LOW_TOL),
    # torch.nn.functional.scaled_mm: scales and recipes (ScalingType.TensorWise = 0, RowWise = 1) as lists
    OpInfo("scaled_mm_v2", lambda a, b, sa, ra, sb, rb, **k: torch._scaled_mm_v2(a, b, [sa], [ra], [], [sb], [rb], [],
                                                                                 None, **k),
           (aten._scaled_mm_v2.default,),
           lambda dt: [Sample((_f8((16, 32)), _f8((16, 32), seed=1).T, torch.tensor(0.7), 0, torch.tensor(1.3), 0),
                              {"out_dtype": dt}),
                       Sample((_f8((16, 32)), _f8((32, 32), seed=1).T, make((16, 1), F32).abs() + 0.5, 1,
                               make((1, 32), F32, seed=2).abs() + 0.5, 1), {"out_dtype": dt}, name="rowwise")],
           dtypes=(F32, BF16), tol=LOW_TOL),
    OpInfo("int_mm", torch._int_mm, (aten._int_mm.default,),
           lambda dt: [Sample((make((32, 64), torch.int8, low=-128, high=128), make((64, 16), torch.int8, low=-128,
                                                                                   high=128, seed=1)))]),
    OpInfo("weight_int8pack_mm", torch._weight_int8pack_mm, (aten._weight_int8pack_mm.default,),
           lambda dt: [Sample((make((4, 32), dt), make((16, 32), torch.int8, low=-128, high=128, seed=1),
                               make((16,), dt, seed=2).abs() + 0.1))],
           dtypes=(F32, BF16), tol={F32: (2e-4, 1e-3), BF16: (2e-2, 2e-2)}),
    OpInfo("matmul_bmm", torch.matmul, (aten.bmm.default,),
           lambda dt: [Sample((make((2, 3, 4), dt), make((2, 4, 5), dt))),
                       Sample((make((2, 1, 3, 4), dt), make((3, 4, 2), dt)), name="bcast4d")],
           dtypes=(F32, BF16), tol=LOW_TOL),
    OpInfo("addmm", torch.addmm, (aten.addmm.default,),
           lambda dt: [Sample((make((3, 5), dt), make((3, 4), dt), make((4, 5), dt))),
                       Sample((make((5,), dt), make((3, 4), dt), make((4, 5), dt)), {"beta": 2, "alpha": 3},
                              name="bias1d"),
                       Sample((_nan_self(dt), make((3, 4), dt), make((4, 5), dt)), {"beta": 0}, name="beta0")],
           dtypes=(F32, BF16, I64), tol=LOW_TOL),
    OpInfo("addbmm", torch.addbmm, (aten.addbmm.default,),
           lambda dt: [Sample((make((3, 5), dt), make((2, 3, 4), dt), make((2, 4, 5), dt))),
                       Sample((make((5,), dt), make((4, 3, 2), dt), make((4, 2, 5), dt)), {"beta": 0.5, "alpha": 2},
                              name="scaled_bias1d"),
                       Sample((_nan_self(dt), make((2, 3, 4), dt), make((2, 4, 5), dt)), {"beta": 0}, name="beta0")],
           dtypes=(F32, BF16), tol=LOW_TOL),
    OpInfo("bilinear", torch.nn.functional.bilinear, (aten._trilinear.default,),
           lambda dt: [Sample((make((6, 4), dt), make((6, 5), dt), make((3, 4, 5), dt), make((3,), dt))),
                       Sample((make((2, 6, 4), dt), make((2, 6, 5), dt), make((3, 4, 5), dt)), name="3d_no_bias")],
           dtypes=(F32, BF16), tol=LOW_TOL),
    OpInfo("addmv", torch.addmv, (aten.addmv.default,),
           lambda dt: [Sample((make((3,), dt), make((3, 4), dt), make((4,), dt))),
                       Sample((make((3,), dt), make((3, 4), dt), make((4,), dt)), {"beta": 0.5, "alpha": 2},
                              name="scaled")],
           dtypes=(F32,)),
    OpInfo("cdist", torch.cdist, (aten._cdist_forward.default,),
           lambda dt: [Sample((make((2, 3, 4), dt), make((2, 5, 4), dt))),
                       Sample((make((3, 4), dt), make((2, 4), dt)), {"p": 1.0}, name="p1"),
                       Sample((make((3, 4), dt), make((2, 4), dt)), {"p": float("inf")}, name="pinf"),
                       Sample((make((3, 4), dt), make((2, 4), dt)), {"p": 3.0}, name="p3")],
           tol={F32: (1e-4, 1e-4)}),
]


# ----------------------------------------------------------------------------- conv
def _conv(x, w, b=None, **kw):
    return getattr(F, f"conv{w.ndim - 2}d")(x, w, b, **kw)


def _conv_t(x, w, b=None, **kw):
    return getattr(F, f"conv_transpose{w.ndim - 2}d")(x, w, b, **kw)


CONV = [
    OpInfo("conv", _conv, (aten.convolution.default,),
           lambda dt: [Sample((make((2, 4, 9), dt), make((6, 4, 3), dt), make((6,), dt)),
                              {"stride": 2, "dilation": 2, "padding": 1}, name="1d"),
                       Sample((make((1, 4, 6, 5), dt), make((6, 2, 3, 2), dt), make((6,), dt)),
                              {"groups": 2, "padding": (1, 0), "stride": (1, 2)}, name="2d_grouped"),
                       Sample((make((3, 6, 5), dt), make((6, 1, 3, 3), dt)), {"groups": 3, "padding": 1},
                              name="2d_depthwise_unbatched"),
                       Sample((make((1, 2, 4, 4, 3), dt), make((3, 2, 2, 2, 2), dt), make((3,), dt)),
                              {"padding": "same"}, name="3d_same")],
           dtypes=(F32, BF16), tol={F32: (1e-4, 1e-4), BF16: (3e-2, 5e-2)}),
    OpInfo("_convolution", lambda x, w, b, transposed: torch._convolution(
               x, w, b, [1, 2], [1, 0], [1, 1], transposed, [0, 1] if transposed else [0, 0], 1, False, False, True, True),
           (aten._convolution.default,),
           lambda dt: [Sample((make((1, 2, 5, 6), dt), make((3, 2, 3, 2), dt), make((3,), dt), False)),
                       Sample((make((1, 2, 5, 6), dt), make((2, 3, 3, 2), dt), None, True), name="transposed")],
           tol={F32: (1e-4, 1e-4)}),
    OpInfo("conv_transpose", _conv_t, (aten.convolution.default,),
           lambda dt: [Sample((make((2, 4, 5), dt), make((4, 3, 3), dt), make((6,), dt)),
                              {"stride": 2, "padding": 1, "output_padding": 1, "groups": 2, "dilation": 2},
                              name="1d_grouped"),
                       Sample((make((1, 3, 4, 3), dt), make((3, 2, 3, 2), dt), make((2,), dt)),
                              {"stride": (2, 3), "padding": (1, 0), "output_padding": (1, 2)}, name="2d"),
                       Sample((make((3, 4, 4), dt), make((3, 1, 2, 2), dt)), {"groups": 3, "stride": 2},
                              name="2d_depthwise_unbatched"),
                       Sample((make((1, 2, 3, 2, 2), dt), make((2, 2, 2, 2, 2), dt)), {"stride": 2, "padding": 1},
                              name="3d")],
           dtypes=(F32, BF16), tol={F32: (1e-4, 1e-4), BF16: (3e-2, 5e-2)}),
]


# ----------------------------------------------------------------------------- pool
def _max_pool(x, nd, *args, **kw):
    return getattr(F, f"max_pool{nd}d")(x, *args, **kw)


def _avg_pool(x, nd, *args, **kw):
    return getattr(F, f"avg_pool{nd}d")(x, *args, **kw)


def _adaptive(x, kind, nd, size, **kw):
    return getattr(F, f"adaptive_{kind}_pool{nd}d")(x, size, **kw)


def _fractional(x, samples, kernel, size):
    fn = F.fractional_max_pool2d if len(kernel) == 2 else F.fractional_max_pool3d
    return fn(x, kernel, output_size=size, return_indices=True, _random_samples=samples)


def _fractional_samples(dt):
    u = lambda *shape: torch.rand(shape, generator=torch.Generator().manual_seed(len(shape) + sum(shape)))  # noqa: E731
    nan = make((1, 2, 6, 6), dt)
    nan[0, 0, 1, 1], nan[0, 0, 2, 2] = float("nan"), float("nan")
    return [Sample((make((2, 3, 9, 11), dt), u(2, 3, 2).to(dt), (2, 3), (4, 5)), name="2d"),
            Sample((make((3, 7, 8), dt), u(1, 3, 2).to(dt), (2, 2), (3, 4)), name="2d_unbatched"),
            Sample((make((1, 2, 5, 6), dt), u(1, 2, 2).to(dt), (3, 2), (1, 3)), name="2d_one_window"),
            Sample((nan, u(1, 2, 2).to(dt), (3, 3), (2, 2)), name="2d_nan"),
            Sample((make((2, 2, 6, 7, 8), dt), u(2, 2, 3).to(dt), (2, 2, 3), (3, 4, 3)), name="3d")]


def _unpool(x, kernel, **kw):
    n = 3 if x.dim() == 5 else 2
    y, idx = getattr(F, f"max_pool{n}d")(x, kernel, return_indices=True)
    return getattr(F, f"max_unpool{n}d")(y, idx, kernel, **kw)


POOL = [
    OpInfo("max_unpool2d", _unpool, (aten.max_unpool2d.default,),
           lambda dt: [Sample((make((2, 3, 4, 6), dt), 2), name="batched"),
                       Sample((make((3, 5, 7), dt), 2), {"output_size": (5, 7)}, name="unbatched_output_size")],
           dtypes=(F32, BF16)),  # (the CPU has no integer kernel)
    OpInfo("max_unpool3d", _unpool, (aten.max_unpool3d.default,),
           lambda dt: [Sample((make((1, 2, 4, 4, 6), dt), 2))], dtypes=(F32, BF16)),
    OpInfo("fractional_max_pool", _fractional, (aten.fractional_max_pool2d.default, aten.fractional_max_pool3d.default),
           _fractional_samples),
    OpInfo("max_pool", _max_pool, (aten.max_pool2d_with_indices.default, aten.max_pool3d_with_indices.default),
           lambda dt: [Sample((make((2, 3, 7, 6), dt), 2, 3, 2, 1), {"ceil_mode": True, "return_indices": True},
                              name="2d_ceil_pad"),
                       Sample((make((3, 7, 7), dt), 2, 2, 1, 0, 2), name="2d_dilated_unbatched"),
                       Sample((make((2, 3, 9), dt), 1, 3, 2), {"return_indices": True, "padding": 1}, name="1d"),
                       Sample((make((1, 2, 4, 5, 4), dt), 3, 2), {"return_indices": True, "ceil_mode": True},
                              name="3d")],
           dtypes=(F32, BF16, I64)),
    OpInfo("avg_pool", _avg_pool, (aten.avg_pool2d.default,),
           lambda dt: [Sample((make((2, 3, 7, 6), dt), 2, 3, 2, 1), {"ceil_mode": True, "count_include_pad": False},
                              name="2d_ceil_nopad"),
                       Sample((make((3, 5, 5), dt), 2, 3, 1, 1), {"divisor_override": 2}, name="2d_divisor"),
                       Sample((make((2, 3, 8), dt), 1, 3, 2, 1), {"ceil_mode": True}, name="1d_ceil_inclpad")],
           dtypes=(F32, BF16, I64)),
    OpInfo("avg_pool3d", _avg_pool, (aten.avg_pool3d.default,),  # torch has no bfloat16 avg_pool3d on CPU
           lambda dt: [Sample((make((1, 2, 4, 5, 3), dt), 3, 3, 2, 1), {"count_include_pad": False}),
                       Sample((make((2, 4, 3, 4), dt), 3, 2, 1, 1), {"ceil_mode": True}, name="unbatched_ceil")],
           dtypes=(F32, I64)),
    OpInfo("adaptive_avg_pool", _adaptive, (aten._adaptive_avg_pool2d.default, aten._adaptive_avg_pool3d.default),
           lambda dt: [Sample((make((2, 3, 7, 8), dt), "avg", 2, (3, 5)), name="2d_nondivisible"),
                       Sample((make((3, 6, 4), dt), "avg", 2, (3, 4)), name="2d_divisible_unbatched"),
                       Sample((make((2, 3, 10), dt), "avg", 1, 4), name="1d"),
                       Sample((make((1, 2, 5, 4, 6), dt), "avg", 3, (2, 3, 4)), name="3d")],
           dtypes=(F32, BF16)),
    OpInfo("adaptive_max_pool", _adaptive, (aten.adaptive_max_pool2d.default, aten.adaptive_max_pool3d.default),
           lambda dt: [Sample((make((2, 3, 7, 8), dt), "max", 2, (3, 5)), {"return_indices": True},
                              name="2d_nondivisible"),
                       Sample((make((3, 6, 4), dt), "max", 2, (3, 2)), name="2d_values_unbatched"),
                       Sample((make((2, 3, 10), dt), "max", 1, 4), {"return_indices": True}, name="1d"),
                       Sample((make((1, 2, 5, 4, 6), dt), "max", 3, (2, 3, 4)), {"return_indices": True},
                              name="3d")],
           dtypes=(F32, BF16)),
]


# ----------------------------------------------------------------------------- norm
def _bn_train(x, rm, rv, w=None, b=None, momentum=0.1, eps=1e-5):
    """Batch norm in train mode on copies of the running stats; returns them updated."""
    rm, rv = rm.clone(), rv.clone()
    y = F.batch_norm(x, rm, rv, w, b, training=True, momentum=momentum, eps=eps)
    return y, rm, rv


def _bn_with_update(x, rm, rv, w, b):
    """``torch.ops.aten._batch_norm_with_update`` (what the train-mode batch norm of a compiled graph
    becomes) on copies of the running stats; returns its outputs but the reserve and the stats."""
    rm, rv = rm.clone(), rv.clone()
    y, mean, invstd, _ = aten._batch_norm_with_update(x, w, b, rm, rv, 0.2, 1e-5)
    return y, mean, invstd, rm, rv


NORM = [
    OpInfo("layer_norm", F.layer_norm, (aten.layer_norm.default,),
           lambda dt: [Sample((make((2, 3, 5), dt), (5,), make((5,), dt), make((5,), dt))),
                       Sample((make((2, 3, 4), dt), (3, 4)), {"eps": 1e-3}, name="2dims_noaffine"),
                       Sample((make((0, 4), dt), (4,)), name="empty")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-4), BF16: (3e-2, 3e-2)}),
    OpInfo("native_layer_norm", aten.native_layer_norm.default, (aten.native_layer_norm.default,),
           lambda dt: [Sample((make((2, 3, 4), dt), [3, 4], make((3, 4), dt), make((3, 4), dt), 1e-5))],
           tol={F32: (1e-5, 1e-4)}),
    OpInfo("rms_norm", F.rms_norm, (aten.rms_norm.default,),
           lambda dt: [Sample((make((2, 3, 5), dt), (5,), make((5,), dt))),
                       Sample((make((2, 3, 4), dt), (3, 4)), {"eps": 1e-3}, name="2dims_eps")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-4), BF16: (3e-2, 3e-2)}),
    OpInfo("group_norm", F.group_norm, (aten.group_norm.default,),
           lambda dt: [Sample((make((2, 6, 3, 2), dt), 3, make((6,), dt), make((6,), dt))),
                       Sample((make((2, 4, 5), dt), 2), {"eps": 1e-3}, name="1d_noaffine")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-4), BF16: (3e-2, 3e-2)}),
    OpInfo("native_group_norm", aten.native_group_norm.default, (aten.native_group_norm.default,),
           lambda dt: [Sample((make((2, 6, 3, 2), dt), make((6,), dt), make((6,), dt), 2, 6, 6, 3, 1e-5))],
           tol={F32: (1e-5, 1e-4)}),
    OpInfo("batch_norm_eval", F.batch_norm, (aten._native_batch_norm_legit_no_training.default,),
           lambda dt: [Sample((make((2, 4, 3, 3), dt), make((4,), F32), make((4,), F32, low=0.5, high=2),
                               make((4,), F32), make((4,), F32))),
                       Sample((make((3, 4), dt), make((4,), F32), make((4,), F32, low=0.5, high=2)),
                              {"eps": 1e-3}, name="1d_noaffine")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-4), BF16: (3e-2, 3e-2)}),
    OpInfo("batch_norm_train", _bn_train, (aten._native_batch_norm_legit_functional.default,),
           lambda dt: [Sample((make((2, 4, 3, 3), dt), make((4,), dt), make((4,), dt, low=0.5, high=2),
                               make((4,), dt), make((4,), dt)), {"momentum": 0.3}),
                       Sample((make((5, 3), dt), make((3,), dt), make((3,), dt, low=0.5, high=2)), name="1d")],
           tol={F32: (1e-5, 1e-4)}),
    OpInfo("batch_norm_with_update", _bn_with_update, (aten._batch_norm_with_update_functional.default,),
           lambda dt: [Sample((make((2, 4, 3, 3), dt), make((4,), dt), make((4,), dt, low=0.5, high=2),
                               make((4,), dt), make((4,), dt)))],
           tol={F32: (1e-5, 1e-4)}),
    OpInfo("batch_norm_no_stats", F.instance_norm, (aten._native_batch_norm_legit.no_stats,),
           lambda dt: [Sample((make((2, 3, 4, 4), dt),)),
                       Sample((make((2, 3, 5), dt), None, None, make((3,), dt), make((3,), dt)), name="affine")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-4), BF16: (3e-2, 3e-2)}),
]


# ----------------------------------------------------------------------------- attention
def _bool_mask(shape, seed=0):
    m = make(shape, torch.bool, seed=seed)
    m[..., 0, :] = False  # a fully masked row: torch's CPU kernels give zeros, not NaN
    return m


ATTENTION = [
    OpInfo("sdpa", F.scaled_dot_product_attention, (aten.scaled_dot_product_attention.default,),
           lambda dt: [Sample((make((2, 2, 4, 8), dt), make((2, 2, 5, 8), dt), make((2, 2, 5, 3), dt),
                               _bool_mask((2, 1, 4, 5))), {"scale": 0.3}, name="bool_mask"),
                       Sample((make((1, 2, 3, 4), dt), make((1, 2, 6, 4), dt), make((1, 2, 6, 4), dt),
                               make((3, 6), dt)), name="additive_mask"),
                       Sample((make((1, 2, 5, 4), dt), make((1, 2, 3, 4), dt), make((1, 2, 3, 4), dt)),
                              {"is_causal": True}, name="causal_L_gt_S"),
                       Sample((make((2, 4, 3, 4), dt), make((2, 2, 3, 4), dt), make((2, 2, 3, 4), dt)),
                              {"enable_gqa": True, "is_causal": True}, name="gqa_causal")],
           dtypes=(F32, BF16), tol={F32: (1e-5, 1e-5), BF16: (3e-2, 3e-2)}),  # dropout: test_random.py
]


# ----------------------------------------------------------------------------- embedding
def _idx(shape, high, seed=0, dtype=I64):
    return make(shape, dtype, low=0, high=high, seed=seed)


_BAG_INDICES, _BAG_OFFSETS = torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 2, 5])


def _bag_forward(dt, mode, psw, padding):
    """torch's CPU ``_embedding_bag`` of the backward samples: (output, offset2bag, bag_size, max_indices)."""
    weights = make((8,), dt, seed=3) if psw else None
    return aten._embedding_bag(make((10, 3), dt), _BAG_INDICES, _BAG_OFFSETS, False, mode, False, weights, False,
                               padding)


def _bag_backward_sample(dt, mode, psw, padding, freq):
    _, offset2bag, bag_size, max_indices = _bag_forward(dt, mode, psw, padding)
    return Sample((make((4, 3), dt, seed=2), _BAG_INDICES, _BAG_OFFSETS, offset2bag, bag_size, max_indices, 10, freq,
                   mode, False, make((8,), dt, seed=3) if psw else None, padding),
                  name=f"mode{mode}_psw{int(psw)}_padding{padding}_freq{int(freq)}")


EMBEDDING = [
    OpInfo("embedding", lambda i, w, **kw: F.embedding(i, w, **kw), (aten.embedding.default,),
           lambda dt: [Sample((_idx((2, 3), 7), make((7, 4), dt)), {"padding_idx": 1}),
                       Sample((_idx((5,), 7, dtype=torch.int32), make((7, 4), dt)), name="int32_idx"),
                       Sample((torch.tensor(3), make((7, 4), dt)), name="0d"),
                       Sample((_idx((0, 2), 7), make((7, 4), dt)), name="empty")],
           dtypes=(F32, BF16)),
    OpInfo("embedding_bag", lambda i, w, o=None, psw=None, **kw: F.embedding_bag(i, w, o, per_sample_weights=psw, **kw),
           (aten.embedding_bag.padding_idx,),
           lambda dt: [Sample((torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), make((10, 3), dt), torch.tensor([0, 2, 2, 5]),
                               make((8,), dt)), {"mode": "sum"}, name="sum_psw_emptybag"),
                       Sample((torch.tensor([[1, 2, 4], [2, 2, 2]]), make((10, 3), dt)),
                              {"mode": "mean", "padding_idx": 2}, name="mean_2d_padding"),
                       Sample((torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), make((10, 3), dt), torch.tensor([0, 2, 2, 5])),
                              {"mode": "max"}, name="max_emptybag"),
                       Sample((torch.tensor([1, 2, 4, 5, 4, 3]), make((10, 3), dt), torch.tensor([0, 1, 4, 6])),
                              {"mode": "sum", "include_last_offset": True}, name="sum_last_offset")],
           dtypes=(F32, BF16)),
    OpInfo("_embedding_bag", aten._embedding_bag.default, (aten._embedding_bag.default,),
           lambda dt: [Sample((make((10, 3), dt), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 2, 5]),
                               False, mode, False, psw, False, 2), name=f"mode{mode}")
                       for mode, psw in ((0, make((8,), dt)), (1, None), (2, None))]),
    OpInfo("_embedding_bag_forward_only", aten.embedding_bag.default, (aten._embedding_bag_forward_only.default,),
           lambda dt: [Sample((make((10, 3), dt), torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), torch.tensor([0, 2, 2, 5]),
                               False, mode), name=f"mode{mode}") for mode in (0, 1, 2)]),
    # the backward ops take what torch's CPU forward saved (offset2bag, bag_size, max indices)
    OpInfo("_embedding_bag_backward", aten._embedding_bag_backward.default, (aten._embedding_bag_backward.default,),
           lambda dt: [_bag_backward_sample(dt, mode, psw, padding, freq)
                       for mode, psw, padding, freq in ((0, True, -1, False), (1, False, 2, True), (2, False, -1, False),
                                                        (0, False, 4, False))],
           xfail={"mode1_psw0_padding2_freq1": "scale_grad_by_freq: torch's CPU kernel divides the k-th distinct row's "
                                               "gradient by the count of the k-th sorted index, not by that row's own "
                                               "count (the documented frequency, which the lowering uses)"}),
    OpInfo("_embedding_bag_per_sample_weights_backward", aten._embedding_bag_per_sample_weights_backward.default,
           (aten._embedding_bag_per_sample_weights_backward.default,),
           lambda dt: [Sample((make((4, 3), dt, seed=2), make((10, 3), dt), _BAG_INDICES, _BAG_OFFSETS,
                               _bag_forward(dt, 0, True, padding)[1], 0, padding), name=f"padding{padding}")
                       for padding in (-1, 4)]),
]


# ----------------------------------------------------------------------------- upsample
def _img(shape, dt):
    return make(shape, dt, low=0, high=9) if dt == torch.uint8 else make(shape, dt)


def _px(shape, dt):
    """An image of ``dt``: uint8 pixels over their whole range (torch's CPU resizes them in fixed point)."""
    return make(shape, dt, low=0, high=256) if dt == torch.uint8 else make(shape, dt)


def _antialiased(mode: str, op, down_shape: tuple) -> OpInfo:
    """``F.interpolate(mode=mode, antialias=True)``: downsampling (by size, by scales with align_corners)
    and upsampling."""
    def samples(dt):
        return [Sample((_px(down_shape, dt),), {"size": (5, 4), "mode": mode, "antialias": True}, name="down"),
                Sample((_px((1, 2, 9, 8), dt),), {"scale_factor": (0.6, 0.3), "mode": mode, "antialias": True,
                                                  "align_corners": True}, name="down_align_corners"),
                Sample((_px((1, 2, 3, 4), dt),), {"size": (7, 5), "mode": mode, "antialias": True}, name="up")]

    return OpInfo(f"upsample_{mode}2d_aa", F.interpolate, (op,), samples, dtypes=(F32, torch.uint8),
                  tol={F32: (1e-5, 1e-5)})


UPSAMPLE = [
    OpInfo("upsample_nearest2d", F.interpolate, (aten.upsample_nearest2d.vec,),
           lambda dt: [Sample((_img((1, 2, 3, 4), dt),), {"scale_factor": (2, 3)}, name="x2x3"),
                       Sample((_img((1, 2, 4, 5), dt),), {"size": (5, 11)}, name="size"),
                       Sample((_img((2, 1, 5, 5), dt),), {"scale_factor": 1.7}, name="scale1.7"),
                       Sample((_img((1, 2, 6, 5), dt),), {"scale_factor": (0.5, 0.6)}, name="down")],
           dtypes=(F32, BF16, torch.uint8)),
    OpInfo("upsample_nearest2d_default", aten.upsample_nearest2d.default, (aten.upsample_nearest2d.default,),
           lambda dt: [Sample((make((1, 2, 3, 4), dt), [5, 7])),
                       Sample((make((1, 2, 3, 4), dt), [5, 7], 1.8, 1.9), name="scales")]),
    OpInfo("upsample_bilinear2d", F.interpolate, (aten.upsample_bilinear2d.vec,),
           lambda dt: [Sample((_px((1, 2, 3, 4), dt),), {"scale_factor": 2, "mode": "bilinear"}, name="x2"),
                       Sample((_px((1, 2, 4, 5), dt),), {"size": (5, 11), "mode": "bilinear", "align_corners": True},
                              name="size_align_corners"),
                       Sample((_px((2, 1, 5, 5), dt),), {"scale_factor": (1.7, 0.6), "mode": "bilinear"},
                              name="scale_mixed"),
                       Sample((_px((1, 2, 6, 5), dt),), {"size": (4, 1), "mode": "bilinear", "align_corners": True},
                              name="down_align_corners")],
           dtypes=(F32, BF16, torch.uint8), tol={F32: (1e-5, 1e-5), BF16: (3e-2, 3e-2)}),
    _antialiased("bilinear", aten._upsample_bilinear2d_aa.default, (1, 2, 9, 8)),
    _antialiased("bicubic", aten._upsample_bicubic2d_aa.default, (1, 2, 17, 11)),
]


# ----------------------------------------------------------------------------- RNNs
def _rnn(kind, **kw):
    torch.manual_seed(0)
    module = getattr(torch.nn, kind)(**kw).eval()

    def fn(x, *state):
        if state:
            out, h = module(x, tuple(state) if kind == "LSTM" else state[0])
        else:
            out, h = module(x)
        return (out,) + (tuple(h) if isinstance(h, tuple) else (h,))

    fn.__name__ = kind
    return fn


# capture keeps nn.LSTM/GRU/RNN whole (aten.lstm.input, …); the rows unroll the time loop.
def _rnn_info(name, kind, op, shapes, **kw):
    return OpInfo(name, _rnn(kind, **kw), (op,),
                  lambda dt: [Sample(tuple(make(s, dt, seed=i) for i, s in enumerate(shapes)))],
                  tol={F32: (1e-5, 1e-5)})


RNN = [
    _rnn_info("lstm", "LSTM", aten.lstm.input, [(2, 5, 3)], input_size=3, hidden_size=4, num_layers=2,
              bidirectional=True, batch_first=True),
    _rnn_info("lstm_state", "LSTM", aten.lstm.input, [(4, 2, 3), (1, 2, 4), (1, 2, 4)], input_size=3, hidden_size=4),
    _rnn_info("lstm_proj_nobias", "LSTM", aten.lstm.input, [(3, 1, 3), (2, 1, 2), (2, 1, 4)], input_size=3,
              hidden_size=4, proj_size=2, bias=False, bidirectional=True),
    _rnn_info("lstm_eval_dropout", "LSTM", aten.lstm.input, [(1, 1, 3)], input_size=3, hidden_size=4,
              num_layers=3, dropout=0.5, batch_first=True),
    _rnn_info("gru", "GRU", aten.gru.input, [(2, 5, 3)], input_size=3, hidden_size=4, num_layers=2,
              bidirectional=True, batch_first=True),
    _rnn_info("gru_state_nobias", "GRU", aten.gru.input, [(4, 2, 3), (2, 2, 4)], input_size=3, hidden_size=4,
              num_layers=2, bias=False),
    _rnn_info("rnn_tanh", "RNN", aten.rnn_tanh.input, [(3, 4, 2), (2, 3, 5)], input_size=2, hidden_size=5,
              bidirectional=True, batch_first=True),
    _rnn_info("rnn_relu", "RNN", aten.rnn_relu.input, [(4, 2, 3)], input_size=3, hidden_size=4, num_layers=2,
              nonlinearity="relu"),
]

OPS = LINALG + CONV + POOL + NORM + ATTENTION + EMBEDDING + UPSAMPLE + RNN
