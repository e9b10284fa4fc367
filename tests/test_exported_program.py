"""A ``torch.export.ExportedProgram`` in place of a module (converter/exported.py): ``convert``, ``validate`` and the
CLI take one made by ``torch.export.export``, read back by ``torch.export.load``, or made by transformers' exporter
(a language model's decode step with its KV cache)."""

from __future__ import annotations

import contextlib
import copy
import io
import json
from typing import Iterator

import numpy as np
import pytest
import torch
from torch.export import Dim

from converter import convert
from converter.cli.main import main
from converter.errors import CaptureError, InputError
from converter.exported import prepared
from validators.parity import validate

pytestmark = pytest.mark.xdist_group("exported-program")

TARGETS = ("tpu", "stablehlo", "litert", "onnx")


class _Head(torch.nn.Module):
    """Dict output, a folded batch norm, a keyword input."""

    def __init__(self) -> None:
        super().__init__()
        self.fc, self.bn = torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3)

    def forward(self, x: torch.Tensor, scale: float = 2.0) -> dict:
        return {"y": torch.relu(self.bn(self.fc(x))) * scale, "total": x.sum(-1)}


def _saved_and_loaded(ep: torch.export.ExportedProgram) -> torch.export.ExportedProgram:
    buf = io.BytesIO()
    torch.export.save(ep, buf)
    buf.seek(0)
    return torch.export.load(buf)


@pytest.fixture(scope="module")
def head() -> tuple[torch.nn.Module, torch.export.ExportedProgram]:
    torch.manual_seed(0)
    model = _Head().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-1, 1)
        model.bn.running_var.uniform_(0.5, 2)
    ep = torch.export.export(model, (torch.randn(2, 4),), dynamic_shapes=({0: Dim("batch", max=16)},))
    return model, _saved_and_loaded(ep)


@pytest.mark.parametrize("target", TARGETS)
def test_a_loaded_program_converts_with_its_own_sample_inputs_and_dynamic_batch(head, target):
    model, ep = head
    art = convert(ep, target=target)
    x = torch.randn(5, 4)  # another batch than the sample's 2: the program's dynamic dim
    got, want = art(x), model(x)
    assert isinstance(got, dict) and list(got) == ["y", "total"]  # the structure the module returns
    for g, w in zip(got.values(), want.values()):
        np.testing.assert_allclose(np.asarray(g), w.detach().numpy(), rtol=1e-5, atol=1e-5)


def test_the_given_program_is_not_changed(head):
    _, ep = head
    before = [str(n.target) for n in ep.graph.nodes]
    convert(ep, (torch.randn(3, 4),), target="tpu")
    assert [str(n.target) for n in ep.graph.nodes] == before
    assert tuple(ep.example_inputs[0][0].shape) == (2, 4)  # its own example inputs stay


@pytest.mark.parametrize("args, message", [
    ((torch.randn(2, 5),), "Expected input at *args[0].shape[1] to be equal to 4, but got 5"),
    ((torch.randn(20, 4),), "to be <= 16, but got 20"),
    ((torch.randn(2, 4, dtype=torch.float64),), "input args[0] is torch.float64, exported as torch.float32"),
    ((torch.randn(2, 4), torch.randn(2)), "it takes 1 positional and keywords [], got 2 positional"),
])
def test_sample_inputs_that_do_not_fit_the_program_are_refused_by_what_differs(head, args, message):
    with pytest.raises(InputError, match="do not fit the ExportedProgram's inputs") as e:
        convert(head[1], args, target="onnx")
    assert message in str(e.value)


def test_dynamic_shapes_and_strict_are_the_exports_own(head):
    with pytest.raises(InputError, match="dynamic dims were fixed when it was exported"):
        convert(head[1], target="tpu", dynamic_shapes=({0: Dim("b")},))
    with pytest.raises(InputError, match="traced already"):
        convert(head[1], target="tpu", strict=True)


def test_a_program_without_example_inputs_needs_sample_inputs(head):
    ep = copy.copy(head[1])
    ep.example_inputs = None
    with pytest.raises(InputError, match="holds no example inputs: pass sample inputs"):
        convert(ep, target="tpu")
    art = convert(ep, (torch.randn(3, 4),), target="onnx")
    assert art(torch.randn(4, 4))["y"].shape == (4, 3)


