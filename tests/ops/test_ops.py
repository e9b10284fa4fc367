"""OpInfo-style tests: every op in op_db against PyTorch CPU (STYLE.md #8).

Capture (torch.export + core-ATen decomposition) costs ~0.4 s, so all samples of
one op, every dtype, are captured together in one module; the test for each sample
compares its own outputs. If the combined run fails, samples run one by one so
each failure is reported against its own sample.
"""

from __future__ import annotations

import functools
import re

import pytest
import torch

from converter.errors import ConversionError
from converter.lowering import registered
from converter.lowering.ops.linalg import GROUPED_MM
from tests.ops.harness import assert_close, run_both
from tests.ops.op_db import DEFAULT_TOL, all_ops

aten = torch.ops.aten
OPS = all_ops()
_BY_NAME = {o.name: o for o in OPS}


def _cases():
    for info in OPS:
        for dtype in info.dtypes:
            for i, sample in enumerate(info.samples(dtype)):
                sid = sample.name or str(i)
                reason = info.xfail.get(sid) or info.xfail.get(str(dtype).replace("torch.", ""))
                marks = [pytest.mark.xfail(reason=reason, strict=True)] if reason else []
                # one capture per op and dtype: keep its samples on one xdist worker
                marks.append(pytest.mark.xdist_group(info.name))
                yield pytest.param(info.name, dtype, i, id=f"{info.name}-{str(dtype)[6:]}-{sid}", marks=marks)


def _group_fn(info, samples):
    def fn(*flat):
        it = iter(flat)
        outs = []
        for s in samples:
            args = [next(it) if isinstance(a, torch.Tensor) else a for a in s.args]
            outs.append(info.fn(*args, **s.kwargs))
        return tuple(outs)
    return fn


@functools.lru_cache(maxsize=None)
def _grouped_all(name: str):
    """Run every sample of one op, all dtypes, in one capture; ``None`` when that fails."""
    info = _BY_NAME[name]
    keyed = [((dtype, i), s) for dtype in info.dtypes for i, s in enumerate(info.samples(dtype))]
    samples = [s for _, s in keyed]
    flat = tuple(t for s in samples for t in s.args if isinstance(t, torch.Tensor))
    try:
        expected, got, ops = run_both(_group_fn(info, samples), flat)
    except Exception:  # fall back to per-sample runs, which report the real error
        return None
    counts = [len(torch.utils._pytree.tree_leaves(_expected_one(info, s))) for s in samples]
    out, k = {}, 0
    for (key, _), c in zip(keyed, counts):
        out[key] = (expected[k:k + c], got[k:k + c])
        k += c
    return out, ops


def _expected_one(info, s):
    with torch.no_grad():
        return info.fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in s.args], **s.kwargs)


@pytest.mark.parametrize("name,dtype,index", list(_cases()))
def test_op_matches_torch(name, dtype, index):
    info = _BY_NAME[name]
    group = _grouped_all(name)
    if group is None or (dtype, index) not in group[0]:
        sample = info.samples(dtype)[index]
        expected, got, ops = run_both(info.fn, sample.args, sample.kwargs)
    else:
        (expected, got), ops = group[0][(dtype, index)], group[1]
    missing = [str(op) for op in info.aten if op not in ops]
    assert not missing, f"{info.name}: captured graph lacks {missing}; it has {sorted(map(str, ops))}"
    rtol, atol = info.tol.get(dtype, DEFAULT_TOL.get(dtype, (0, 0)))
    assert len(got) == len(expected)
    for k, (g, e) in enumerate(zip(got, expected)):
        assert_close(g, e, rtol, atol, what=f"{info.name} output {k}")


def _error_cases():
    for info in OPS:
        for i, err in enumerate(info.errors):
            yield pytest.param(info, err, id=f"{info.name}-err{i}")


@pytest.mark.parametrize("info,err", list(_error_cases()))
def test_op_error_inputs(info, err):
    with pytest.raises((ConversionError, RuntimeError, ValueError, IndexError, TypeError)) as exc:
        run_both(info.fn, err.args, err.kwargs)
    assert re.search(err.pattern, str(exc.value)), str(exc.value)


def test_every_lowering_has_an_opinfo():
    covered = {op for info in OPS for op in info.aten}
    untested = sorted(str(op) for op in registered() if op not in covered and op not in UNTESTED_BY_OPINFO)
    assert not untested, f"lowerings without an OpInfo: {untested}"


#: Lowerings exercised elsewhere (model tests) rather than by an OpInfo, with why.
_RANDOM = "random: JAX PRNG values differ from torch by design; statistics checked in tests/ops/test_random.py"
UNTESTED_BY_OPINFO: dict = {
    op: _RANDOM for op in (
        aten.native_dropout.default, aten.bernoulli.p, aten.bernoulli.Tensor, aten.rand.default, aten.randn.default,
        aten.rand_like.default, aten.randn_like.default, aten.randint.low, aten.randint.default,
        aten.randint_like.low_dtype, aten.randint_like.default, aten.normal.Tensor_float,
        aten.normal.float_Tensor, aten.normal.Tensor_Tensor, aten.normal_functional.default,
        aten.uniform.default, aten.exponential.default, aten.randperm.default, aten.multinomial.default,
        aten.rrelu_with_noise_functional.default, aten.poisson.default, aten.randperm.generator,
        aten.geometric.default,
    )
}
UNTESTED_BY_OPINFO.update({op: _RANDOM.replace("tests/ops/test_random.py", "tests/runtime/test_distributions.py")
                           for op in (aten._standard_gamma.default, aten._sample_dirichlet.default,
                                      aten.binomial.default)})
