"""OpInfo samples: indexing, gather/scatter, and the data-dependent ops we refuse.

index_add, index_copy, index_fill, take, take_along_dim and roll decompose into
index_put / index / gather / index_select and ride along as samples there.
nonzero, unique, masked_select and boolean-mask reads have data-dependent output
shapes: they are not lowered, and their error samples pin the message.
"""

import torch

from tests.ops.op_db import ErrorSample, OpInfo, Sample, make

aten = torch.ops.aten
f32, bf16, i32, i64, b8 = torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool


def idx(shape, high, low=0, seed=0):
    """An int64 index tensor with values in [low, high)."""
    return make(shape, i64, low=low, high=high, seed=seed)


def perm_rows(rows, n, k, seed=0):
    """``(rows, k)`` int64 indices, distinct within each row (scatter without write conflicts)."""
    g = torch.Generator().manual_seed(seed)
    return torch.stack([torch.randperm(n, generator=g)[:k] for _ in range(rows)])


def _apply(table):
    """An OpInfo fn that runs ``table[how](*args)``, ``how`` given per sample."""
    return lambda *args, how: table[how](*args)


INDEX = {
    "first-last": lambda x, i: x[i, :, i],
    "colon": lambda x, i: x[:, i],
    "neg-2d": lambda x, i: x[..., i],
    "take": lambda x, i: torch.take(x, i),
    "mask": lambda x, m: x[m],
}


def _setitem_colon(x, i, v):
    z = x.clone()
    z[:, i] = v
    return z


def _setitem_mask(x, m, v):
    z = x.clone()
    z[m] = v
    return z


INDEX_PUT = {
    "accumulate-dup": lambda x, i, v: x.index_put((i,), v, accumulate=True),
    "setitem-colon-neg": _setitem_colon,
    "index_add-copy-fill": lambda x, i, v: (x.index_add(1, i, v), x.index_copy(1, i, v), x.index_fill(1, i, -1)),
    "mask-value": _setitem_mask,
    "mask-values-accumulate": lambda x, m, v: (_setitem_mask(x, m, v), x.index_put((m,), v, accumulate=True)),
    "mask-int": lambda x, m, i, v: x.index_put((m, i), v),
}


def _index_put_samples(dt):
    x = make((3, 4), dt)
    return [Sample((x, torch.tensor([0, 2, 0]), make((3, 4), dt, seed=1)), {"how": "accumulate-dup"},
                   name="accumulate-dup"),
            Sample((x, torch.tensor([-1, 1]), make((3, 2), dt, seed=2)), {"how": "setitem-colon-neg"},
                   name="setitem-colon-neg"),
            Sample((x, torch.tensor([3, 0]), make((3, 2), dt, seed=3)), {"how": "index_add-copy-fill"},
                   name="index_add-copy-fill"),
            Sample((x, make((3, 4), b8, seed=4), make((), dt, seed=5)), {"how": "mask-value"}, name="mask-value"),
            # several values (their count, the mask's true elements, is static as torch.compile traces it)
            Sample((x, torch.tensor([[True, False, True, True], [False] * 4, [True, False, False, True]]),
                    make((5,), dt, seed=6)), {"how": "mask-values-accumulate"}, name="mask-values"),
            Sample((x, torch.tensor([True, False, True]), make((2, 4), dt, seed=7)), {"how": "mask-values-accumulate"},
                   name="mask-rows"),
            Sample((x, torch.tensor([True, False, True]), make((2, 1), dt, seed=8)), {"how": "mask-values-accumulate"},
                   name="mask-rows-broadcast"),
            # no values for a mask that selects nothing (``x[mask] += 1`` where ``x[mask]`` was empty)
            Sample((x, torch.zeros(3, dtype=b8), make((0, 4), dt, seed=9)), {"how": "mask-values-accumulate"},
                   name="mask-none"),
            # a mask among integer indices: the k-th selected row pairs with the k-th index, or one selected row
            # with each index, or (one index) every selected row with it
            Sample((x, torch.tensor([True, False, True]), torch.tensor([3, -4]), make((2,), dt, seed=10)),
                   {"how": "mask-int"}, name="mask-int"),
            Sample((x, torch.tensor([False, True, False]), torch.tensor([0, 2, 2]), make((), dt, seed=11)),
                   {"how": "mask-int"}, name="mask-int-one-selected"),
            Sample((x, torch.tensor([True, True, False]), torch.tensor([1]), make((), dt, seed=12)),
                   {"how": "mask-int"}, name="mask-int-one-index"),
            # two masks: their k-th selected elements pair up
            Sample((x, torch.tensor([True, False, True]), torch.tensor([False, True, False, True]),
                    make((), dt, seed=13)), {"how": "mask-int"}, name="mask-mask"),
            # a value per selected element beside a single index (their count as torch.compile traces it)
            Sample((x, torch.tensor([True, False, True]), torch.tensor([1]), make((2,), dt, seed=14)),
                   {"how": "mask-int"}, name="mask-int-values")]


