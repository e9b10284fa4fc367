"""examples/generate.py: greedy decoding with a converted prefill and decode step (their KV cache passed from call
to call) picks the tokens transformers' ``generate`` picks."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers.exporters.exporter_dynamo")

import examples.generate as generate  # noqa: E402
from converter import convert  # noqa: E402
from examples.generate import export_decoder, greedy, litert_file, tiny_model  # noqa: E402

pytestmark = pytest.mark.xdist_group("generate")


@pytest.fixture(scope="module")
def llama() -> tuple:
    import transformers

    transformers.logging.set_verbosity_error()
    model = tiny_model("llama")
    prompt = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    want = model.generate(prompt, max_new_tokens=8, min_new_tokens=8, do_sample=False, pad_token_id=0)
    return export_decoder(model, prompt), prompt, want[0, prompt.shape[1]:].tolist()


@pytest.mark.parametrize("target", ["litert", "onnx", "tpu"])
def test_the_converted_decoder_generates_transformers_tokens(llama, target):
    (prefill, step), prompt, want = llama
    got = greedy(convert(prefill, target=target), convert(step, target=target), prompt, len(want))
    assert got == want
    assert len(set(want)) > 1  # (a model stuck on one token would hide a wrong cache)


def test_the_prefill_takes_prompts_of_other_lengths(llama):
    (prefill, _), prompt, _ = llama
    art = convert(prefill, target="litert")
    outs = art(prompt[:, :3])  # the model's own output: the logits and its DynamicCache
    assert outs.logits.shape == (1, 3, 64) and outs.past_key_values.layers[0].keys.shape[2] == 3


def test_one_litert_file_holds_prefill_and_decode_over_one_copy_of_the_weights(llama):
    (prefill, step), prompt, want = llama
    art = litert_file(prefill, step)
    assert art.signatures == ["prefill", "decode"]
    got = greedy(lambda *a: art(*a, signature="prefill"), lambda *a: art(*a, signature="decode"), prompt, len(want))
    assert got == want
    weights = sum(t.numel() * 4 for t in prefill.state_dict.values())
    assert art.size < convert(prefill, target="litert").size + weights / 2  # (the decode signature adds its graph)


def test_the_one_file_quantized_to_int8_weights_still_generates(llama):
    (prefill, step), prompt, want = llama
    art = litert_file(prefill, step, quantize="int8")
    assert art.precision == "int8" and art.signatures == ["prefill", "decode"]
    assert art.size < litert_file(prefill, step).size
    got = greedy(lambda *a: art(*a, signature="prefill"), lambda *a: art(*a, signature="decode"), prompt, len(want))
    assert sum(g == w for g, w in zip(got, want)) >= len(want) - 2  # (int8 weights may move a near tie)


def test_cli_writes_the_prefill_and_decode_signatures_of_a_factory(llama, tmp_path, capsys):
    from converter.cli.main import main
    from exporters.litert.artifact import LiteRTArtifact

    _, prompt, want = llama
    out = tmp_path / "llama.tflite"
    factory = f"{generate.__file__}:tiny_decoder"
    assert main(["convert", factory, "--target", "litert", "-o", str(out)]) == 0
    art = LiteRTArtifact.load(out)
    assert art.signatures == ["prefill", "decode"]
    got = greedy(lambda *a: art(*a, signature="prefill"), lambda *a: art(*a, signature="decode"), prompt, len(want))
    assert got == want
    assert main(["convert", factory, "--target", "onnx", "-o", str(tmp_path / "x.onnx")]) == 2
    assert "a factory of several signatures (prefill, decode) converts to --target litert" in capsys.readouterr().err
