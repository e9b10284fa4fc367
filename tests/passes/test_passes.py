"""The shared FX passes: each changes what it should, keeps the program valid and
equal to PyTorch, and keeps ``node.meta`` pointing at user code.

A capture costs about a second (the first one several, torch.export warming up),
so every model is captured once per module.
"""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch.export.graph_signature import InputKind

from converter.capture import capture
from converter.passes import (PIPELINE, EliminateCommonSubexpressionsPass, EliminateDeadCodePass, FoldBatchNormPass,
                              FoldConstantsPass, run_passes)
from converter.passes.program import ProgramEditor

aten = torch.ops.aten
BN_EVAL = aten._native_batch_norm_legit_no_training.default


def count(ep, target) -> int:
    return sum(1 for n in ep.graph.nodes if n.op == "call_function" and n.target is target)


def specs(ep, kind) -> list[str]:
    return [s.target for s in ep.graph_signature.input_specs if s.kind == kind]


def close(got, want, tol=1e-5) -> None:
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def randomize_bn(model: torch.nn.Module) -> torch.nn.Module:
    """Non-trivial BatchNorm statistics, so folding is visible in the numbers."""
    g = torch.Generator().manual_seed(0)
    for m in model.modules():
        if isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            n = m.num_features
            m.running_mean.copy_(torch.rand(n, generator=g) * 2 - 1)
            m.running_var.copy_(torch.rand(n, generator=g) + 0.5)
            if m.affine:
                m.weight.data.copy_(torch.rand(n, generator=g) + 0.5)
                m.bias.data.copy_(torch.rand(n, generator=g) - 0.5)
    return model


class ConvBnZoo(torch.nn.Module):
    """Every BatchNorm pattern the fold handles, on one input."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 6, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(6)
        self.gconv = torch.nn.Conv2d(4, 8, 3, groups=2, bias=False)
        self.gbn = torch.nn.BatchNorm2d(8, affine=False)
        self.tconv = torch.nn.ConvTranspose2d(4, 6, 2, stride=2, groups=2)
        self.tbn = torch.nn.BatchNorm2d(6)
        self.conv1d = torch.nn.Conv1d(4, 5, 3)
        self.bn1d = torch.nn.BatchNorm1d(5)
        self.conv3d = torch.nn.Conv3d(4, 3, 1)
        self.bn3d = torch.nn.BatchNorm3d(3)
        self.fc = torch.nn.Linear(4, 7)
        self.fcbn = torch.nn.BatchNorm1d(7)

    def forward(self, x):
        return (self.bn(self.conv(x)), self.gbn(self.gconv(x)), self.tbn(self.tconv(x)),
                self.bn1d(self.conv1d(x.flatten(2))), self.bn3d(self.conv3d(x.unsqueeze(2))),
                self.fcbn(self.fc(x.mean((2, 3)))))


class WeightMath(torch.nn.Module):
    """Weight-only subgraphs next to ones that must stay: a too-big expand, a random op, a mutated buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(8, 4))
        self.w2 = torch.nn.Parameter(torch.randn(8, 4))
        self.b = torch.nn.Parameter(torch.randn(8))
        self.small = torch.nn.Parameter(torch.randn(64))
        self.unused = torch.nn.Parameter(torch.randn(3))
        self.tied = torch.nn.Parameter(torch.randn(1024, 4))
        self.register_buffer("step", torch.ones(8))

    def forward(self, x):
        y = torch.relu(F.linear(x, self.w + self.w2, self.b))          # add of weights: folded
        y = y + (x @ self.w.t().to(torch.float64).to(torch.float32).t().t())  # transposes and casts: folded
        y = y + x @ self.w2.t() + x @ self.w2.t()                        # equal values: one constant
        y = y + (F.linear(x, self.tied) + x @ self.tied.t()).sum(1, keepdim=True)  # tied: not copied
        big = self.small.expand(64, 64)                                  # 16 KiB from 256 B: not folded
        noisy = F.dropout(self.b, 0.5, training=True)                    # random: never folded
        out = y + self.step * 3                                          # reads a mutated buffer: not folded
        self.step.add_(1)
        return out, big.sum(0), noisy


