"""Capture: the cached decomposition plan gives exactly torch's run_decompositions graph."""

from __future__ import annotations

import inspect
import re

import pytest
import torch
import torch.nn.functional as F

from converter.capture import decompose_program, decomposition_table


class Mixed(torch.nn.Module):
    """Preserved CIA ops (linear, layer_norm, softmax.int, SDPA, group_norm), CIA ops that
    decompose (matmul, flatten, dropout in eval, instance_norm) and core-table decompositions."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)
        self.ln = torch.nn.LayerNorm(8)
        self.gn = torch.nn.GroupNorm(2, 4)
        self.inorm = torch.nn.InstanceNorm1d(4)

    def forward(self, x, img):
        h = self.ln(self.fc(x))
        a = F.scaled_dot_product_attention(h[:, None], h[:, None], h[:, None], is_causal=True)[:, 0]
        s = torch.softmax(h @ h.transpose(-1, -2), dim=-1)
        g = self.gn(img).flatten(1)
        return F.dropout(a + s @ h, 0.1, training=False), torch.addmm(self.fc.bias, g[:, :8], self.fc.weight.T), \
            self.inorm(img.flatten(2)), F.silu(x).mean(-1)


def _summary(ep):
    nodes = [(n.op, str(n.target), str(n.meta.get("val")), n.meta.get("stack_trace") is not None)
             for n in ep.graph.nodes]
    return nodes, str(ep.graph_signature), str(ep.range_constraints), sorted(ep.state_dict)


def test_decompose_program_matches_run_decompositions():
    model = Mixed().eval()
    x, img = torch.randn(3, 5, 8), torch.randn(3, 4, 6, 6)
    batch = torch.export.Dim("batch", min=2, max=16)
    ep = torch.export.export(model, (x, img), dynamic_shapes=({0: batch}, {0: batch}))
    want = ep.run_decompositions(decomposition_table())
    got = decompose_program(ep)
    assert _summary(got) == _summary(want)
    targets = {str(n.target) for n in got.graph.nodes}
    assert {"aten.linear.default", "aten.layer_norm.default", "aten.scaled_dot_product_attention.default",
            "aten.group_norm.default", "aten.softmax.int", "aten.silu.default"} <= targets
    assert not {"aten.matmul.default", "aten.dropout.default", "aten.flatten.using_ints", "aten.numpy_T.default",
                "aten.instance_norm.default"} & targets


def test_multilabel_margin_loss_exports_with_padded_targets():
    # torch's decomposition of multilabel_margin_loss_forward counts the positions after a target list's -1 as
    # targets of class 0; the entry op goes to the forward op, kept whole and lowered by the table
    from validators import assert_parity

    class Loss(torch.nn.Module):
        def forward(self, x, target):
            return F.multilabel_margin_loss(x, target, reduction="none"), F.multilabel_margin_loss(x, target)

    x = torch.tensor([[0.3, -1.2, 0.8, 0.1], [1.5, 0.2, -0.4, 0.9], [0.0, 0.5, 0.5, -2.0]])
    target = torch.tensor([[1, -1, 2, 0], [3, 0, -1, 1], [-1, 2, 1, 0]])  # the last sample has no targets: loss 0
    ops = {str(n.target) for n in decompose_program(torch.export.export(Loss(), (x, target))).graph.nodes}
    assert "aten.multilabel_margin_loss_forward.default" in ops
    assert_parity(Loss(), (x, target), targets=["tpu", "onnx", "litert"], num_random_inputs=0)


def test_addcmul_of_mixed_integer_dtypes_converts_as_the_cpu_computes_it():
    # torch's reference multiplied the uint8 tensors in uint8 (16 * 16 wrapped to 0) and scaled an integer result
    # by a float value; the CPU kernel computes in the common dtype and truncates the value
    from validators import assert_parity

    class Addcmul(torch.nn.Module):
        def forward(self, a, b, c):
            return torch.addcmul(a, b, b, value=2), torch.addcmul(a, c, c, value=1.5)

    a, b, c = torch.tensor([5, 3, -7]), torch.tensor([16, 13, 0], dtype=torch.uint8), torch.tensor([5, 9, -2])
    assert_parity(Addcmul(), (a, b, c), targets=["tpu", "onnx", "litert"], num_random_inputs=0)


def test_a_program_with_torch_linalg_error_checks_converts_and_runs():
    # inv/cholesky decompose into *_ex plus an effectful error check: the program takes an effect token first,
    # which took the place of the first user input (StopIteration)
    from converter.api import convert

    class Solve(torch.nn.Module):
        def forward(self, a):
            return torch.linalg.inv(a), torch.linalg.cholesky(a @ a.T + torch.eye(3))

    a = torch.tensor([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    art = convert(Solve().eval(), (a,), target="tpu")
    for got, want in zip(art(a), Solve()(a)):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    # the artifact runs the checks after the program, as torch raises: a singular matrix is refused
    singular = torch.tensor([[1.0, 2.0, 0.0], [2.0, 4.0, 0.0], [0.0, 0.0, 1.0]])
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.inv: .*singular"):
        Solve()(singular)
    with pytest.raises(torch.linalg.LinAlgError, match="linalg.inv: .*singular"):
        art(singular)


class _CachesInForward(torch.nn.Module):
    """LeViT's pattern: eval mode caches a tensor computed in ``forward`` in a dict keyed by device, and ``train()``
    replaces the dict (torch.export toggles the mode, so a trace fills the old dict and the new one)."""

    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(4))
        self.cache: dict = {}
        self.history: list = []

    def train(self, mode: bool = True) -> "_CachesInForward":
        super().train(mode)
        if mode and self.cache:
            self.cache = {}
        return self

    def forward(self, x):
        if not self.training:
            key = str(x.device)
            if key not in self.cache:
                self.cache[key] = self.bias * 2
            self.history.append(self.cache[key])
            return x + self.cache[key]
        return x + self.bias * 2


@pytest.mark.parametrize("target", ["tpu", "onnx"])
def test_a_model_caching_tensors_in_forward_is_left_as_it_was(target):
    # the trace's functional tensors stayed in the dict and the list: the model then failed in eager
    # ("Attempting to use FunctionalTensor on its own") and the next convert failed to read its state
    from converter import convert

    torch.manual_seed(0)
    model, x = _CachesInForward().eval(), torch.randn(2, 4)
    want = model(x)
    for _ in range(2):
        torch.testing.assert_close(torch.as_tensor(convert(model, (x,), target=target)(x)), want)
        assert all(type(v) is torch.Tensor for v in [*model.cache.values(), *model.history])  # no tracer
    torch.testing.assert_close(model(x), want)
    fresh = _CachesInForward().eval()
    fresh.load_state_dict(model.state_dict())
    torch.testing.assert_close(torch.as_tensor(convert(fresh, (x,), target=target)(x)), want)  # an empty cache
    assert not fresh.cache and not fresh.history and torch.equal(fresh(x), want)


class _BranchOnValues(torch.nn.Module):
    def forward(self, x):
        if x.sum() > 0:  # (the line the error names)
            return x * 2
        return x


class _WrongShapes(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, 2))

    def forward(self, x):
        return x @ self.w  # (the line the error names)


@pytest.mark.parametrize("model, says", [
    (_BranchOnValues(), r"data-dependent expression .* \(a Python branch, loop or size on a tensor's values: .* "
                        r"branch with torch\.cond"),
    (_WrongShapes(), r"a and b must have same reduction dim"),
], ids=["branch on values", "wrong shapes"])
def test_a_capture_error_names_the_users_line_that_raised_it(model, says):
    from converter import convert
    from converter.errors import CaptureError

    lines, first = inspect.getsourcelines(type(model).forward)
    line = first + next(i for i, text in enumerate(lines) if "(the line the error names)" in text)
    with pytest.raises(CaptureError, match=rf"torch\.export failed on {type(model).__name__} at "
                                           rf"{re.escape(__file__)}:{line} in forward: .*{says}"):
        convert(model, (torch.randn(3, 3),), target="stablehlo")


def test_a_capture_error_with_no_user_line_names_none():
    # (it named inspect.py's line that binds the call's arguments to forward)
    from converter import convert
    from converter.errors import CaptureError

    with pytest.raises(CaptureError, match=r"^torch\.export failed on _WrongShapes: missing a required argument: 'x'$"):
        convert(_WrongShapes(), (), target="stablehlo")


def test_torch_aos_quantized_form_is_named_with_the_forms_that_convert():
    # (the error was torch.export's alone: "LinearPackedParamsBase ... does not have a field with name
    # '__obj_flatten__'", "quantized nyi in meta tensors")
    import warnings

    from converter import convert
    from converter.errors import CaptureError

    class QuantizedBuffer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("w", torch.quantize_per_tensor(torch.randn(3), 0.1, 0, torch.qint8))

        def forward(self, x):
            return x + self.w.dequantize()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch.ao's deprecation notes)
        dynamic = torch.ao.quantization.quantize_dynamic(torch.nn.Sequential(torch.nn.Linear(3, 3)),
                                                         {torch.nn.Linear}, dtype=torch.qint8)
    for model, part in ((dynamic, r"module 0 \(torch\.ao\.nn\.quantized\.dynamic\.modules\.linear\.Linear\)"),
                        (QuantizedBuffer(), r"tensor w \(torch\.qint8\)")):
        with pytest.raises(CaptureError, match=rf"{part} is torch\.ao's quantized form.*convert the model before "
                                               r"torch\.ao\.quantization\.convert or quantize_dynamic"):
            convert(model, (torch.randn(2, 3),), target="onnx")


def test_torch_aos_fake_quantize_branch_names_the_qconfig_that_converts():
    # (the hint was the general one: "compute both with torch.where, branch with torch.cond ...", in torch's code)
    import warnings

    from converter import convert
    from converter.errors import CaptureError

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch.ao's deprecation notes)
        model = torch.nn.Sequential(torch.ao.quantization.QuantStub(), torch.nn.Linear(3, 3)).train()
        model.qconfig = torch.ao.quantization.default_qat_qconfig
        model = torch.ao.quantization.prepare_qat(model)
    with pytest.raises(CaptureError, match=r"data-dependent .*torch\.ao's FakeQuantize, of default_qat_qconfig, "
                                           r"branches .*get_default_qat_qconfig\('x86' / 'qnnpack'\)"):
        convert(model, (torch.randn(2, 3),), target="onnx")


class _CeilPool1d(torch.nn.Module):
    def forward(self, x):
        return F.max_pool1d(x, 3, 2, 1, ceil_mode=True)


def test_a_dynamic_dim_torch_cannot_keep_is_refused_with_torchs_reasons_and_fixes():
    # (the error was the first line alone: "Constraints violated (L)! For more information, run with
    # TORCH_LOGS="+dynamic"."; which guard failed and the Dim that holds were on the lines after it)
    from converter import convert
    from converter.errors import CaptureError

    length = torch.export.Dim("L", min=4, max=64)  # (ceil mode: the length's parity is guarded)
    with pytest.raises(CaptureError, match=r"Constraints violated \(L\)! Not all values of L = .* in the specified "
                                           r"range 4 <= L <= 64 satisfy the generated guard .* Suggested fixes: "
                                           r"_L = Dim\('_L', max=32\); L = 2\*_L\.$"):
        convert(_CeilPool1d(), (torch.randn(2, 3, 8),), target="onnx", dynamic_shapes=({2: length},))


def test_a_sample_size_outside_its_dims_range_names_the_dim():
    # (the error was torch's "16 not in range [32, 96]", naming no dim)
    from converter import convert
    from converter.errors import CaptureError

    with pytest.raises(CaptureError, match=r"a sample input's size 16 is outside the range \[32, 96\] declared for "
                                           r"L: give sample inputs"):
        convert(_CeilPool1d(), (torch.randn(2, 3, 16),), target="onnx",
                dynamic_shapes=({2: torch.export.Dim("L", min=32, max=96)},))