UNTESTED_BY_OPINFO.update({op: "torch has no meta kernel for it (torch.export cannot capture it); compared with torch "
                               "on the device in tests/runtime/test_distributions.py"
                           for op in (aten._standard_gamma_grad.default, aten._dirichlet_grad.default)})
UNTESTED_BY_OPINFO.update({op: "torch.export decomposes it (a graph holds bilinear's .vec overload); the device runs "
                               "it: uint8 and float32 images compared with torch in "
                               "tests/runtime/test_dtype_semantics.py"
                           for op in (aten.upsample_bicubic2d.default, aten.upsample_bilinear2d.default)})
UNTESTED_BY_OPINFO[aten._efficientzerotensor.default] = (
    "torch.export folds it into a constant; AOTAutograd's backward graphs hold it (sgn's gradient): compared with "
    "torch in tests/runtime/test_compile_edges.py")
UNTESTED_BY_OPINFO[aten._padded_dense_to_jagged_forward.default] = (
    "torch has no meta kernel for it (torch.export cannot capture it); the backward of to_padded_tensor in "
    "tests/runtime/test_nested.py")
UNTESTED_BY_OPINFO.update({op: "no CPU kernel in torch (an op for PrivateUse1 backends): compared with "
                               "F.scaled_dot_product_attention on the CPU in tests/runtime/test_attention.py"
                           for op in (aten._scaled_dot_product_fused_attention_overrideable.default,
                                      aten._scaled_dot_product_fused_attention_overrideable_backward.default)})
_DECOMPOSED = ("torch.export's default decompositions remove it even when called directly; "
               "run on AOTAutograd/make_fx graphs in tests/ops/test_backward_graphs.py")
UNTESTED_BY_OPINFO.update({op: _DECOMPOSED for op in (
    aten.native_layer_norm_backward.default, aten.native_group_norm_backward.default,
    aten.embedding_dense_backward.default, aten.col2im.default, aten.sym_numel.default,
    aten.sym_stride.int, aten.sym_storage_offset.default,
)})
UNTESTED_BY_OPINFO[aten._assert_tensor_metadata.default] = (
    "only torch.export's training IR has it (capture's one-pass trace does not); a check that lowers to "
    "nothing, kept for programs that take the decomposition path")
UNTESTED_BY_OPINFO[aten._assert_async.default] = (
    "torch.export drops the message-less assert; the row is _assert_async.msg's, whose OpInfo runs it; eager and "
    "torch.compile raise as CPU in tests/runtime/test_compile.py")
UNTESTED_BY_OPINFO[GROUPED_MM] = (
    "_grouped_mm as torch.compile on the tpu device records it (the same row as _grouped_mm's OpInfo); compiled "
    "float32 forward and backward in tests/runtime/test_compile.py")
_DIRECT = "decomposed by torch.export; reached by eager dispatch and make_fx graphs: tests/ops/test_direct_ops.py"
UNTESTED_BY_OPINFO.update({op: _DIRECT for op in (
    aten.fill.Scalar, aten.squeeze.dim, torch.ops.prims.convert_element_type.default, aten.embedding_renorm.default,
    aten.linspace.default, torch.ops.prims.scalar_tensor.default,
)})
UNTESTED_BY_OPINFO.update({op: "torch.export and make_fx decompose it into div (whose OpInfo runs the same row); "
                               "torch.compile with dynamic shapes keeps it: tests/runtime/test_compile.py"
                           for op in (aten.true_divide.Tensor, aten.true_divide.Scalar)})
_RNN_CELL = ("CUDA-only in PyTorch (no CPU kernel to compare with); checked as the vjp of the forward row and "
             "by nn.LSTM/nn.GRU training against CPU in tests/runtime/test_rnn.py")
UNTESTED_BY_OPINFO.update({op: _RNN_CELL for op in (
    aten._thnn_fused_lstm_cell.default, aten._thnn_fused_lstm_cell_backward_impl.default,
    aten._thnn_fused_gru_cell.default, aten._thnn_fused_gru_cell_backward.default,
)})
_CTC = ("torch.export cannot trace it (no meta kernel: torch treats its output shape as data-dependent); "
        "F.ctc_loss losses and gradients against CPU in tests/runtime/test_ctc.py")
UNTESTED_BY_OPINFO.update({op: _CTC for op in (aten._ctc_loss.default, aten._ctc_loss_backward.default)})
UNTESTED_BY_OPINFO[aten.multilabel_margin_loss_forward.default] = (
    "torch.export applies torch's decomposition while tracing (a py_impl at the Autograd key), so no captured "
    "graph keeps it; the eager device reaches the row: tests/runtime/test_autograd.py checks it against CPU")