class Duplicates(torch.nn.Module):
    def forward(self, input):  # noqa: A002 — a builtin name: FX renames it on copy, export does not
        a = torch.sin(input) * 2 + torch.sin(input) * 2
        return a, F.dropout(input, 0.5, training=True), F.dropout(input, 0.5, training=True)


@pytest.fixture(scope="module")
def conv_bn():
    model = randomize_bn(ConvBnZoo()).eval()
    x = torch.randn(2, 4, 6, 6)
    with torch.no_grad():
        want = model(x)
    return model, x, want, capture(model, (x,))


class ConvBnLinearBn(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 6, 3)
        self.bn = torch.nn.BatchNorm2d(6)
        self.fc = torch.nn.Linear(6, 3)
        self.fcbn = torch.nn.BatchNorm1d(3)

    def forward(self, x):
        return self.fcbn(self.fc(self.bn(self.conv(x)).mean((2, 3))))


@pytest.fixture(scope="module")
def conv_bn_train():
    model = randomize_bn(ConvBnLinearBn()).train()
    x = torch.randn(2, 4, 6, 6)
    return model, x, capture(copy.deepcopy(model), (x,))


@pytest.fixture(scope="module")
def weight_math():
    model = WeightMath().eval()
    x = torch.randn(3, 4)
    batch = torch.export.Dim("batch", min=2, max=64)
    return model, x, capture(copy.deepcopy(model), (x,), dynamic_shapes=({0: batch},))


@pytest.fixture(scope="module")
def duplicates():
    x = torch.randn(4, 5)
    return x, capture(Duplicates().eval(), (x,))


def fresh_weight_math(model, x, ep, n_calls=2):
    """Outputs of ``ep.module()`` and of a fresh copy of the model over ``n_calls`` calls.

    The model mutates a buffer and ``ep.module()`` shares its buffers with the
    (module-scoped) programs, so their values are restored afterwards. The
    dropout output is random and left out.
    """
    saved = {k: v.clone() for k, v in ep.state_dict.items()}
    ref, mod = copy.deepcopy(model), ep.module()
    try:
        return [(mod(x)[:2], ref(x)[:2]) for _ in range(n_calls)]
    finally:
        with torch.no_grad():
            for k, v in saved.items():
                ep.state_dict[k].copy_(v)


# --- FoldBatchNormPass ----------------------------------------------------------------------------

def test_fold_batch_norm_removes_every_batch_norm(conv_bn):
    model, x, want, ep = conv_bn
    assert count(ep, BN_EVAL) == 6
    new, modified = FoldBatchNormPass().call(ep)
    assert modified
    assert count(new, BN_EVAL) == 0
    assert count(new, aten.convolution.default) == 5 and count(new, aten.linear.default) == 1
    assert count(ep, BN_EVAL) == 6, "the input program must not be modified"
    for got, ref in zip(new.module()(x), want):
        close(got, ref)


def test_fold_batch_norm_keeps_the_layer_meta(conv_bn):
    _, _, _, ep = conv_bn
    before = {n.name: dict(n.meta) for n in ep.graph.nodes if n.target is aten.convolution.default}
    new, _ = FoldBatchNormPass().call(ep)
    convs = [n for n in new.graph.nodes if n.target is aten.convolution.default]
    for conv in convs:
        assert conv.meta["stack_trace"] == before[conv.name]["stack_trace"]
        assert "conv" in conv.meta["stack_trace"]
        assert conv.meta["nn_module_stack"] == before[conv.name]["nn_module_stack"]
        assert conv.meta["val"].shape == before[conv.name]["val"].shape
        weight = conv.args[1]
        spec = next(s for s in new.graph_signature.input_specs if s.arg.name == weight.name)
        assert spec.kind == InputKind.CONSTANT_TENSOR and spec.target in new.constants
        assert weight.meta["stack_trace"] == conv.meta["stack_trace"]
        assert isinstance(weight.meta["val"], torch.Tensor)


def test_fold_batch_norm_leaves_training_graphs(conv_bn_train):
    _, _, ep = conv_bn_train
    new, modified = FoldBatchNormPass().call(ep)
    assert not modified and new is ep


