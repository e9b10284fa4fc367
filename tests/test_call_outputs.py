"""Every target's artifact returns the model's output structure (``converter/call_outputs.py``): dicts, tuples,
lists, namedtuples, the ``None`` and strings the model returns; a reloaded file too (plain containers), and NumPy
calls get plain containers of arrays."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch import nn

from converter.api import build, capture_program
from converter.call_outputs import CallOutputs
from exporters.litert import LiteRTArtifact
from exporters.onnx import OnnxArtifact
from exporters.stablehlo import load

TARGETS = ("tpu", "stablehlo", "onnx", "litert")
#: one worker: the capture serves every target
pytestmark = pytest.mark.xdist_group("call-outputs")

Pair = collections.namedtuple("Pair", "first second")


class _Nested(nn.Module):
    def forward(self, x, y):
        return {"sum": x + y, "pair": Pair(x * 2, [y.relu(), x - y]), "none": None, "name": "scores",
                "single": (x.sum(),)}


def _inputs():
    g = torch.Generator().manual_seed(0)
    return torch.randn(2, 3, generator=g), torch.randn(2, 3, generator=g)


@pytest.fixture(scope="module")
def program():
    return capture_program(_Nested().eval(), _inputs())


@pytest.fixture(scope="module", params=TARGETS)
def converted(request, program):
    return request.param, build(program, target=request.param)


def _plain(out):
    """``out`` with namedtuples as tuples and arrays as tensors (what a reloaded file keeps of the structure)."""
    if isinstance(out, dict):
        return {k: _plain(v) for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return type(out)(_plain(v) for v in out) if type(out) in (tuple, list) else tuple(_plain(v) for v in out)
    return torch.as_tensor(np.asarray(out)) if hasattr(out, "shape") else out


def _check(got, want, *, exact_types: bool):
    assert type(got) is (type(want) if exact_types else dict)
    assert list(got) == list(want)
    assert type(got["pair"]) is (Pair if exact_types else tuple)
    assert type(got["pair"][1]) is list and type(got["single"]) is tuple
    assert got["none"] is None and got["name"] == "scores"
    got, want = _plain(got), _plain(want)
    for out in (got, want):
        del out["none"], out["name"]
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_artifacts_return_the_model_s_structure(converted):
    target, art = converted
    x, y = _inputs()
    want = _Nested()(x, y)
    _check(art(x, y), want, exact_types=True)
    if target != "tpu":  # NumPy in, NumPy out: plain containers
        got = art(x.numpy(), y.numpy())
        assert isinstance(got["sum"], np.ndarray)
        _check(got, want, exact_types=False)


def test_reloaded_files_return_it_as_plain_containers(converted, tmp_path):
    target, art = converted
    if target == "tpu":
        return
    if target == "stablehlo":
        art.save(tmp_path / "m")
        loaded = load(tmp_path / "m")
    else:
        loaded = (OnnxArtifact if target == "onnx" else LiteRTArtifact).load(art.save(tmp_path / f"m.{target}"))
    x, y = _inputs()
    _check(loaded(x, y), _Nested()(x, y), exact_types=False)


def test_one_output_and_a_one_element_tuple_come_back_as_returned():
    x, _ = _inputs()
    for model, check in ((lambda t: t * 2, lambda out: isinstance(out, torch.Tensor)),
                         (lambda t: (t * 2,), lambda out: type(out) is tuple and len(out) == 1)):
        module = type("M", (nn.Module,), {"forward": lambda self, t, f=model: f(t)})()
        program = capture_program(module, (x,))
        for target in ("stablehlo", "litert"):
            out = build(program, target=target)(x)
            assert check(out), (target, out)


class _Opaque:
    """A pytree node JSON has no form for (as a ``DynamicCache``)."""

    def __init__(self, a, b):
        self.a, self.b = a, b


def test_a_node_type_a_file_cannot_keep_comes_back_flat_from_the_file(tmp_path):
    torch.utils._pytree.register_pytree_node(_Opaque, lambda o: ([o.a, o.b], None),
                                             lambda values, _: _Opaque(*values))
    try:
        class M(nn.Module):
            def forward(self, x):
                return _Opaque(x + 1, x * 3)

        x, _ = _inputs()
        art = build(capture_program(M(), (x,)), target="onnx")
        got = art(x)  # a fresh artifact rebuilds the model's own type
        assert isinstance(got, _Opaque)
        torch.testing.assert_close(got.b, x * 3)
        loaded = OnnxArtifact.load(art.save(tmp_path / "m.onnx"))
        flat = loaded(x)
        assert type(flat) is tuple and len(flat) == 2
        torch.testing.assert_close(flat[1], x * 3)
    finally:
        torch.utils._pytree._deregister_pytree_node(_Opaque)


def test_a_damaged_saved_structure_is_refused_and_another_count_is_not_used():
    from converter.errors import InputError

    with pytest.raises(InputError, match="saved output structure is damaged"):
        CallOutputs.from_json({"set": [0]}, 1)
    assert CallOutputs.from_json({"tuple": [0, 0]}, 3).build([1, 2, 3]) == (1, 2, 3)
    assert CallOutputs.from_json({"dict": [["a", 0], ["b", {"fixed": None}]]}, 1).build([7]) == {"a": 7, "b": None}


def test_inspect_shows_the_structure_a_file_returns_its_outputs_in(converted, tmp_path, capsys):
    from converter.cli.main import main

    target, art = converted
    if target == "tpu":
        return
    path = tmp_path / f"m.{target}"
    art.save(path)
    assert main(["inspect", str(path)]) == 0
    assert ("returns: {'sum': output_0, 'pair': (output_1, [output_2, output_3]), 'none': None, 'name': 'scores', "
            "'single': (output_4,)}") in capsys.readouterr().out
