"""Every target's artifact is called as the model is (``converter/call_inputs.py``): keyword arguments by name
in any order, ``None`` arguments, nested tuples and dicts of tensors; saved and reloaded artifacts too, and the
flat inputs as before."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from converter import convert
from converter.api import build, capture_program
from converter.errors import InputError
from converter.lowering import lower
from exporters.litert import LiteRTArtifact
from exporters.onnx import OnnxArtifact
from exporters.stablehlo import load

TARGETS = ("tpu", "stablehlo", "onnx", "litert")
#: one worker: the capture serves every target
pytestmark = pytest.mark.xdist_group("call-inputs")


class _Optional(nn.Module):
    """A transformers-style signature: optional tensors, a dict of tensors, keyword arguments."""

    def forward(self, x, mask=None, cache=None, *, a=None, b=None):
        y = x * 2
        if mask is not None:
            y = y * mask
        if cache is not None:
            y = y + cache["k"] - cache["v"][0]
        return y + 3 * a - b


def _tensors():
    g = torch.Generator().manual_seed(0)
    return [torch.randn(2, 3, generator=g) for _ in range(5)]


@pytest.fixture(scope="module")
def program():
    """``_Optional`` captured once with ``(x, None, cache)`` and keywords ``a``, ``b`` (in that order)."""
    x, k, v, a, b = _tensors()
    return capture_program(_Optional().eval(), (x, None, {"k": k, "v": (v,)}), {"a": a, "b": b})


@pytest.fixture(scope="module", params=TARGETS)
def converted(request, program):
    """Each target built from the one capture."""
    return request.param, build(program, target=request.param), _Optional().eval(), tuple(_tensors())


def test_targets_built_from_one_capture_leave_it_as_it_was_and_agree_with_convert(program):
    x, k, v, a, b = _tensors()
    before = program.graph_module.code
    got = [build(program, target=t)(x, k, v, a, b) for t in ("tpu", "stablehlo")]
    assert program.graph_module.code == before
    want = convert(_Optional().eval(), (x, None, {"k": k, "v": (v,)}), {"a": a, "b": b}, target="tpu")(x, k, v, a, b)
    for g in got:
        _same(g, torch.as_tensor(np.asarray(want)))
    with pytest.raises(InputError, match="unknown target 'tflite'"):  # before any capture
        convert(object(), (x,), target="tflite")


def _same(got, want):
    got = torch.as_tensor(np.asarray(got)) if not isinstance(got, torch.Tensor) else got
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)


def test_called_as_the_model_is(converted):
    target, art, model, (x, k, v, a, b) = converted
    cache = {"k": k, "v": (v,)}
    want = model(x, None, cache, a=a, b=b)
    _same(art(x, None, cache, a=a, b=b), want)
    _same(art(x, None, cache, b=b, a=a), want)  # keywords in another order: matched by name (tpu swapped them)
    _same(art(x, k, v, a, b), want)  # the flat inputs


def test_a_keyword_the_model_was_not_converted_with_is_refused(converted):
    target, art, model, (x, k, v, a, b) = converted
    with pytest.raises(InputError, match="unexpected keyword argument.*c.*converted with keyword arguments: a, b"):
        art(x, None, {"k": k, "v": (v,)}, a=a, c=b)
    with pytest.raises(InputError, match="takes 5 tensor inputs, the call gave 4"):
        art(x, None, {"k": k, "v": (v,)}, a=a)


def test_saved_artifacts_take_the_call_too(converted, tmp_path):
    target, art, model, (x, k, v, a, b) = converted
    cache = {"k": k, "v": (v,)}
    want = model(x, None, cache, a=a, b=b)
    if target == "tpu":
        return
    loaded = _reloaded(target, art, tmp_path)  # (signature.json, the file's metadata keep the keyword names)
    _same(loaded(x, None, cache, b=b, a=a), want)
    _same(loaded(x, None, cache, a, b), want)  # positional inputs, nested or flat
    _same(loaded(x, k, v, a, b), want)


def _reloaded(target, art, tmp_path):
    """``art`` saved and loaded back."""
    if target == "stablehlo":
        art.save(tmp_path / "m")
        return load(tmp_path / "m")
    return (OnnxArtifact if target == "onnx" else LiteRTArtifact).load(art.save(tmp_path / f"m.{target}"))


def test_an_input_of_another_shape_or_kind_is_refused_by_name(converted, tmp_path):
    target, art, model, (x, k, v, a, b) = converted
    cache = {"k": k, "v": (v,)}
    for bad, why in ((torch.randn(3, 3), r"has shape \[3, 3\] but .* takes \[2, 3\]; a dim that varies must be "
                                         r"declared dynamic"),
                     (torch.randn(2, 3, 1), r"has shape \[2, 3, 1\] but"),
                     (torch.ones(2, 3, dtype=torch.int64), "is int64 but .* takes float32")):
        with pytest.raises(InputError, match=why):  # (LiteRT resized the input and ran, or failed in its kernels)
            art(x, None, cache, a=bad, b=b)
    want = model(x, None, cache, a=a, b=b)
    _same(art(x, None, cache, a=a.double().numpy(), b=b), want)  # NumPy's float64: cast within the kind
    if target in ("onnx", "litert"):  # the file alone knows its input shapes too
        loaded = (OnnxArtifact if target == "onnx" else LiteRTArtifact).load(art.save(tmp_path / f"m.{target}"))
        with pytest.raises(InputError, match=r"has shape \[3, 3\] but"):
            loaded(x, k, v, torch.randn(3, 3), b)


class _Positions(nn.Module):
    """A learned position per token of a length-8 table: past 8 tokens JAX's gather clamps (the tpu artifact gave
    the last position's values for every token past it)."""

    def __init__(self):
        super().__init__()
        self.table = nn.Embedding(8, 2)

    def forward(self, x):
        return x + self.table(torch.arange(x.shape[1])).sum(-1)


