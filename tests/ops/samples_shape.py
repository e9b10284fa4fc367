"""OpInfo samples: shape/view ops and padding.

View-like ops that decompose (reshape, flatten, transpose, t, movedim, squeeze.dim,
unbind, chunk, tensor_split, narrow, tile, rot90, trace, pixel_unshuffle,
reflection/replication/circular padding) ride along as samples of the OpInfo
whose overloads they become.
"""

import torch
import torch.nn.functional as F

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, bf16, i32, i64, b8 = torch.float32, torch.bfloat16, torch.int32, torch.int64, torch.bool


def dynamic(t, *dims):
    """Mark ``dims`` of ``t`` dynamic, so torch.export emits ``sym_size`` for them."""
    for d in dims:
        torch._dynamo.mark_dynamic(t, d)
    return t


def _apply(table):
    """An OpInfo fn that runs ``table[how](*args)``, ``how`` given per sample."""
    return lambda *args, how: table[how](*args)


def _samples(*specs):
    """``(how, tensors...)`` tuples → one Sample each, named by ``how``."""
    return lambda dt: [Sample(tuple(make(s, dt, seed=i) if isinstance(s, tuple) else s for i, s in enumerate(args)),
                              {"how": how}, name=how) for how, *args in specs]


VIEW = {
    "view": lambda x: x.view(6, 4),
    "reshape-permuted": lambda x: x.permute(1, 0, 2).reshape(12, 2),
    "flatten-0d": lambda x: (x.flatten(), x.view(1, 1)),
    "unflatten-empty": lambda x: x.unflatten(1, (2, 0)),
}
PERMUTE = {
    "permute": lambda x: x.permute(2, 0, -2),
    "transpose": lambda x: x.transpose(0, -1),
    "t-movedim": lambda x: (x[0].t(), x.movedim(0, -1)),
    "0d": lambda x: torch.permute(x, ()),
}
EXPAND = {
    "expand": lambda x: x.expand(2, 5, 4),
    "new-dims": lambda x: x.expand(3, 2, -1),
    "expand_as": lambda x: x[:, :1].expand_as(torch.empty(2, 3, 4)),
    "0d": lambda x: x.expand(2, 3),
}
SQUEEZE = {
    "dim": lambda x: x.squeeze(1),
    "all": lambda x: x.squeeze(),
    "dims-mixed": lambda x: x.squeeze((0, 2)),
    "dims-empty": lambda x: x.squeeze(()),  # squeezes nothing
    "unbind": lambda x: x.unbind(-1),
}
SPLIT = {
    "split": lambda x: x.split(2, -1),
    "split_with_sizes": lambda x: x.split([1, 3], -1),
    "chunk": lambda x: x.chunk(3, 0),
    "empty-piece": lambda x: x.split([0, 4], -1),
}
SLICE = {
    "steps": lambda x: x[:, 1:10:2, -3:],
    "neg-clamped": lambda x: x[-100:1, :-1],
    "empty": lambda x: x[:, 5:1],
    "narrow-tensor_split": lambda x: (x.narrow(2, 1, 2), x.tensor_split(3, 2)),
}
SELECT = {
    "neg": lambda x: x[:, -1],
    "first": lambda x: x[1],
    "unbind-0": lambda x: x.unbind(0),
    "0d-result": lambda x: x[1, 2],
}
FLIP = {
    "flip": lambda x: x.flip(0, -1),
    "rot90": lambda x: x.rot90(1, (1, 2)),
    "0d": lambda x: x.flip(0),
}
REPEAT = {
    "repeat": lambda x: x.repeat(2, 1, 1, 2),
    "tile": lambda x: x.tile(2),
    "zero": lambda x: x.repeat(1, 0, 2),
    "0d": lambda x: x.repeat(3, 2),
}
UNFOLD = {
    "overlap": lambda x: x.unfold(2, 2, 1),
    "step": lambda x: x.unfold(0, 2, 2),
    "gather": lambda x: x.unfold(-1, 17, 3),
}
PAD = {
    "pos-neg": lambda x: F.pad(x, (1, -1, 2, 0)),
    "value": lambda x: F.pad(x, (0, 2), value=-2.0),
    "crop-3d": lambda x: F.pad(x, (-1, -1, 0, 0, 1, 1), value=2),
    "0-width": lambda x: F.pad(x, (0, 0, 1, 0)),
}
PAD_MODES = {
    "reflect-1d": lambda x: F.pad(x, (2, 1), mode="reflect"),
    "reflect-2d": lambda x: F.pad(x[None], (2, 1, 1, 2), mode="reflect"),
    "reflect-3d": lambda x: F.pad(x[None, None], (2, 1, 1, 1, 1, 0), mode="reflect"),
    "replicate-1d-2d": lambda x: (F.pad(x, (2, 1), mode="replicate"), F.pad(x[None], (0, 3, 2, 1), mode="replicate")),
    "replicate-3d": lambda x: F.pad(x[None, None], (1, 0, 0, 2, 1, 1), mode="replicate"),
    # negative amounts crop first (cropping a whole dim replicates what is left of the edge)
    "replicate-negative": lambda x: (F.pad(x, (-4, 5), mode="replicate"), F.pad(x[None], (1, -1, -2, 3), mode="replicate")),
}


