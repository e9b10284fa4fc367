"""Core ops that torch.export decomposes away, tested on make_fx graphs (as the eager device sees them)."""

from __future__ import annotations

import jax
import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

from converter.lowering.fx_runner import run_graph_module
from tests.ops.harness import assert_close, to_jax, to_torch
from tests.ops.op_db import make

aten = torch.ops.aten

CASES = [
    (aten.fill.Scalar, lambda x: aten.fill.Scalar(x, 2.5), (make((2, 3)),)),
    (aten.squeeze.dim, lambda x: aten.squeeze.dim(x, -2), (make((2, 1, 3)),)),
    (aten.squeeze.dim, lambda x: aten.squeeze.dim(x, 0), (make((2, 3)),)),
    (aten.reflection_pad1d.default, lambda x: aten.reflection_pad1d(x, [2, 1]), (make((1, 2, 5)),)),
    (aten.reflection_pad2d.default, lambda x: aten.reflection_pad2d(x, [1, 2, 2, 0]), (make((1, 2, 4, 5)),)),
    (aten.reflection_pad3d.default, lambda x: aten.reflection_pad3d(x, [1, 1, 0, 1, 1, 0]), (make((1, 1, 3, 3, 3)),)),
    (aten.replication_pad2d.default, lambda x: aten.replication_pad2d(x, [2, 0, 1, 3]), (make((2, 4, 5)),)),
    (aten.replication_pad3d.default, lambda x: aten.replication_pad3d(x, [1, 0, 0, 2, 1, 1]), (make((1, 1, 2, 3, 3)),)),
]


@pytest.mark.parametrize("op,fn,args", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_direct_op_matches_torch(op, fn, args):
    gm = make_fx(fn)(*args)
    assert op in {n.target for n in gm.graph.nodes}, gm.graph
    expected = fn(*args)
    with jax.enable_x64(True):
        got = jax.jit(lambda *xs: run_graph_module(gm, xs))(*[to_jax(a) for a in args])
    assert_close(to_torch(got[0]), expected, 1e-6, 1e-6, what=str(op))