def test_run_passes_for_training_keeps_parameters(conv_bn_train):
    model, x, ep = conv_bn_train
    new, results = run_passes(ep, inference=False)
    assert [r.name for r in results] == ["EliminateCommonSubexpressionsPass", "EliminateDeadCodePass"]
    assert specs(new, InputKind.PARAMETER) == specs(ep, InputKind.PARAMETER)
    assert specs(new, InputKind.BUFFER) == specs(ep, InputKind.BUFFER)
    assert specs(new, InputKind.CONSTANT_TENSOR) == []
    assert count(new, aten._native_batch_norm_legit_functional.default) == 2
    close(new.module()(x), copy.deepcopy(model)(x))


def test_run_passes_for_inference_folds_and_cleans_up(conv_bn):
    _, x, want, ep = conv_bn
    new, results = run_passes(ep, inference=True)
    assert [r.name for r in results] == [c.__name__ for c in PIPELINE]
    assert count(new, BN_EVAL) == 0
    assert specs(new, InputKind.PARAMETER) == [] and specs(new, InputKind.BUFFER) == []
    assert not new.state_dict
    assert len(specs(new, InputKind.CONSTANT_TENSOR)) == 12  # a weight and a bias per folded layer
    for got, ref in zip(new.module()(x), want):
        close(got, ref)


# --- FoldConstantsPass ------------------------------------------------------------------------------

def test_fold_constants_folds_weight_math(weight_math):
    model, x, ep = weight_math
    new, modified = FoldConstantsPass().call(ep)
    assert modified
    permutes = [n for n in new.graph.nodes if n.target is aten.permute.default]
    assert [p.args[0].name for p in permutes] == ["p_tied"], "only the tied weight is transposed at run time"
    assert count(new, aten._to_copy.default) == 0
    linear = next(n for n in new.graph.nodes if n.target is aten.linear.default)
    assert all(a.op == "placeholder" for a in linear.args[1:]), "the summed weight is a constant now"
    added = specs(new, InputKind.CONSTANT_TENSOR)
    assert len(added) >= 2 and all(t in new.constants for t in added)
    placeholders = [n.name for n in new.graph.nodes if n.op == "placeholder"]
    assert placeholders == [s.arg.name for s in new.graph_signature.input_specs]
    assert placeholders[-1] == "x", "new constants go before the user inputs"
    for got, ref in fresh_weight_math(model, x, new):
        for g, r in zip(got, ref):
            close(g, r)


def test_fold_constants_shares_equal_values(weight_math):
    _, _, ep = weight_math
    new, _ = FoldConstantsPass().call(ep)
    mm_weights = {n.args[1].name for n in new.graph.nodes if n.target is aten.mm.default}
    assert len(mm_weights) == 3, mm_weights  # w (twice transposed back), w2.t() (shared), tied.t() (runtime)


def test_fold_constants_skips_big_random_mutated_and_tied(weight_math):
    _, _, ep = weight_math
    fold = FoldConstantsPass()
    new, _ = fold.call(ep)
    assert count(new, aten.expand.default) == 1
    tied = next(n for n in new.graph.nodes if n.name == "p_tied")
    assert {u.target for u in tied.users} == {aten.linear.default, aten.permute.default}
    assert any("p_tied" in reason for _, reason in fold.skipped)
    assert count(new, aten.native_dropout.default) == 1
    step = next(n for n in new.graph.nodes if n.name == "b_step")
    assert any(u.target is aten.mul.Tensor for u in step.users), "a mutated buffer is read at run time"
    assert FoldConstantsPass().call(new)[1] is False, "folding is idempotent"


def test_fold_constants_keeps_dynamic_batch(weight_math):
    model, _, ep = weight_math
    new, _ = run_passes(ep)
    x = torch.randn(7, 4)
    (got, ref), = fresh_weight_math(model, x, new, n_calls=1)
    close(got[0], ref[0])