def test_training_mode_is_read_from_the_graph():
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.BatchNorm1d(4), torch.nn.Dropout(0.0))
    x = torch.randn(3, 4)
    assert prepared(torch.export.export(net.eval(), (x,)))[1] is True  # inference: the folding passes run
    assert prepared(torch.export.export(net.train(), (x,)))[1] is False  # a batch norm updating its statistics
    drop = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Dropout(0.5)).train()
    assert prepared(torch.export.export(drop, (x,)))[1] is False


class _Biased(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(2, 1, 16))

    def forward(self, k: torch.Tensor) -> torch.Tensor:
        return torch.cat([k, k + self.bias], 2)


@pytest.mark.parametrize("target", ["litert", "onnx"])
def test_a_dim_auto_the_trace_specialized_is_static(target):
    """``Dim.AUTO`` on every dim: the heads dim, fixed by the bias, stays a SymInt whose expression is the number 2
    (transformers' exporter makes such programs); it was taken for a dynamic dim named "2", and refused."""
    torch.manual_seed(0)
    model = _Biased()
    ep = torch.export.export(model, (torch.randn(1, 2, 8, 16),), dynamic_shapes=({i: Dim.AUTO for i in range(4)},))
    assert any(type(d) is torch.SymInt and str(d) == "2"
               for n in ep.graph.nodes if n.op == "placeholder" for d in n.meta["val"].shape)
    art = convert(ep, target=target)
    k = torch.randn(1, 2, 5, 16)
    got = art(k)
    got = got[0] if isinstance(got, (tuple, list)) else got
    np.testing.assert_allclose(np.asarray(got), model(k).detach().numpy(), rtol=1e-6, atol=1e-6)


def test_validate_runs_the_program_as_its_module_at_other_sizes(head):
    report = validate(head[1], targets=["tpu", "onnx"], num_random_inputs=1, progress=False, op_profile=False)
    assert report.passed and report.model == "ExportedProgram"
    sizes = [info.specs[0][1][0] for info in report.inputs]
    assert sizes[0] == 2 and sizes[1] != 2  # the random set draws another batch within the program's range


# ------------------------------------------------------------------------------------------------- transformers

def _gpt2() -> torch.nn.Module:
    transformers = pytest.importorskip("transformers")
    transformers.logging.set_verbosity_error()
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=50, n_positions=32, bos_token_id=0,
                                  eos_token_id=0)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


@contextlib.contextmanager
def _unregistered(cls: type) -> Iterator[None]:
    """``cls`` taken out of torch's pytree registry for the block (transformers' exporter registers its cache types
    for the whole process: a test run earlier in this worker, tests/test_generate.py, may have), then put back."""
    import torch.utils._pytree as pytree

    node, serialized = pytree.SUPPORTED_NODES.get(cls), pytree.SUPPORTED_SERIALIZED_TYPES.get(cls)
    if node is None:
        yield
        return
    pytree._deregister_pytree_node(cls)
    try:
        yield
    finally:
        pytree._private_register_pytree_node(
            cls, node.flatten_fn, node.unflatten_fn, flatten_with_keys_fn=node.flatten_with_keys_fn,
            serialized_type_name=serialized.serialized_type_name if serialized else None,
            to_dumpable_context=serialized.to_dumpable_context if serialized else None,
            from_dumpable_context=serialized.from_dumpable_context if serialized else None)


def test_a_model_returning_a_transformers_cache_says_what_converts():
    from transformers.cache_utils import DynamicCache

    model = _gpt2()
    ids = torch.randint(0, 50, (1, 6))
    with _unregistered(DynamicCache), pytest.raises(
            CaptureError, match=r"a transformers cache, returned with use_cache=True: pass "
                                r"sample_kwargs=\{'use_cache': False\}"):
        convert(model, (ids,), target="onnx")
    art = convert(model, (ids,), {"use_cache": False}, target="onnx")
    np.testing.assert_allclose(art(ids).logits, model(ids, use_cache=False).logits.detach().numpy(), rtol=1e-4,
                               atol=1e-5)