@pytest.fixture(scope="module")
def positions():
    """``_Positions`` captured with a length from 3 to 8."""
    torch.manual_seed(0)
    model = _Positions().eval()
    length = torch.export.Dim("n", min=3, max=8)
    return model, capture_program(model, (torch.randn(2, 5),), dynamic_shapes=({1: length},))


@pytest.mark.parametrize("target", TARGETS)
def test_a_dynamic_dim_outside_its_declared_range_is_refused_as_torch_export_does(target, positions, tmp_path):
    model, program = positions
    art = build(program, target=target)
    with pytest.raises(AssertionError, match="<= 8"):  # (torch.export's own program)
        program.module()(torch.zeros(2, 9))
    for a in (art, _reloaded(target, art, tmp_path)) if target != "tpu" else (art,):
        for n in (3, 8):
            _same(a(torch.ones(2, n)), model(torch.ones(2, n)))
        for n in (9, 2):
            with pytest.raises(InputError, match=rf"has shape \[2, {n}\] but dim 1 of .* takes sizes 3 to 8"):
                a(torch.ones(2, n))


def test_a_size_jax_export_cannot_take_is_an_input_error_of_the_stablehlo_module():
    # (jax.export's symbolic dims are >= 1, where torch's program and the other targets run an empty batch)
    x = torch.randn(2, 3)
    art = convert(nn.Linear(3, 2).eval(), (x,), target="stablehlo", dynamic_shapes=({0: torch.export.Dim("b")},))
    with pytest.raises(InputError, match="the StableHLO module cannot take these input shapes: .*>= 1"):
        art(torch.zeros(0, 3))


def test_damaged_saved_call_inputs_are_one_clear_error(positions, tmp_path):
    import onnx

    model = build(positions[1], target="onnx").model()
    for entry in model.metadata_props:
        entry.value = '{"dim_ranges": [[null, [3]]]}'  # a range without its max
    onnx.save(model, tmp_path / "m.onnx")
    with pytest.raises(InputError, match="saved call inputs are damaged"):
        OnnxArtifact.load(tmp_path / "m.onnx")(torch.ones(2, 4))


@pytest.mark.parametrize("target", ["stablehlo", "onnx", "litert"])
def test_inspect_shows_the_keyword_arguments_ranges_and_fixed_numbers_a_file_keeps(target, positions, program,
                                                                                   numbers_program, tmp_path, capsys):
    from converter.cli.main import main

    for prog, line in ((positions[1], "dim 1: sizes 3 to 8"), (program, "keyword arguments: a, b"),
                       (numbers_program, "fixed arguments: scale=2.0, shift=3, opts_negate=True, mode='add'")):
        path = tmp_path / f"m.{target}"
        build(prog, target=target).save(path)
        assert main(["inspect", str(path)]) == 0
        assert line in capsys.readouterr().out