def _index_select(x, dim, i, roll=False):
    return (torch.roll(x, 1, dim), torch.roll(x, -2)) if roll else torch.index_select(x, dim, i)


def _gather(x, dim, i, along=False):
    return torch.take_along_dim(x, i, dim) if along else torch.gather(x, dim, i)


def _scatter(x, dim, i, src, reduce=None):
    if reduce is None:
        return torch.scatter(x, dim, i, src)
    if isinstance(src, torch.Tensor):
        return torch.scatter(x, dim, i, src, reduce=reduce)
    return aten.scatter.value_reduce(x, dim, i, src, reduce=reduce)


def _scatter_reduce(x, i, src, include_self):
    reduces = ("sum", "prod", "mean", "amax", "amin")
    return tuple(x.scatter_reduce(1, i, src, r, include_self=include_self) for r in reduces)


def _index_reduce(x, i, src, include_self):
    return tuple(x.index_reduce(1, i, src, r, include_self=include_self) for r in ("prod", "mean", "amax", "amin"))


def _reduce_samples(dt, index_reduce=False):
    x = make((3, 5), dt)
    i = idx((4,), 3) if index_reduce else idx((3, 4), 3)  # columns 3 and 4 stay untouched
    return [Sample((x, i, make((3, 4), dt, seed=1), True), name="include_self"),
            Sample((x, i, make((3, 4), dt, seed=1), False), name="exclude_self"),
            Sample((x, idx((0,) if index_reduce else (3, 0), 3), make((3, 0), dt), False), name="empty-index")]


def _nonzero_static(x, size, fill_value=-1):
    return torch.nonzero_static(x, size=size, fill_value=fill_value)


def _repeat_interleave(x, r, dim=0, output_size=None, ints=None):
    if ints is not None:
        return torch.repeat_interleave(x, ints, dim)
    return torch.repeat_interleave(x, r, dim, output_size=output_size)


