"""Lowerings that torch.export never leaves in a graph, tested on AOTAutograd / make_fx graphs.

torch.export's default decompositions rewrite native_layer_norm_backward,
native_group_norm_backward, embedding_dense_backward and col2im even when they are
called directly, and it only emits sym_numel/sym_stride/sym_storage_offset for
symbolic shapes. AOTAutograd backward graphs (without those decompositions) and the
eager device do see them. So the backward ops are tested through ``aot_function``
with forward and backward graphs both run by
:func:`converter.lowering.fx_runner.run_graph_module` under ``jax.jit`` (as the
``tpu`` dynamo backend runs them), the others on ``make_fx`` graphs; each test checks
the op is in the graph and compares with PyTorch.
"""

from __future__ import annotations

import jax
import pytest
import torch
import torch.nn.functional as F
from functorch.compile import aot_function
from torch._decomp import core_aten_decompositions
from torch.fx.experimental.proxy_tensor import make_fx

from converter.errors import UnsupportedOpError
from converter.lowering.fx_runner import run_graph_module
from tests.ops.harness import assert_close, to_jax, to_torch
from tests.ops.op_db import make

aten = torch.ops.aten
F32, BF16 = torch.float32, torch.bfloat16
TOL = {F32: (1e-5, 1e-5), BF16: (3e-2, 3e-2)}


def _run(fn, args, op, tracing_mode="real"):
    """Trace ``fn``, check ``op`` is in the graph, return (torch outputs, lowered outputs)."""
    gm = make_fx(fn, tracing_mode=tracing_mode)(*args)
    ops = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert op in ops, f"graph lacks {op}: {sorted(map(str, ops))}"
    expected = fn(*args)
    with jax.enable_x64(True):
        got = jax.jit(lambda *xs: run_graph_module(gm, xs))(*[to_jax(a) for a in args])
    return expected, [to_torch(g) for g in got]


def _jax_compiler(graphs: list):
    """An AOTAutograd compiler that records the graph and runs it with the lowering table."""
    def compile_graph(gm, example_inputs):
        graphs.append(gm)

        def run(args):
            statics = [None if isinstance(a, torch.Tensor) else a for a in args]
            tensors = [to_jax(a) for a in args if isinstance(a, torch.Tensor)]
            args.clear()

            def traced(*xs):
                it = iter(xs)
                return run_graph_module(gm, tuple(next(it) if s is None else s for s in statics))

            with jax.enable_x64(True):
                outs = jax.jit(traced)(*tensors)
            return [to_torch(o) if hasattr(o, "dtype") else o for o in outs]

        run._boxed_call = True
        return run
    return compile_graph


def _aot_grads(forward, inputs, grad_output, op):
    """Gradients of ``forward`` through AOTAutograd graphs run by the table, and by torch."""
    def grads(fn):
        leaves = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
        out = fn(*leaves)
        wrt = [t for t in leaves if t.requires_grad]
        return torch.autograd.grad(out, wrt, grad_output)

    graphs: list = []
    # Only detach → alias from the core decompositions (the table has no detach row), so
    # the backward ops stay whole instead of decomposing as the tpu backend's table does.
    decomp = {aten.detach.default: core_aten_decompositions()[aten.detach.default]}
    got = grads(aot_function(forward, fw_compiler=_jax_compiler(graphs), bw_compiler=_jax_compiler(graphs),
                             decompositions=decomp))
    ops = {n.target for gm in graphs for n in gm.graph.nodes if n.op == "call_function"}
    assert op in ops, f"graphs lack {op}: {sorted(map(str, ops))}"
    return grads(forward), got