class _FixedOutputs(nn.Module):
    """Outputs with ``None`` among them, as transformers models return an absent cache or attention, and a
    string."""

    def forward(self, x):
        return x * 2, None, {"attn": None, "h": x + 1, "kind": "logits"}


@pytest.mark.parametrize("target", TARGETS)
def test_none_and_string_outputs_are_no_outputs_of_the_program_and_every_target_keeps_them_in_place(target):
    # (every target raised TypeError on the string, and the tpu target and the StableHLO module on the None: a jax
    # function cannot return a string and drops None from its outputs; the program listed a float32 output for each)
    x = torch.randn(2, 3)
    program = capture_program(_FixedOutputs(), (x,))
    assert [s.name for s in lower(program, target=target).outputs] == ["output_0", "output_1"]
    got = build(program, target=target)(x)  # the model's own structure (converter/call_outputs.py)
    assert got[1] is None and got[2]["attn"] is None and got[2]["kind"] == "logits"
    torch.testing.assert_close([got[0], got[2]["h"]], [x * 2, x + 1])


class _Numbers(nn.Module):
    """Python numbers and a string among the arguments, positional and keyword (torch.export holds them fixed)."""

    def forward(self, x, scale: float = 1.0, shift: int = 0, *, opts=None, mode: str = "add"):
        y = x * scale + shift
        if opts is not None and opts["negate"]:
            y = -y
        return y + opts["t"] if mode == "add" else y - opts["t"]


@pytest.fixture(scope="module")
def numbers_program():
    x, t = _tensors()[:2]
    return capture_program(_Numbers(), (x, 2.0, 3), {"opts": {"negate": True, "t": t}, "mode": "add"})


@pytest.mark.parametrize("target", TARGETS)
def test_a_python_number_other_than_the_samples_is_refused_by_name(target, numbers_program, tmp_path):
    # (every target computed with the sample's 2.0 whatever the call gave, and said nothing)
    x, t = _tensors()[:2]
    art = build(numbers_program, target=target)
    if target != "tpu":
        art = _reloaded(target, art, tmp_path)  # (signature.json, the file's metadata keep the numbers)
    want = _Numbers()(x, 2.0, 3, opts={"negate": True, "t": t}, mode="add")
    torch.testing.assert_close(art(x, 2.0, 3, opts={"t": t, "negate": True}, mode="add"), want)
    torch.testing.assert_close(art(x, 2, opts={"negate": True, "t": t}), want)  # (2 == 2.0; left out: the sample's)
    for args, kwargs, name, got, was in [((x, 5.0, 3), {"opts": {"negate": True, "t": t}}, "scale", "5.0", "2.0"),
                                         ((x, 2.0, 4), {"opts": {"negate": True, "t": t}}, "shift", "4", "3"),
                                         ((x, 2.0, 3), {"opts": {"negate": False, "t": t}}, "opts_negate", "False",
                                          "True"),
                                         ((x, 2.0, 3), {"opts": {"negate": True, "t": t}, "mode": "sub"}, "mode",
                                          "'sub'", "'add'")]:
        with pytest.raises(InputError, match=rf"argument '{name}' is {got} but the model was converted with {was}"):
            art(*args, **kwargs)


@pytest.mark.parametrize("target", TARGETS)
def test_a_misspelt_option_is_refused_by_every_target(target, program):
    # (convert() hands its options to the lowering too, and the builders took every option the lowering had been
    # given as its own: quantise="int8" built an unquantized model and said nothing)
    with pytest.raises(InputError, match=r"unknown .* option\(s\) \['quantise'\]; known: .*'kernels'"):
        build(program, target=target, quantise="int8")
    x, k, v, a, b = _tensors()
    want = _Optional().eval()(x, None, {"k": k, "v": (v,)}, a=a, b=b)
    _same(build(program, target=target, kernels="reference", composites=False)(x, k, v, a, b), want)


def test_the_flat_inputs_as_nested_lists_are_not_taken_for_the_samples_numbers(numbers_program):
    # (a list of numbers is an array-like input in the flat call: its numbers are no arguments of the model's)
    x, t = _tensors()[:2]
    art = build(numbers_program, target="onnx")
    want = _Numbers()(x, 2.0, 3, opts={"negate": True, "t": t}, mode="add")
    _same(art(x.tolist(), t.tolist()), want)