INDEXING = [
    OpInfo("index", _apply(INDEX), (aten.index.Tensor,),
           lambda dt: [Sample((make((3, 4, 3), dt), idx((2,), 3)), {"how": "first-last"}, name="first-last"),
                       Sample((make((3, 4), dt), idx((5,), 4)), {"how": "colon"}, name="colon"),
                       Sample((make((2, 3), dt), idx((2, 2), 3, low=-3)), {"how": "neg-2d"}, name="neg-2d"),
                       Sample((make((3, 4), dt), idx((2, 2), 12, low=-12)), {"how": "take"}, name="take-neg")],
           dtypes=(f32, b8, bf16),
           errors=[ErrorSample((make((3, 4)), make((3, 4), b8)), "boolean mask has a data-dependent output shape",
                               {"how": "mask"})]),
    OpInfo("index_put", _apply(INDEX_PUT), (aten.index_put.default,), _index_put_samples, dtypes=(f32, i64),
           errors=[ErrorSample((make((2, 2)), torch.tensor([True, True]), torch.tensor([[0], [1]]), make((2, 2))),
                               "beside indices of two or more dimensions", {"how": "mask-int"})]),
    OpInfo("index_select", _index_select, (aten.index_select.default,),
           lambda dt: [Sample((make((3, 4), dt), 1, idx((5,), 4))),
                       Sample((make((3, 4), dt), 0, idx((), 3)), name="0d-index"),
                       Sample((make((3, 4), dt), -1, idx((0,), 4)), name="empty"),
                       Sample((make((2, 5), dt), 1, None), {"roll": True}, name="roll")], dtypes=(f32, i32)),
    OpInfo("gather", _gather, (aten.gather.default,),
           lambda dt: [Sample((make((3, 4), dt), 1, idx((3, 6), 4))),
                       Sample((make((4, 5), dt), 0, idx((2, 3), 4)), name="smaller-index"),
                       Sample((make((), dt), 0, idx((), 1)), name="0d"),
                       Sample((make((5,), dt), 0, idx((2, 0), 5)), name="empty-index-of-other-rank"),
                       Sample((make((3, 4), dt), 1, idx((3, 2), 4)), {"along": True}, name="take_along_dim")],
           dtypes=(f32, b8)),
    OpInfo("scatter", _scatter, (aten.scatter.src, aten.scatter.value),
           lambda dt: [Sample((make((3, 5), dt), 1, perm_rows(3, 5, 3), make((3, 4), dt, seed=1))),
                       Sample((make((4, 2), dt), 0, perm_rows(2, 4, 3).T.contiguous(), 2.0), name="value"),
                       Sample((make((), dt), 0, idx((), 1), make((), dt, seed=2)), name="0d")], dtypes=(f32, i64)),
    OpInfo("scatter_reduce_str", _scatter, (aten.scatter.reduce, aten.scatter.value_reduce),
           lambda dt: [Sample((make((3, 5), dt), 1, idx((3, 4), 5), make((3, 4), dt, seed=1), "add")),
                       Sample((make((3, 5), dt), 1, idx((3, 4), 5), make((3, 4), dt, seed=1), "multiply"), name="mul"),
                       Sample((make((3, 5), dt), -1, idx((2, 3), 5), 2.0, "add"), name="value-add")],
           dtypes=(f32, i64)),
    OpInfo("scatter_add", torch.scatter_add, (aten.scatter_add.default,),
           lambda dt: [Sample((make((3, 5), dt), 1, idx((3, 4), 5), make((3, 4), dt, seed=1))),
                       Sample((make((4, 2), dt), 0, idx((6, 2), 4), make((6, 3), dt, seed=1)), name="dup-bigger-src"),
                       Sample((make((5,), dt), 0, idx((2, 0), 5), make((2, 0), dt)), name="empty-index-of-other-rank")],
           dtypes=(f32, i32)),
    OpInfo("scatter_reduce", _scatter_reduce, (aten.scatter_reduce.two,), _reduce_samples, dtypes=(f32, i64)),
    OpInfo("index_reduce", _index_reduce, (aten.index_reduce.default,), lambda dt: _reduce_samples(dt, True),
           dtypes=(f32, i64)),
    OpInfo("masked_scatter", torch.masked_scatter, (aten.masked_scatter.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), b8), make((12,), dt, seed=1))),
                       Sample((make((3, 4), dt), make((4,), b8, seed=2), make((3, 5), dt, seed=1)), name="bcast-mask")],
           dtypes=(f32, i64)),
    OpInfo("put", torch.put, (aten.put.default,),
           lambda dt: [Sample((make((3, 4), dt), torch.tensor([0, -1, 5]), make((3,), dt, seed=1))),
                       Sample((make((3, 4), dt), torch.tensor([[1, 1], [2, -12]]), make((2, 2), dt, seed=1), True),
                              name="accumulate")], dtypes=(f32, i64)),
    OpInfo("nonzero_static", _nonzero_static, (aten.nonzero_static.default,),
           lambda dt: [Sample((make((3, 4), dt, low=-1, high=2), 12)),
                       Sample((make((3, 4), dt, low=-1, high=2), 2, -2), name="truncate"),
                       Sample((make((6,), b8), 8, 0), name="1d-pad")], dtypes=(i64, b8)),
    OpInfo("repeat_interleave", _repeat_interleave, (aten.repeat_interleave.Tensor,),
           lambda dt: [Sample((make((3, 2), dt), torch.tensor([1, 2, 0])), {"output_size": 3}),
                       Sample((make((2, 3), dt), torch.tensor([2, 0, 3])), {"dim": 1, "output_size": 5}, name="dim1"),
                       Sample((make((2, 3), dt), None), {"ints": 2, "dim": -1}, name="int-repeats")],
           errors=[ErrorSample((make((3, 2)), torch.tensor([1, 2, 0])), "pass output_size=")]),
    # Data-dependent output shapes: no lowering, a clear UnsupportedOpError instead.
    OpInfo("nonzero", torch.nonzero, (), lambda dt: [],
           errors=[ErrorSample((make((3, 4)),), r"unsupported op aten\.nonzero\.default")]),
    OpInfo("unique", torch.unique, (), lambda dt: [],
           errors=[ErrorSample((make((5,), i64),), r"unsupported op aten\._unique2\.default")]),
    OpInfo("masked_select", torch.masked_select, (), lambda dt: [],
           errors=[ErrorSample((make((3, 4)), make((3, 4), b8)), r"unsupported op aten\.masked_select\.default")]),
]

OPS = INDEXING