def test_a_transformers_decode_step_with_its_kv_cache_converts_and_matches():
    """transformers' exporter gives the decode step of a language model: one token and the cache of the tokens
    before it (a ``DynamicCache`` of any length) in, the logits and the grown cache out."""
    exporter = pytest.importorskip("transformers.exporters.exporter_dynamo")
    model = _gpt2()
    ids = torch.randint(0, 50, (1, 8), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        cache = model(ids, use_cache=True).past_key_values
    inputs = {"input_ids": ids[:, -1:], "past_key_values": copy.deepcopy(cache), "use_cache": True}
    ep, _ = exporter.DynamoExporter().export_program(model, inputs, exporter.DynamoConfig(dynamic=True))
    report = validate(ep, targets=["tpu", "litert", "onnx"], num_random_inputs=0, progress=False, op_profile=False)
    assert report.passed, report.to_markdown()
    assert len(report.targets[0].comparisons) == 5  # the logits and a key and a value per layer
    art = convert(ep, target="litert")  # a cache of another length (3 tokens) runs in the same file
    with torch.no_grad():
        short = model(ids[:, :3], use_cache=True).past_key_values
        want = model(ids[:, 3:4], past_key_values=copy.deepcopy(short), use_cache=True)
    flat = [t for layer in short.layers for t in (layer.keys, layer.values)]
    got = art(ids[:, 3:4], *flat)  # the model's own output: the logits and the grown DynamicCache
    np.testing.assert_allclose(got.logits, want.logits.numpy(), rtol=1e-4, atol=1e-5)
    keys = got.past_key_values.layers[0].keys
    np.testing.assert_allclose(keys, want.past_key_values.layers[0].keys.numpy(), rtol=1e-4, atol=1e-5)
    assert keys.shape[2] == 4


# ------------------------------------------------------------------------------------------------- CLI

@pytest.fixture(scope="module")
def saved(head, tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("pt2") / "head.pt2"
    torch.export.save(head[1], str(path))
    return str(path)


def test_cli_converts_and_validates_a_saved_program(saved, tmp_path, capsys):
    out = tmp_path / "head.tflite"
    assert main(["convert", saved, "--target", "litert", "-o", str(out)]) == 0
    assert out.stat().st_size > 0
    assert main(["validate", saved, "--targets", "tpu,litert", "--report", str(tmp_path / "r"),
                 "--num-random-inputs", "1", "--no-op-profile"]) == 0
    assert "# Parity report: ExportedProgram — PASS" in capsys.readouterr().out
    assert json.loads((tmp_path / "r" / "report.json").read_text())["model"] == "ExportedProgram"


def test_cli_refuses_dynamic_for_a_program_and_a_file_torch_cannot_load(saved, tmp_path, capsys):
    out = tmp_path / "x.onnx"
    assert main(["convert", saved, "--target", "onnx", "-o", str(out), "--dynamic", "0:0"]) == 2
    assert "--dynamic: an exported program's dynamic dims were fixed" in capsys.readouterr().err
    bad = tmp_path / "bad.pt2"
    bad.write_bytes(b"not an archive")
    assert main(["convert", str(bad), "--target", "onnx", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"tpu-export: error: cannot load {bad} with torch.export.load: ") and err.count("\n") == 1
    assert main(["convert", str(tmp_path / "none.pt2"), "--target", "onnx", "-o", str(out)]) == 2
    assert "exported program not found" in capsys.readouterr().err
    assert not out.exists()


def test_cli_takes_a_factory_returning_a_program(saved, tmp_path):
    factory = tmp_path / "f.py"
    factory.write_text(f"import torch\n\ndef make():\n    return torch.export.load({saved!r}), ()\n")
    out = tmp_path / "head.onnx"
    assert main(["convert", f"{factory}:make", "--target", "onnx", "-o", str(out)]) == 0
    assert out.stat().st_size > 0


class _TwoParts(torch.nn.Module):
    def forward(self, x: torch.Tensor, parts: dict) -> torch.Tensor:
        return x * parts["a"] + parts["b"]


def test_an_input_of_another_structure_is_named():
    """(A sliding-window KV cache holds its length in its structure: a cache of another length is such an input.)"""
    x = torch.randn(3)
    ep = torch.export.export(_TwoParts(), (x, {"a": x, "b": x}))
    with pytest.raises(InputError, match=r"input args\[1\] \(dict\) is not of the structure it was exported with"):
        convert(ep, (x, {"a": x}), target="tpu")
    with pytest.raises(InputError, match=r"^input set 1: .* input args\[1\] \(dict\) is not of the structure"):
        validate(ep, targets=["tpu"], inputs=[(x, {"b": x})], num_random_inputs=0, progress=False)
    report = validate(ep, targets=["tpu"], inputs=[(x * 2, {"a": x, "b": -x})], num_random_inputs=0, progress=False,
                      op_profile=False)
    assert report.passed and len(report.inputs) == 2