def _compare(expected, got, dtype):
    rtol, atol = TOL[dtype]
    assert len(expected) == len(got)
    for k, (e, g) in enumerate(zip(expected, got)):
        assert_close(g, e.detach(), rtol, atol, what=f"output {k}")


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("affine", [True, False])
def test_native_layer_norm_backward_matches_torch(dtype, affine):
    x, w, b = make((2, 3, 4, 5), dtype), make((4, 5), dtype, seed=1), make((4, 5), dtype, seed=2)
    g = make((2, 3, 4, 5), dtype, seed=3)
    if affine:
        fwd, inputs = (lambda x, w, b: F.layer_norm(x, (4, 5), w, b, eps=1e-3)), (x, w, b)
    else:
        fwd, inputs = (lambda x: F.layer_norm(x, (5,))), (x,)
    _compare(*_aot_grads(fwd, inputs, g, aten.native_layer_norm_backward.default), dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("affine", [True, False])
def test_native_group_norm_backward_matches_torch(dtype, affine):
    x, w, b = make((2, 6, 3, 2), dtype), make((6,), dtype, seed=1), make((6,), dtype, seed=2)
    g = make((2, 6, 3, 2), dtype, seed=3)
    if affine:
        fwd, inputs = (lambda x, w, b: F.group_norm(x, 3, w, b)), (x, w, b)
    else:
        fwd, inputs, g = (lambda x: F.group_norm(x, 2)), (x[..., 0],), g[..., 0]
    _compare(*_aot_grads(fwd, inputs, g, aten.native_group_norm_backward.default), dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("padding_idx,scale", [(None, False), (1, True), (-1, False)])
def test_embedding_dense_backward_matches_torch(dtype, padding_idx, scale):
    w = make((7, 3), dtype)
    idx = torch.tensor([[1, 2, 1, 6], [0, 6, 6, 1]])
    g = make((2, 4, 3), dtype, seed=3)
    fwd = (lambda w, i: F.embedding(i, w, padding_idx=padding_idx, scale_grad_by_freq=scale))
    _compare(*_aot_grads(fwd, (w, idx), g, aten.embedding_dense_backward.default), dtype)


@pytest.mark.parametrize("dtype", [F32, BF16])
@pytest.mark.parametrize("shape,kw", [
    ((2, 12, 12), {"output_size": (4, 5), "kernel_size": 2}),
    ((12, 9), {"output_size": (5, 6), "kernel_size": (2, 3), "dilation": (2, 1), "padding": (1, 2),
               "stride": (2, 3)}),
])
def test_col2im_matches_torch(dtype, shape, kw):
    _compare(*_run(lambda x: (F.fold(x, **kw),), (make(shape, dtype),), aten.col2im.default), dtype)


def _sum(x):
    return x.sum(dim=list(range(x.dim())))


def test_sym_numel_and_stride_follow_the_shape():
    def fn(x):
        return (_sum(x) * aten.sym_numel(x) + aten.sym_stride(x, 0) - aten.sym_stride(x, -1),)

    _compare(*_run(fn, (make((3, 4)),), aten.sym_stride.int, tracing_mode="symbolic"), F32)
    _compare(*_run(fn, (make((3, 4)),), aten.sym_numel.default, tracing_mode="symbolic"), F32)


def test_sym_numel_is_symbolic_under_shape_polymorphism():
    gm = make_fx(lambda x: (_sum(x) * aten.sym_numel(x),), tracing_mode="symbolic")(make((3, 4)))
    b, = jax.export.symbolic_shape("b")
    with jax.enable_x64(True):
        exp = jax.export.export(jax.jit(lambda x: run_graph_module(gm, (x,))))(
            jax.ShapeDtypeStruct((b, 4), jax.numpy.float32))
        out = exp.call(jax.numpy.ones((5, 4), jax.numpy.float32))
    assert float(out[0]) == 5 * 4 * 5 * 4


def test_sym_stride_and_storage_offset_of_symbolic_views():
    def fn(x):
        v, t = x[1:, 2:], x.permute(1, 0)  # v: offset s1 + 2, stride(0) s1; t: stride(1) s1
        return (_sum(v) + aten.sym_storage_offset(v) * 100 + aten.sym_stride(v, 0) * 10 + aten.sym_stride(t, 1),)

    _compare(*_run(fn, (make((3, 5)),), aten.sym_storage_offset.default, tracing_mode="symbolic"), F32)


def test_sym_storage_offset_and_stride_read_from_the_graph_inputs():
    def fn(x):
        v = x.reshape(-1)[x.shape[1]:]  # offset s1, shape s0*s1 - s1: s1 is not one of its dims
        w = x.reshape(-1, 2)  # stride(0) s0*s1 // (s0*s1 // 2): a floor division
        return (_sum(v) + aten.sym_storage_offset(v) * 10 + aten.sym_stride(w, 0),)

    x = make((3, 4))
    gm = make_fx(fn, tracing_mode="symbolic")(x)
    with jax.enable_x64(True):
        (got,) = run_graph_module(gm, (to_jax(x),))
    assert_close(to_torch(got), fn(x)[0], 1e-5, 1e-5)