def _copy(x, y, how):
    if how == "direct":
        return aten.copy.default(x, y)
    z = x.clone()
    if how == "setitem":
        z[:, 1:3] = y
    else:  # circular padding: empty + slice_scatter + copy
        z = F.pad(z, (2, 1), mode="circular")
    return z


def _slice_scatter(x, y, dim=0, start=None, end=None, step=1):
    return torch.slice_scatter(x, y, dim, start, end, step)


def _sym(x, how):
    if how == "view":
        return x.view(x.shape[0], -1)
    if how == "new_zeros":
        return x.new_zeros(x.shape[0], 2) + x.shape[0]
    return torch.arange(x.shape[0]) * x.shape[1]


def _as_strided(x, size, stride, offset=None, src=None, chunks=False):
    if chunks:  # Longformer's overlapping chunks of a transposed (non-contiguous) view: storage strides
        q = (x * 1).transpose(0, 1).reshape(x.shape[1], x.shape[0] // 4, 4)
        return q.as_strided((q.shape[0], q.shape[1] * 2 - 1, 4), (q.stride(0), q.stride(1) // 2, q.stride(2)))
    if src is not None:
        return torch.as_strided_scatter(x, src, size, stride, offset)
    return torch.as_strided(x, size, stride, offset)


def _pixel(x, r, unshuffle=False):
    return F.pixel_unshuffle(x, r) if unshuffle else F.pixel_shuffle(x, r)


def _cat(*ts, dim=0, stack=False):
    return torch.stack(ts, dim) if stack else torch.cat(ts, dim)


def _cat_samples(dt):
    return [Sample((make((2, 3), dt), make((1, 3), dt, seed=1))),
            Sample((make((2, 3), dt), make((2, 1), dt, seed=1)), {"dim": -1}, name="neg-dim"),
            Sample((make((2, 3), dt), torch.zeros(0), make((2, 3), i64, seed=2)), name="legacy-empty-promote"),
            Sample((make((2, 3), dt), make((2, 3), dt, seed=1)), {"dim": 1, "stack": True}, name="stack")]


SHAPE = [
    OpInfo("view", _apply(VIEW), (aten.view.default,),
           _samples(("view", (2, 3, 4)), ("reshape-permuted", (2, 3, 4)), ("flatten-0d", ()),
                    ("unflatten-empty", (3, 0))), dtypes=(f32, b8)),
    OpInfo("permute", _apply(PERMUTE), (aten.permute.default,),
           _samples(("permute", (2, 3, 4)), ("transpose", (2, 3, 4)), ("t-movedim", (2, 3, 4)), ("0d", ()))),
    OpInfo("expand", _apply(EXPAND), (aten.expand.default,),
           _samples(("expand", (2, 1, 4)), ("new-dims", (1, 4)), ("expand_as", (2, 3, 4)), ("0d", ()))),
    OpInfo("squeeze", _apply(SQUEEZE), (aten.squeeze.dims,),
           _samples(("dim", (2, 1, 4)), ("all", (1, 3, 1)), ("dims-mixed", (1, 3, 4)), ("dims-empty", (1, 3, 1)),
                    ("unbind", (2, 3))),
           dtypes=(f32, b8)),
    OpInfo("unsqueeze", lambda x, d: x.unsqueeze(d), (aten.unsqueeze.default,),
           lambda dt: [Sample((make((2, 3), dt), -1)), Sample((make((2, 3), dt), 1)),
                       Sample((make((), dt), 0), name="0d"),
                       Sample((make((0, 2), dt), -3), name="empty")]),
    OpInfo("cat", _cat, (aten.cat.default,), _cat_samples, dtypes=(f32, i32, b8)),
    OpInfo("split", _apply(SPLIT), (aten.split_with_sizes.default,),
           _samples(("split", (2, 3, 4)), ("split_with_sizes", (2, 3, 4)), ("chunk", (5, 2)), ("empty-piece", (2, 4)))),
    OpInfo("slice", _apply(SLICE), (aten.slice.Tensor,),
           _samples(("steps", (2, 9, 4)), ("neg-clamped", (3, 4)), ("empty", (2, 3)),
                    ("narrow-tensor_split", (2, 3, 5)))),
    OpInfo("narrow_copy", torch.narrow_copy, (aten.narrow_copy.default,),
           lambda dt: [Sample((make((3, 5), dt), 1, 1, 3)), Sample((make((4, 2), dt), 0, -2, 2), name="neg-start")]),
    OpInfo("select", _apply(SELECT), (aten.select.int,),
           _samples(("neg", (2, 3, 4)), ("first", (3, 4)), ("unbind-0", (2, 3)), ("0d-result", (2, 3))),
           dtypes=(f32, b8)),
    OpInfo("flip", _apply(FLIP), (aten.flip.default,),
           _samples(("flip", (2, 3, 4)), ("rot90", (2, 3, 4)), ("0d", ()))),
    OpInfo("repeat", _apply(REPEAT), (aten.repeat.default,),
           _samples(("repeat", (2, 3, 1)), ("tile", (2, 3)), ("zero", (2, 3)), ("0d", ())), dtypes=(f32, b8)),
    OpInfo("alias", aten.alias.default, (aten.alias.default,), lambda dt: [Sample((make((2, 3), dt),))]),
    OpInfo("pixel_shuffle", _pixel, (aten.pixel_shuffle.default,),
           lambda dt: [Sample((make((1, 8, 2, 3), dt), 2)), Sample((make((2, 3, 9, 1, 2), dt), 3), name="5d"),
                       Sample((make((1, 2, 4, 6), dt), 2), {"unshuffle": True}, name="unshuffle")]),
    OpInfo("unfold", _apply(UNFOLD), (aten.unfold.default,),
           _samples(("overlap", (2, 3, 4)), ("step", (5, 2)), ("gather", (2, 40)))),
    OpInfo("as_strided", _as_strided, (aten.as_strided.default,),
           lambda dt: [Sample((make((3, 4), dt), (4, 2), (1, 4))),
                       Sample((make((2, 6), dt), (3, 4), (4, 1)), name="reshape"),
                       Sample((make((3, 4), dt), (2, 2), (2, 1), 3), name="offset"),
                       Sample((make((8, 3), dt), None, None), {"chunks": True}, name="view_chunks")]),
    OpInfo("as_strided_scatter", _as_strided, (aten.as_strided_scatter.default,),
           lambda dt: [Sample((make((3, 4), dt), (2, 2), (1, 4), 1, make((2, 2), dt, seed=1)))]),
    OpInfo("sym_size", _sym, (aten.sym_size.int,),
           lambda dt: [Sample((dynamic(make((4, 3), dt), 0), "view")),
                       Sample((dynamic(make((3, 2), dt), 0), "new_zeros")),
                       Sample((dynamic(make((5, 2), dt), 0), "arange"))]),
    OpInfo("diagonal", lambda x, *a, trace=False: torch.trace(x) if trace else torch.diagonal(x, *a),
           (aten.diagonal.default,),
           lambda dt: [Sample((make((3, 4), dt),)), Sample((make((2, 3, 4), dt), 1, -1, 0), name="offset-neg-dims"),
                       Sample((make((3, 2), dt), 5), name="empty"),
                       Sample((make((3, 3), dt),), {"trace": True}, name="trace")]),
    OpInfo("diagonal_scatter", torch.diagonal_scatter, (aten.diagonal_scatter.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3,), dt, seed=1))),
                       Sample((make((2, 3, 4), dt), make((4, 2), dt, seed=1), -1, 1, 0), name="offset-dims")]),
    OpInfo("slice_scatter", _slice_scatter, (aten.slice_scatter.default,),
           lambda dt: [Sample((make((4, 3), dt), make((2, 3), dt, seed=1), 0, 1, 3)),
                       Sample((make((3, 6), dt), make((3, 2), dt, seed=1), 1, -5, None, 3), name="neg-start-step"),
                       Sample((make((2, 3), dt), make((2, 3), dt, seed=1), 0, None, 2**63 - 1), name="open-end")]),
    OpInfo("copy", _copy, (aten.copy.default,),
           lambda dt: [Sample((make((2, 3), dt), make((3,), i64, seed=1), "direct"), name="bcast-cast"),
                       Sample((make((3, 4), dt), make((3, 2), dt, seed=1), "setitem"), name="setitem"),
                       Sample((make((2, 5), dt), None, "circular"), name="circular")]),
    OpInfo("constant_pad_nd", _apply(PAD), (aten.constant_pad_nd.default,),
           _samples(("pos-neg", (2, 3, 4)), ("value", (3, 2)), ("crop-3d", (2, 3, 4)), ("0-width", (0, 2))),
           dtypes=(f32, i32, bf16)),
    # kept whole by capture (PRESERVED_OPS), lowered as composites
    OpInfo("pad_modes", _apply(PAD_MODES),
           (aten.reflection_pad1d.default, aten.reflection_pad2d.default, aten.reflection_pad3d.default,
            aten.replication_pad1d.default, aten.replication_pad2d.default, aten.replication_pad3d.default),
           _samples(("reflect-1d", (2, 3, 4)), ("reflect-2d", (2, 3, 4)), ("reflect-3d", (2, 3, 4)),
                    ("replicate-1d-2d", (2, 3, 4)), ("replicate-3d", (2, 3, 4)),
                    ("replicate-negative", (2, 3, 4)))),
]

OPS = SHAPE
