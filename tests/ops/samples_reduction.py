"""OpInfo samples: reductions, cumulative ops, sorting and order statistics.

Ops that decompose before lowering (std, std_mean, all, argsort, msort, aminmax,
count_nonzero, nansum, logsumexp) ride along as samples of the OpInfo whose
overloads they become.
"""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, bf16, i32, i64, b8 = torch.float32, torch.float64, torch.bfloat16, torch.int32, torch.int64, torch.bool
NAN, INF = float("nan"), float("inf")


def with_nan(t):
    """``t`` (float, 2-d) with NaN at [0, 1] and [1, 0]."""
    t = t.clone()
    t[0, 1] = NAN
    t[-1, 0] = NAN
    return t


def distinct(shape, dt, seed=0):
    """A tensor of distinct values (a seeded permutation) so tie-breaking cannot matter."""
    g = torch.Generator().manual_seed(seed)
    n = 1
    for s in shape:
        n *= s
    return (torch.randperm(n, generator=g) - n // 2).reshape(shape).to(dt)


def _call(fn):
    """``fn(x, *args, **kw)`` — the tensor method called with a sample's constants."""
    return lambda x, *args, **kw: fn(x, *args, **kw)


# ---------------------------------------------------------------- sum / mean / prod

def _sum(x, dim=None, keepdim=False, dtype=None, extra=None):
    if extra == "nansum":
        return torch.nansum(x, dim)
    if extra == "count_nonzero":
        return torch.count_nonzero(x, dim)
    return torch.sum(x, dtype=dtype) if dim is None else torch.sum(x, dim, keepdim, dtype=dtype)


def _sum_samples(dt):
    out = [Sample((make((3, 4), dt),), {"dim": 1}), Sample((make((2, 3, 4), dt),), {"dim": (0, -1), "keepdim": True}),
           Sample((make((), dt),), name="0d"), Sample((make((0, 3), dt),), {"dim": 0}, name="empty")]
    if dt == f32:
        out[2] = Sample((with_nan(make((3, 4))),), {"dim": 1, "extra": "nansum"}, name="nansum")
        out[3] = Sample((make((3, 4), i32),), {"dim": 0, "dtype": f64}, name="dtype")
    if dt == i32:
        out[3] = Sample((make((3, 4), i32),), {"dim": -1, "extra": "count_nonzero"}, name="count_nonzero")
    return out


def _mean(x, dim=None, keepdim=False, dtype=None):
    return torch.mean(x, dtype=dtype) if dim is None else torch.mean(x, dim, keepdim, dtype=dtype)


def _mean_samples(dt):
    return [Sample((make((3, 4), dt),)), Sample((make((2, 3, 4), dt),), {"dim": -1, "keepdim": True}, name="keepdim"),
            Sample((make((2, 0), dt),), {"dim": 1}, name="empty-nan"),
            Sample((make((3, 4), dt),), {"dim": (0, 1), "dtype": f64}, name="dtype")]


def _prod(x, dim=None, keepdim=False):
    return torch.prod(x) if dim is None else torch.prod(x, dim, keepdim)


def _prod_samples(dt):
    return [Sample((make((3, 4), dt, low=-2, high=2),)), Sample((make((2, 3, 4), dt),), {"dim": -1, "keepdim": True}),
            Sample((make((), dt),), {"dim": 0}, name="0d"), Sample((make((0, 3), dt),), {"dim": 0}, name="empty")]


# ---------------------------------------------------------------- max / min families

def _amax_samples(dt):
    x = make((3, 4), dt)
    return [Sample((make((2, 3, 4), dt),), {"dim": (0, 2)}), Sample((x,), {"dim": -1, "keepdim": True}),
            Sample((make((0, 3), dt),), {"dim": 1}, name="empty"),
            Sample((with_nan(x) if dt.is_floating_point else make((), dt),), {"dim": ()}, name="nan-or-0d")]


def _dim_samples(dt):
    x = distinct((3, 4), dt) if dt != b8 else make((3, 4), dt)
    return [Sample((x,), {"dim": 1}), Sample((make((2, 3, 4), dt),), {"dim": -1, "keepdim": True}, name="keepdim"),
            Sample((make((), dt),), {"dim": 0}, name="0d"),
            Sample((with_nan(make((3, 4))) if dt.is_floating_point else make((3, 4), dt),), {"dim": 0}, name="nan")]


def _all_samples(dt):
    return [Sample((make((3, 4), dt),)), Sample((make((), dt),), name="0d"),
            Sample((with_nan(make((3, 4), dt)) if dt.is_floating_point else make((5,), dt),), name="nan")]


def _amin(x, dim=(), keepdim=False, aminmax=False):
    return torch.aminmax(x, dim=dim, keepdim=keepdim) if aminmax else torch.amin(x, dim, keepdim)


def _arg(fn):
    return lambda x, dim=None, keepdim=False: fn(x, dim, keepdim)


def _arg_samples(dt):
    x = distinct((3, 4), dt)
    return [Sample((x,)), Sample((x,), {"dim": 1}, name="dim"), Sample((x,), {"keepdim": True}, name="none-keepdim"),
            Sample((with_nan(make((3, 4))) if dt.is_floating_point else make((2, 3), dt),), {"dim": -1}, name="nan")]


# ---------------------------------------------------------------- var / any / cumulative

def _var(x, dim=None, correction=None, keepdim=False, std=False, both=False):
    if both:
        return (torch.std_mean if std else torch.var_mean)(x, dim, correction=correction, keepdim=keepdim)
    return (torch.std if std else torch.var)(x, dim, correction=correction, keepdim=keepdim)


def _var_samples(dt, both=False):
    return [Sample((make((3, 4), dt),), {"dim": 1, "both": both}),
            Sample((make((2, 3, 4), dt),), {"dim": (0, -1), "correction": 0, "keepdim": True, "both": both}, name="c0"),
            Sample((make((2, 3), dt),), {"std": True, "both": both}, name="std-all"),
            Sample((make((2, 2), dt),), {"dim": 0, "correction": 3, "both": both}, name="correction>n")]


def _any(x, dim=None, keepdim=False, all=False):
    fn = torch.all if all else torch.any
    return fn(x) if dim is None else fn(x, dim, keepdim)


def _any_samples(dt):
    return [Sample((make((3, 4), dt, low=-1, high=2),), {"dim": 1}), Sample((make((3, 4), dt, low=-1, high=2),)),
            Sample((make((2, 3, 4), dt, low=-1, high=2),), {"dim": (0, 2), "keepdim": True}, name="dims"),
            Sample((make((3, 4), dt, low=-1, high=2),), {"dim": -1, "all": True}, name="all"),
            Sample((make((3, 4), dt, low=-1, high=2),), {"dim": ()}, name="no_dims"),  # reduces nothing
            Sample((make((3, 4), dt, low=-1, high=2),), {"dim": (), "all": True}, name="all_no_dims")]


def _is_true(x, any=False):
    return (torch.ops.aten._is_any_true if any else torch.ops.aten._is_all_true)(x)


def _is_true_samples(dt):
    ones, mixed = torch.ones(3, 4, dtype=dt), make((3, 4), dt, low=-1, high=2)
    return [Sample((ones,), name="all_true"), Sample((mixed,), name="mixed"),
            Sample((torch.zeros(2, 3, dtype=dt),), {"any": True}, name="any_none"),
            Sample((mixed,), {"any": True}, name="any_mixed")]


def _cumsum_samples(dt):
    return [Sample((make((3, 4), dt),), {"dim": 1}),
            Sample((make((2, 3, 4), dt),), {"dim": -1, "dtype": f64}, name="dtype"),
            Sample((make((), dt),), {"dim": 0}, name="0d"), Sample((make((0, 3), dt),), {"dim": 0}, name="empty")]


def _cumprod_samples(dt):
    return [Sample((make((3, 4), dt, low=-2, high=2),), {"dim": 1}),
            Sample((make((2, 3, 4), dt, low=-2, high=2),), {"dim": -1}), Sample((make((), dt),), {"dim": 0}, name="0d")]


def _cum_extreme_samples(dt):
    ties = torch.tensor([[1.0, 3.0, 3.0, NAN, 2.0, NAN], [0.0, -1.0, -1.0, 2.0, 2.0, 5.0]]).to(dt)
    return [Sample((make((3, 4), dt),), {"dim": 1}), Sample((ties,), {"dim": 1}, name="ties-nan"),
            Sample((make((2, 3, 4), dt),), {"dim": 0}), Sample((make((), dt),), {"dim": 0}, name="0d")]


def _cum_int_samples(dt):
    return [Sample((make((3, 6), dt),), {"dim": 1}, name="ties"), Sample((make((4, 2), dt),), {"dim": 0})]


def _vector_norm_samples(dt):
    """Every ord torch special-cases (2, 1, 0, ±inf) and a general p, over all/one/several dims;
    F.normalize's use; a complex input (its real dtype comes out); an explicit ``dtype``."""
    x = make((3, 4), dt)
    x[0, 1] = 0
    out = [Sample((x,), name="all"), Sample((x, 1, 1), name="ord1"), Sample((x, 0, -1, True), name="ord0_keepdim"),
           Sample((x, INF, (0, 1)), name="inf"), Sample((x, -INF, 0), name="neg_inf"),
           Sample((x, 3.5, [1]), name="p3_5"), Sample((make((2, 3, 4), dt), 2, (0, 2), True), name="dims_keepdim")]
    if dt == f32:
        out += [Sample((torch.complex(x, x.flip(0)), 2, 1), name="complex"),
                Sample((x, 2, None, False), {"dtype": f64}, name="dtype")]
    return out


REDUCE = [
    OpInfo("sum", _sum, (aten.sum.dim_IntList,), _sum_samples, dtypes=(f32, i32, b8, bf16)),
    OpInfo("mean", _mean, (aten.mean.dim, aten.mean.default), _mean_samples, dtypes=(f32, bf16)),
    OpInfo("prod", _prod, (aten.prod.dim_int, aten.prod.default), _prod_samples, dtypes=(f32, i64, b8)),
    OpInfo("amax", _call(torch.amax), (aten.amax.default,), _amax_samples, dtypes=(f32, i32, b8, bf16)),
    OpInfo("amin", _amin, (aten.amin.default,),
           lambda dt: _amax_samples(dt)[:3] + [Sample((make((2, 3, 4), dt),), {"dim": 1, "aminmax": True},
                                                      name="aminmax")], dtypes=(f32, i32, b8)),
    OpInfo("max_dim", _call(torch.max), (aten.max.dim,), _dim_samples, dtypes=(f32, i64, b8)),
    OpInfo("min_dim", _call(torch.min), (aten.min.dim,), _dim_samples, dtypes=(f32, i64)),
    OpInfo("max", torch.max, (aten.max.default,), _all_samples, dtypes=(f32, i32, bf16)),
    OpInfo("min", torch.min, (aten.min.default,), _all_samples, dtypes=(f32, i32)),
    OpInfo("argmax", _arg(torch.argmax), (aten.argmax.default,), _arg_samples, dtypes=(f32, i64)),
    OpInfo("argmin", _arg(torch.argmin), (aten.argmin.default,), _arg_samples, dtypes=(f32, i64)),
    OpInfo("var", _var, (aten.var.correction,), _var_samples, dtypes=(f32, bf16)),
    OpInfo("var_mean", _var, (aten.var_mean.correction,), lambda dt: _var_samples(dt, both=True)),
    OpInfo("any", _any, (aten.any.dim, aten.any.default, aten.any.dims), _any_samples, dtypes=(b8, i32, f32)),
    OpInfo("is_all_true", _is_true, (aten._is_all_true.default, aten._is_any_true.default), _is_true_samples,
           dtypes=(b8,)),
    OpInfo("cumsum", _call(torch.cumsum), (aten.cumsum.default,), _cumsum_samples, dtypes=(f32, i32, b8, bf16)),
    OpInfo("cumprod", _call(torch.cumprod), (aten.cumprod.default,), _cumprod_samples, dtypes=(f32, i64)),
    OpInfo("logcumsumexp", _call(torch.logcumsumexp), (aten.logcumsumexp.default,),
           lambda dt: [Sample((make((3, 4), dt),), {"dim": 1}),
                       Sample((torch.tensor([[-INF, 0.0, -INF, INF], [-INF, -INF, 1.0, 2.0]]).to(dt),), {"dim": -1},
                              name="inf"),
                       Sample((make((), dt),), {"dim": 0}, name="0d")], dtypes=(f32, bf16)),
    OpInfo("vector_norm", torch.linalg.vector_norm, (aten.linalg_vector_norm.default,), _vector_norm_samples,
           dtypes=(f32, bf16)),
    OpInfo("dist", torch.dist, (aten.dist.default,),
           lambda dt: [Sample((make((3, 4), dt), make((4,), dt, seed=1))),
                       Sample((make((2, 3), dt), make((2, 3), dt, seed=1), 3), name="p3"),
                       Sample((make((5,), dt), make((5,), dt, seed=1), float("inf")), name="inf"),
                       Sample((make((2, 2), dt), make((2, 2), dt, seed=1), 0), name="p0")], dtypes=(f32, bf16)),
    OpInfo("cummax", _call(torch.cummax), (aten.cummax.default,),
           lambda dt: _cum_extreme_samples(dt) if dt.is_floating_point else _cum_int_samples(dt), dtypes=(f32, i64)),
    OpInfo("cummin", _call(torch.cummin), (aten.cummin.default,),
           lambda dt: _cum_extreme_samples(dt) if dt.is_floating_point else _cum_int_samples(dt), dtypes=(f32, i64)),
]


# ---------------------------------------------------------------- sorting, order statistics

def _sort(x, dim=-1, descending=False, stable=None, arg=False):
    if arg:
        return torch.argsort(x, dim=dim, descending=descending, stable=bool(stable))
    if stable is not None:
        return torch.sort(x, dim=dim, descending=descending, stable=stable)
    return torch.sort(x, dim, descending)


def _sort_samples(dt):
    special = torch.tensor([[1.0, NAN, 2.0, -0.0, 0.0, -INF], [0.0, 1.0, 0.0, 1.0, NAN, INF]])
    x = make((3, 5), dt)  # ints in [-3, 3): many ties, so stability is checked
    return [Sample((x,), {"dim": 1}), Sample((make((2, 3, 4), dt),), {"dim": 0, "descending": True}, name="desc"),
            Sample((special.to(dt) if dt.is_floating_point else x,), {"stable": True, "descending": True},
                   name="stable-desc"),
            Sample((special.to(dt) if dt.is_floating_point else x,), {"stable": True, "arg": True}, name="argsort")]


def _topk_samples(dt):
    x = distinct((3, 6), dt)
    nan = torch.tensor([[1.0, NAN, 2.0, -INF, 0.5], [INF, -1.0, NAN, 3.0, -0.5]]).to(dt)
    return [Sample((x, 2), {"dim": 1}), Sample((distinct((4, 3), dt, seed=1), 3), {"dim": 0, "largest": False}),
            Sample((nan if dt.is_floating_point else x, 3), name="nan"),
            Sample((nan if dt.is_floating_point else x, 3), {"largest": False}, name="nan-smallest")]


def _median(x, dim=None, keepdim=False, nan=False):
    fn = torch.nanmedian if nan else torch.median
    return fn(x) if dim is None else fn(x, dim, keepdim)


def _median_samples(dt, nan=False):
    # torch's nanmedian index for an all-NaN row is unspecified, so that row is only checked by value ("all").
    rows = torch.tensor([[1.0, NAN, 0.0, NAN], [NAN, 5.0 if nan else NAN, NAN, NAN], [4.0, 2.0, NAN, 3.0]])
    return [Sample((distinct((3, 5), dt),), {"dim": 1, "nan": nan}),
            Sample((distinct((4, 2), dt),), {"dim": 0, "keepdim": True, "nan": nan}, name="keepdim"),
            Sample((rows,), {"dim": -1, "nan": nan}, name="nan-rows"),
            Sample((torch.full((3,), NAN) if nan else distinct((7,), dt),), {"nan": nan}, name="all")]


def _mode_samples(dt):
    return [Sample((make((3, 8), dt),), name="ties"), Sample((make((4, 3), dt),), {"dim": 0, "keepdim": True}),
            Sample((torch.tensor([[3, 1, 3, 1, 2], [5, 4, 4, 5, 5]]).to(dt),), name="tie-smallest-last-index")]


def _search(seq, v, extra=None, **kw):
    if extra == "bucketize":
        return torch.bucketize(v, seq, **kw)
    return torch.searchsorted(seq, v, **kw)


def _search_samples(dt):
    seq = torch.tensor([-2.0, -1.0, 0.0, 0.0, 1.5, 3.0]).to(dt)
    v = torch.tensor([[-3.0, 0.0, 0.5], [1.5, 3.0, 9.0]]).to(dt)
    rows = torch.sort(make((2, 5), dt)).values
    return [Sample((seq, v)), Sample((seq, v), {"right": True}, name="right"),
            Sample((rows, make((2, 3), dt, seed=1)), {"side": "right", "out_int32": True}, name="nd"),
            Sample((seq, 0.0), name="scalar")] + ([
        # torch's binary search compares by IEEE rules: a NaN value lands after every element, a NaN element
        # (sorted last, or anywhere) never bounds a value from above
        Sample((torch.tensor([1.0, 2.0, NAN]).to(dt), torch.tensor([NAN, 1.5, 3.0, 2.0]).to(dt)), name="nan"),
        Sample((torch.tensor([1.0, NAN, 2.0, 4.0]).to(dt), torch.tensor([NAN, 0.0, 3.0, 5.0]).to(dt)),
               {"right": True}, name="nan-inside")] if dt.is_floating_point else [])


def _bucketize(v, boundaries, **kw):
    return torch.bucketize(v, boundaries, **kw)


def _bucketize_samples(dt):
    b = torch.tensor([-1.0, 0.0, 0.0, 2.0]).to(dt)
    return [Sample((make((3, 4), dt), b)), Sample((make((5,), dt), b), {"right": True}, name="right"),
            Sample((0.0, b), {"out_int32": True}, name="scalar")]


SORTING = [
    OpInfo("sort", _sort, (aten.sort.default, aten.sort.stable), _sort_samples, dtypes=(f32, i64, bf16)),
    OpInfo("topk", torch.topk, (aten.topk.default,), _topk_samples, dtypes=(f32, i64)),
    OpInfo("kthvalue", torch.kthvalue, (aten.kthvalue.default,),
           lambda dt: [Sample((distinct((3, 5), dt), 2), {"dim": 1}),
                       Sample((distinct((4, 3), dt), 4), {"dim": 0, "keepdim": True}, name="keepdim"),
                       Sample((torch.tensor([[1.0, NAN, 0.0]]).to(dt) if dt.is_floating_point else distinct((2, 3), dt),
                               3), name="nan")], dtypes=(f32, i64)),
    OpInfo("median", _median, (aten.median.default, aten.median.dim), _median_samples),
    OpInfo("nanmedian", _median, (aten.nanmedian.default, aten.nanmedian.dim), lambda dt: _median_samples(dt, True)),
    OpInfo("mode", torch.mode, (aten.mode.default,), _mode_samples, dtypes=(i64, f32)),
    OpInfo("searchsorted", _search, (aten.searchsorted.Tensor, aten.searchsorted.Scalar), _search_samples,
           dtypes=(f32, i64)),
    OpInfo("bucketize", _bucketize, (aten.bucketize.Tensor, aten.bucketize.Scalar), _bucketize_samples,
           dtypes=(f32, i64)),
    OpInfo("histc", torch.histc, (aten.histc.default,),
           lambda dt: [Sample((make((20,), dt),), {"bins": 4}),
                       Sample((make((3, 5), dt),), {"bins": 5, "min": -1, "max": 2}, name="range"),
                       Sample((torch.tensor([0.0, 1.0, 2.0, 3.0, 1.5, NAN, -0.5]),), {"bins": 3, "min": 0, "max": 3},
                              name="edges-nan"),
                       Sample((torch.tensor([2.0, 2.0]),), {"bins": 3}, name="flat")]),
    OpInfo("histogram", lambda x, *a, **k: tuple(torch.histogram(x, *a, **k)),
           (aten.histogram.bin_ct, aten.histogram.bins_tensor),
           lambda dt: [Sample((make((5, 7), dt), 6)),
                       Sample((make((20,), dt), 4), {"range": (-1.0, 1.0)}, name="range"),
                       Sample((make((5, 7), dt), 5), {"weight": make((5, 7), dt, seed=1).abs(), "density": True},
                              name="weight_density"),
                       Sample((torch.tensor([0.0, 0.25, 0.5, 1.0, 2.0, -1.0, NAN], dtype=dt), 4),
                              {"range": (0.0, 1.0)}, name="edges-nan"),
                       Sample((torch.full((3,), 2.0, dtype=dt), 3), name="flat"),
                       Sample((make((5, 7), dt), torch.tensor([-1.0, 0.0, 0.3, 2.0], dtype=dt)),
                              {"weight": make((5, 7), dt, seed=1)}, name="edge_tensor"),
                       Sample((make((5, 7), dt), torch.tensor([-1.0, 0.0, 0.3, 2.0], dtype=dt)), {"density": True},
                              name="edge_tensor_density")], dtypes=(f32, torch.float64)),
    OpInfo("histogramdd", lambda x, *a, **k: tuple(torch.histogramdd(x, *a, **k)),
           (aten._histogramdd_bin_edges.default, aten._histogramdd_from_bin_cts.default,
            aten._histogramdd_from_bin_tensors.default),
           lambda dt: [Sample((make((12, 2), dt), [3, 4])),
                       Sample((make((2, 6, 3), dt), [2, 3, 2]),
                              {"range": [-1.0, 1.0, -2.0, 2.0, 0.0, 1.0], "weight": make((2, 6), dt, seed=1).abs(),
                               "density": True}, name="range_weight_density"),
                       Sample((make((12, 2), dt), [torch.tensor([-1.0, 0.0, 1.0]), torch.tensor([-2.0, 0.5, 2.0])]),
                              name="edge_tensors")]),
]

OPS = REDUCE + SORTING
