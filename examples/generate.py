"""Greedy text generation with a converted language model and its KV cache, on any target.

transformers' exporter gives two programs of a causal model (``converter/exported.py`` converts them): the
**prefill** (the prompt's tokens in; the logits and the cache of the prompt out) and the **decode step** (one token
and the cache of any length in; its logits and the cache one token longer out). Each converts to one artifact;
:func:`greedy` runs the prompt through the first and then feeds each chosen token and the returned cache to the
second — the loop an app on Android or the web runs with the two ``.tflite`` (or ``.onnx``) files, or with one
``.tflite`` holding both as its ``prefill`` and ``decode`` signatures over one copy of the weights
(:func:`litert_file`, ``--one-file``), as litert-torch's generative models are laid out::

    python examples/generate.py --family llama --target litert --tokens 12
    python examples/generate.py --family llama --one-file --save llama.tflite
    python examples/generate.py --family llama --one-file --quantize int8
    tpu-export convert examples/generate.py:tiny_decoder --target litert -o llama.tflite   # the same file, CLI

prints the tokens transformers' own ``generate`` picks and the converted model's (they agree: the tiny model is
random, from its config; no download).
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402


def export_decoder(model: torch.nn.Module, prompt: torch.Tensor) -> tuple[Any, Any]:
    """The prefill and decode-step ``ExportedProgram``\\ s of the causal ``model`` (eval mode), from transformers'
    exporter: the prefill takes ``input_ids`` of any length, the step one token and a cache of any length."""
    from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

    with torch.no_grad():
        cache = model(prompt[:, :-1], use_cache=True).past_key_values
    prefill, _ = DynamoExporter().export_program(
        model, {"input_ids": prompt, "use_cache": True},
        DynamoConfig(dynamic_shapes={"input_ids": {1: torch.export.Dim("tokens", min=2, max=64)}}))
    step, _ = DynamoExporter().export_program(
        model, {"input_ids": prompt[:, -1:], "past_key_values": copy.deepcopy(cache), "use_cache": True},
        DynamoConfig(dynamic=True))
    return prefill, step


def litert_file(prefill: Any, step: Any, quantize: str | None = None) -> Any:
    """One LiteRT artifact with the ``prefill`` and ``decode`` signatures of :func:`export_decoder`'s programs (the
    weights stored once; ``quantize``: ``"fp16"`` or ``"int8"`` weights, as ``convert`` takes it)."""
    from converter.api import convert_signatures

    options = {"quantize": quantize} if quantize else {}
    return convert_signatures({"prefill": (prefill, ()), "decode": (step, ())}, **options)


def greedy(prefill: Callable, step: Callable, prompt: torch.Tensor, tokens: int) -> list[int]:
    """The ``tokens`` token ids greedy decoding picks after ``prompt`` (shape ``[1, n]``): ``prefill(ids)`` and
    ``step(token, *cache)`` are converted programs (:func:`export_decoder`) returning the logits and then the
    cache's tensors (flat, or as the model's output structure: the tpu target's)."""
    out = _flat(prefill(prompt))
    chosen: list[int] = []
    for _ in range(tokens):
        token = int(np.asarray(out[0])[0, -1].argmax())
        chosen.append(token)
        out = _flat(step(torch.tensor([[token]]), *out[1:]))
    return chosen


def tiny_decoder() -> dict:
    """CLI factory: the tiny Llama's prefill and decode step as LiteRT signatures,
    ``tpu-export convert examples/generate.py:tiny_decoder --target litert -o llama.tflite``."""
    import transformers

    transformers.logging.set_verbosity_error()
    prompt = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    prefill, step = export_decoder(tiny_model("llama"), prompt)
    return {"prefill": (prefill, ()), "decode": (step, ())}


def _flat(out: Any) -> list:
    return [torch.as_tensor(np.asarray(x)) for x in torch.utils._pytree.tree_leaves(out)]


def tiny_model(family: str) -> torch.nn.Module:
    """The sweep's tiny ``family`` language model (examples/transformers_sweep.py), eval mode, seeded."""
    from examples.transformers_sweep import build

    return build(family)[0].m


def main(argv: list[str] | None = None) -> int:
    """Compare transformers' greedy ``generate`` with the converted prefill and decode step."""
    import transformers

    from converter import convert

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family", default="llama", help="a causal family of examples/transformers_sweep.py")
    parser.add_argument("--target", default="litert", choices=["tpu", "stablehlo", "litert", "onnx"])
    parser.add_argument("--tokens", type=int, default=12)
    parser.add_argument("--one-file", action="store_true", help="litert: one file, prefill and decode signatures")
    parser.add_argument("--save", metavar="PATH", help="with --one-file: write the .tflite there")
    parser.add_argument("--quantize", choices=["fp16", "int8"], help="litert: fp16 or int8 (dynamic-range) weights")
    opts = parser.parse_args(argv)
    if opts.one_file or opts.quantize:
        opts.target = "litert"
    options = {"quantize": opts.quantize} if opts.quantize else {}
    transformers.logging.set_verbosity_error()
    model = tiny_model(opts.family)
    prompt = torch.randint(1, 64, (1, 6), generator=torch.Generator().manual_seed(0))
    programs = export_decoder(model, prompt)
    if opts.one_file:
        art = litert_file(*programs, quantize=opts.quantize)
        prefill, step = (lambda *a: art(*a, signature="prefill")), (lambda *a: art(*a, signature="decode"))
        if opts.save:
            print(f"wrote {art.save(opts.save)} ({art.size:,} bytes, signatures {art.signatures})")
    else:
        prefill, step = (convert(ep, target=opts.target, **options) for ep in programs)
    got = greedy(prefill, step, prompt, opts.tokens)
    want = model.generate(prompt, max_new_tokens=opts.tokens, min_new_tokens=opts.tokens, do_sample=False,
                          pad_token_id=0)[0, prompt.shape[1]:].tolist()
    print(f"transformers: {want}\n{opts.target:12}: {got}\n{'same tokens' if got == want else 'DIFFERENT'}")
    return 0 if got == want else 1


if __name__ == "__main__":
    sys.exit(main())