class SmallLinear(torch.nn.Module):
    """Only ops the lowering table has today: linear, relu, add."""

    def __init__(self) -> None:
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(4, 4))
        self.w2 = torch.nn.Parameter(torch.randn(4, 4))
        self.b = torch.nn.Parameter(torch.randn(4))

    def forward(self, x):
        return torch.relu(F.linear(x, self.w + self.w2, self.b)) + x


def test_fold_constants_result_lowers():
    from converter.lowering import lower, registered
    needed = {aten.linear.default, aten.relu.default, aten.add.Tensor}
    missing = needed - set(registered())
    if missing:
        pytest.skip(f"lowerings not registered yet: {sorted(map(str, missing))}")
    model, x = SmallLinear().eval(), torch.randn(3, 4)
    new, _ = run_passes(capture(model, (x,)))
    assert count(new, aten.add.Tensor) == 1, "the weight sum is folded"
    assert specs(new, InputKind.PARAMETER) == ["b"], "w and w2 are gone, the bias is read as is"
    got = lower(new).closed()(x.numpy())[0]
    np.testing.assert_allclose(np.asarray(got), model(x).detach().numpy(), rtol=1e-5, atol=1e-5)


# --- EliminateCommonSubexpressionsPass --------------------------------------------------------------

def test_cse_merges_duplicates_but_not_dropout(duplicates):
    x, ep = duplicates
    assert count(ep, aten.sin.default) == 2
    new, modified = EliminateCommonSubexpressionsPass().call(ep)
    assert modified
    assert count(new, aten.sin.default) == 1 and count(new, aten.mul.Tensor) == 1
    assert count(new, aten.native_dropout.default) == 2
    a, d1, d2 = new.module()(x)
    close(a, torch.sin(x) * 4)
    assert not torch.equal(d1, d2), "two dropout draws stay two draws"
    sin = next(n for n in new.graph.nodes if n.target is aten.sin.default)
    assert "torch.sin(input)" in sin.meta["stack_trace"]


# --- EliminateDeadCodePass --------------------------------------------------------------------------

def test_dce_removes_unused_weights_from_signature(weight_math):
    _, _, ep = weight_math
    assert "unused" in specs(ep, InputKind.PARAMETER)
    new, modified = EliminateDeadCodePass().call(ep)
    assert modified
    assert "unused" not in specs(new, InputKind.PARAMETER) and "unused" not in new.state_dict
    assert "step" in specs(new, InputKind.BUFFER), "a mutated buffer stays"
    assert [s for s in new.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]
    kept, _ = EliminateDeadCodePass(inference=False).call(ep)
    assert "unused" in specs(kept, InputKind.PARAMETER), "training keeps every parameter"


def test_dce_removes_dead_nodes_but_keeps_asserts(duplicates):
    x, ep = duplicates
    editor = ProgramEditor(ep)
    xin = next(n for n in editor.graph.nodes if n.name == "input")
    val = xin.meta["val"]
    with val.fake_mode:
        cos_val = aten.cos.default(val)
        any_val = aten.any.default(cos_val)
    with editor.graph.inserting_after(xin):
        cos = editor.graph.call_function(aten.cos.default, (xin,))
    with editor.graph.inserting_after(cos):
        any_ = editor.graph.call_function(aten.any.default, (cos,))
    with editor.graph.inserting_after(any_):
        check = editor.graph.call_function(aten._assert_async.msg, (any_, "must stay"))
    with editor.graph.inserting_after(check):
        exp = editor.graph.call_function(aten.exp.default, (xin,))
    cos.meta["val"], any_.meta["val"], exp.meta["val"] = cos_val, any_val, cos_val
    padded = editor.build()
    new, modified = EliminateDeadCodePass().call(padded)
    assert modified
    assert count(new, aten.exp.default) == 0
    assert count(new, aten._assert_async.msg) == 1 and count(new, aten.cos.default) == 1
    assert count(new, aten.native_dropout.default) == 2
    close(new.module()(x)[0], torch.sin(x) * 4)


def test_passes_never_touch_their_input(duplicates):
    _, ep = duplicates
    names = [n.name for n in ep.graph.nodes]
    for cls in PIPELINE:
        cls().call(ep)
    assert [n.name for n in ep.graph.nodes] == names
