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
    (torch.ops.prims.convert_element_type.default,
     lambda x: torch.ops.prims.convert_element_type.default(x * 100, torch.int32), (make((2, 3)),)),
    (aten.embedding_renorm.default, lambda w, i: aten.embedding_renorm.default(w * 3, i, 1.0, 2.0),
     (make((5, 3)), torch.tensor([0, 2, 2, 4]))),
    (aten.linspace.default, lambda x: aten.linspace.default(-1.3, 2.9, 8) + x, (make((8,)),)),
    (torch.ops.prims.scalar_tensor.default,
     lambda x: x * torch.ops.prims.scalar_tensor.default(-1.5, dtype=torch.float32, device=x.device), (make((2, 3)),)),
]


@pytest.mark.parametrize("op,fn,args", CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)])
def test_direct_op_matches_torch(op, fn, args):
    gm = make_fx(fn)(*args)
    assert op in {n.target for n in gm.graph.nodes}, gm.graph
    expected = fn(*args)
    with jax.enable_x64(True):
        got = jax.jit(lambda *xs: run_graph_module(gm, xs))(*[to_jax(a) for a in args])
    assert_close(to_torch(got[0]), expected, 1e-6, 1e-6, what=str(op))


def test_factory_rows_honour_dtype_without_recorded_output():
    # eager dispatch may call a row with no recorded output meta: the requested dtype decides
    from converter.lowering import registry
    from converter.lowering.context import LoweringContext

    ctx = LoweringContext()
    with jax.enable_x64(True):
        zeros = registry.lookup(aten.zeros.default).fn(ctx, [2, 3], dtype=torch.int64)
        ones = registry.lookup(aten.ones.default).fn(ctx, [2], dtype=None)
        like = registry.lookup(aten.zeros_like.default).fn(ctx, jax.numpy.ones(3, jax.numpy.int32), dtype=torch.float16)
    assert [str(a.dtype) for a in (zeros, ones, like)] == ["int64", "float32", "float16"]
