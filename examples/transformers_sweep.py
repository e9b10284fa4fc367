"""Sweep transformers model families through every job: export, dynamic export, quantized LiteRT, the tpu device.

Each family is a tiny model built from its ``transformers`` config with random weights (no download), dropout and
layer drop off, run in a subprocess of its own (one family's crash or hang does not stop the sweep). Checks:

* ``export``: :func:`validators.validate` on tpu, StableHLO, ONNX and LiteRT (static shapes);
* ``dynamic``: the same with a dynamic batch and length, checked at two other sizes (text families; speech families
  with an audio length that is a multiple of the feature extractor's stride, a derived dim, as torch.export asks);
* ``decode``: a decoder's step with its KV cache as transformers' exporter gives it (one token and the cache in, the
  logits and the grown cache out; an encoder-decoder's step also takes the encoder's output), an ``ExportedProgram``
  validated on every target with the cache it was exported with and with a shorter one;
* ``quant``: LiteRT with ``quantize="fp16"``, ``"int8"`` and ``"int8-full"`` (calibrated on the sample inputs),
  relative error of the output against PyTorch;
* ``strict`` / ``fused``: one forward and backward on the tpu device in that eager mode against the CPU (train mode);
* ``compile``: the same through ``torch.compile(backend="tpu")``;
* ``debug``: the same in debug eager comparing every op with the CPU (``compare_cpu=True``): ``fail`` with the first
  op it flagged (the ops it compared are counted).

Eager checks report the output's max error relative to its largest value and the largest gradient error relative to
the largest gradient against the CPU; above 1e-3 both are also compared with the CPU in float64: ``ill-conditioned``
when the device is within twice the CPU's own float32 error, or twice that error with every weight nudged by half a
float32 unit (how far float32 noise alone carries the model: BatchNorm in training mode over a batch of two amplifies
it layer by layer), else ``BAD``. With ``--dtype bfloat16`` (or ``float16``) the eager checks run the model and its
floating inputs in that dtype on both sides, and the device passes (``as the CPU``) within twice the CPU's error
against float32 (some families' code refuses float64: xglm's masks, qwen3_moe's ``_grouped_mm``). Failures give the
error's first line. One JSON line per family and check::

    python examples/transformers_sweep.py --checks export,strict --families gpt2,bert,vit
    python examples/transformers_sweep.py --checks strict,compile --dtype bfloat16
    python examples/transformers_sweep.py                       # every family, every check (about an hour)

It needs ``transformers`` (the test extras: ``pip install -e ".[test]"``).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import torch

ROOT = Path(__file__).resolve().parent.parent

_TEXT = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)
_GQA = dict(_TEXT, num_key_value_heads=2)
_IMAGE = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64, image_size=16,
              patch_size=4)
_SPEECH = dict(vocab_size=32, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               conv_dim=(16, 16), conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=8,
               num_conv_pos_embedding_groups=4, mask_time_prob=0.0, mask_feature_prob=0.0)
_SEQ2SEQ = dict(vocab_size=64, d_model=32, encoder_layers=2, decoder_layers=2, encoder_attention_heads=4,
                decoder_attention_heads=4, encoder_ffn_dim=64, decoder_ffn_dim=64, max_position_embeddings=64)
_STAGES = dict(hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1])

#: family (``transformers`` model type) → (kind, tiny config).
FAMILIES: dict[str, tuple[str, dict]] = {
    **{f: ("causal", _TEXT) for f in ("biogpt", "xglm")},
    **{f: ("causal", _GQA) for f in ("llama", "qwen2", "gpt_neox", "stablelm", "starcoder2", "olmo", "olmo2",
                                     "cohere", "granite", "phi3")},
    "gpt2": ("causal", dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64)),
    "gpt_neo": ("causal", dict(vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, window_size=4,
                               attention_types=[[["global", "local"], 1]], max_position_embeddings=64)),
    "gptj": ("causal", dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4)),
    "codegen": ("causal", dict(vocab_size=64, n_embd=32, n_layer=2, n_head=4, n_positions=64, rotary_dim=4, n_ctx=64)),
    "opt": ("causal", dict(_TEXT, ffn_dim=64, word_embed_proj_dim=32)),
    "bloom": ("causal", dict(vocab_size=64, hidden_size=32, n_layer=2, n_head=4)),
    "falcon": ("causal", dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4)),
    "phi": ("causal", dict(_TEXT, partial_rotary_factor=0.5)),
    "gemma": ("causal", dict(_GQA, head_dim=8)),
    "gemma2": ("causal", dict(_GQA, head_dim=8, sliding_window=4)),
    "gemma3_text": ("causal", dict(_GQA, head_dim=8, sliding_window=4)),
    "mistral": ("causal", dict(_GQA, sliding_window=4)),
    "qwen3": ("causal", dict(_GQA, head_dim=8)),
    "qwen3_moe": ("causal", dict(_GQA, head_dim=8, num_experts=4, num_experts_per_tok=2, moe_intermediate_size=16)),
    "mpt": ("causal", dict(vocab_size=64, d_model=32, n_layers=2, n_heads=4, max_seq_len=64, expansion_ratio=2)),
    "mamba": ("causal", dict(vocab_size=64, hidden_size=32, num_hidden_layers=2, state_size=4, expand=2,
                             conv_kernel=4)),
    **{f: ("encoder", _TEXT) for f in ("bert", "roberta", "electra", "xlm-roberta", "mpnet", "roformer", "convbert")},
    "distilbert": ("encoder", dict(vocab_size=64, dim=32, hidden_dim=64, n_layers=2, n_heads=4,
                                   max_position_embeddings=64)),
    "albert": ("encoder", dict(_TEXT, embedding_size=16)),
    "mobilebert": ("encoder", dict(_TEXT, embedding_size=16, intra_bottleneck_size=16, true_hidden_size=16,
                                   num_feedforward_networks=2)),
    "deberta": ("encoder", dict(_TEXT, relative_attention=True, max_relative_positions=16,
                                pos_att_type=["p2c", "c2p"])),
    "deberta-v2": ("encoder", dict(_TEXT, relative_attention=True, max_relative_positions=16, position_buckets=8,
                                   pos_att_type=["p2c", "c2p"])),
    "xlnet": ("encoder", dict(vocab_size=64, d_model=32, n_layer=2, n_head=4, d_inner=64)),
    "t5": ("seq2seq", dict(vocab_size=64, d_model=32, d_kv=8, d_ff=64, num_layers=2, num_heads=4,
                           decoder_start_token_id=0)),
    **{f: ("seq2seq", _SEQ2SEQ) for f in ("bart", "mbart", "pegasus", "marian", "m2m_100", "blenderbot")},
    "whisper": ("speech2text", dict(vocab_size=64, d_model=32, encoder_layers=1, decoder_layers=1,
                                    encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=64,
                                    decoder_ffn_dim=64, num_mel_bins=16, max_source_positions=16,
                                    max_target_positions=16)),
    **{f: ("image", _IMAGE) for f in ("vit", "deit", "beit", "clip_vision_model")},
    "dinov2": ("image", dict(_IMAGE, mlp_ratio=2)),
    "convnext": ("image", dict(_STAGES, image_size=32)),
    "resnet": ("image", dict(_STAGES, embedding_size=8)),
    "regnet": ("image", dict(_STAGES, embedding_size=8, groups_width=4)),
    "swin": ("image", dict(embed_dim=16, depths=[1, 1], num_heads=[2, 2], image_size=32, patch_size=4,
                           window_size=4)),
    "levit": ("image", dict(image_size=32, hidden_sizes=[16, 24, 32], num_attention_heads=[1, 2, 2],
                            depths=[1, 1, 1], key_dim=[8, 8, 8], patch_size=16,
                            down_ops=[["Subsample", 8, 1, 2, 2, 2], ["Subsample", 8, 2, 2, 2, 2]])),
    "segformer": ("image", dict(num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1], hidden_sizes=[8, 16],
                                num_attention_heads=[1, 2], decoder_hidden_size=16, mlp_ratios=[2, 2],
                                patch_sizes=[7, 3], strides=[4, 2])),
    **{f: ("speech", _SPEECH) for f in ("wav2vec2", "hubert")},
}
CHECKS = ("export", "dynamic", "decode", "quant", "strict", "fused", "compile", "debug")


class _Outputs(torch.nn.Module):
    """The family's model with positional tensor inputs and one tensor output."""

    def __init__(self, model: torch.nn.Module, run: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.m, self._run = model, run

    def forward(self, *args: torch.Tensor) -> torch.Tensor:
        return self._run(self.m, *args)


def build(family: str) -> tuple[torch.nn.Module, tuple, str]:
    """The tiny eval-mode model of ``family``, its sample inputs and its kind (seeded)."""
    import transformers

    kind, kwargs = FAMILIES[family]
    torch.manual_seed(0)
    config = transformers.AutoConfig.for_model(family, **kwargs)
    for k, v in list(vars(config).items()):
        if k.endswith("_token_id") and isinstance(v, int) and v >= 32:  # ids past the tiny vocabulary
            setattr(config, k, 1)
        if isinstance(v, float) and ("dropout" in k or "drop_path" in k or "layerdrop" in k or k.endswith("_pdrop")):
            setattr(config, k, 0.0)
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(1, 64, (2, 8), generator=g)
    if kind == "causal":
        model = transformers.AutoModelForCausalLM.from_config(config)
        return _Outputs(model, lambda m, i: m(input_ids=i, use_cache=False).logits).eval(), (ids,), kind
    if kind == "encoder":
        model = transformers.AutoModel.from_config(config)
        return _Outputs(model, lambda m, i: m(input_ids=i).last_hidden_state).eval(), (ids,), kind
    if kind == "seq2seq":
        model = transformers.AutoModelForSeq2SeqLM.from_config(config)
        run = lambda m, i, d: m(input_ids=i, decoder_input_ids=d, use_cache=False).logits  # noqa: E731
        return _Outputs(model, run).eval(), (ids, torch.randint(1, 64, (2, 5), generator=g)), kind
    model = transformers.AutoModel.from_config(config)
    if kind == "speech2text":
        run = lambda m, f, d: m(input_features=f, decoder_input_ids=d).last_hidden_state  # noqa: E731
        args = (torch.randn(1, 16, 32, generator=g), torch.randint(0, 64, (1, 5), generator=g))
        return _Outputs(model, run).eval(), args, kind
    if kind == "speech":
        run = lambda m, x: m(input_values=x).last_hidden_state  # noqa: E731
        return _Outputs(model, run).eval(), (torch.randn(2, 400, generator=g),), kind
    size = getattr(config, "image_size", 32)
    size = size if isinstance(size, int) else size[0]
    run = lambda m, x: next(v for v in m(pixel_values=x).values() if isinstance(v, torch.Tensor))  # noqa: E731
    return _Outputs(model, run).eval(), (torch.randn(2, getattr(config, "num_channels", 3), size, size, generator=g),), kind


def _relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-6)).item()


def _validated(model: torch.nn.Module, args: tuple, **kwargs: Any) -> dict:
    from validators import validate

    report = validate(model, args, targets=("tpu", "stablehlo", "onnx", "litert"), num_random_inputs=0, **kwargs)
    return {t.target: t.status if t.status == "pass" else f"{t.status}: {t.message.splitlines()[0][:300]}"
            for t in report.targets}


def _dynamic(model: torch.nn.Module, args: tuple, kind: str, g: torch.Generator) -> dict:
    if kind == "speech":  # the audio length, a multiple of the feature extractor's stride (as torch.export asks)
        import math

        stride = math.prod(model.m.config.conv_stride)
        length = stride * torch.export.Dim("frames", min=40, max=1600)  # (the tiny configs' stride: 10)
        others = [(torch.randn(1, stride * 64, generator=g),), (torch.randn(3, stride * 123, generator=g),)]
        return _validated(model, args, dynamic_shapes=(({0: torch.export.Dim("batch", max=8), 1: length},),),
                          inputs=others)
    if kind not in ("causal", "encoder", "seq2seq"):
        return {"skip": "not a text or speech model"}
    batch, length = torch.export.Dim("batch", max=8), torch.export.Dim("seq", min=2, max=32)
    dims = [{0: batch, 1: length}]
    sizes = [[(1, 5)], [(3, 12)]]
    if kind == "seq2seq":
        dims.append({0: batch, 1: torch.export.Dim("dec", min=2, max=32)})
        sizes = [[(1, 5), (1, 3)], [(3, 12), (3, 7)]]
    others = [tuple(torch.randint(1, 64, s, generator=g) for s in row) for row in sizes]
    return _validated(model, args, dynamic_shapes=(tuple(dims),), inputs=others)


def _decode(model: torch.nn.Module, args: tuple, kind: str) -> dict:
    """A decoder's step with its KV cache, as transformers' exporter gives it (converter/exported.py): for a causal
    model the last of 8 tokens and the cache of the 7 before it in; for an encoder-decoder the encoder's output, the
    5th decoder token and the decoder's cache of 4 tokens (self- and cross-attention) in. Validated there and with a
    cache of 3 tokens (2 for an encoder-decoder)."""
    if kind not in ("causal", "seq2seq", "speech2text"):
        return {"skip": "not a decoder with a KV cache"}
    from transformers.exporters.exporter_dynamo import DynamoConfig, DynamoExporter

    from converter.errors import InputError

    lm, ids = model.m, args[0][:1]
    with torch.no_grad():
        if kind == "causal":
            (cache, short), at = (lm(ids[:, :n], use_cache=True).past_key_values for n in (7, 3)), 7
            step = lambda n, c: {"input_ids": ids[:, n:n + 1], "past_key_values": c}  # noqa: E731
        else:
            dec, source = args[1][:1], "input_ids" if kind == "seq2seq" else "input_features"
            outs = [lm(**{source: ids}, decoder_input_ids=dec[:, :n], use_cache=True) for n in (4, 2)]
            (cache, short), at = (o.past_key_values for o in outs), 4
            encoded = (outs[0].encoder_last_hidden_state,)
            step = lambda n, c: {"encoder_outputs": encoded, "decoder_input_ids": dec[:, n:n + 1],  # noqa: E731
                                 "past_key_values": c}
    ep, _ = DynamoExporter().export_program(lm, {**step(at, cache), "use_cache": True}, DynamoConfig(dynamic=True))
    try:
        return _validated(ep, (), inputs=[((), step(3 if kind == "causal" else 2, short))])
    except InputError as e:  # (a sliding-window cache holds its length in its structure: the program takes that one)
        return {**_validated(ep, ()), "note": f"exported cache only: {e}"}


def _quantized(model: torch.nn.Module, args: tuple) -> dict:
    from converter import convert

    want = model(*args).detach()
    return {q: f"rel {_relative(torch.as_tensor(convert(model, args, target='litert', quantize=q)(*args)), want):.1e}"
            for q in ("fp16", "int8", "int8-full")}


def _on_device(model: torch.nn.Module, args: tuple, mode: str) -> dict:
    import tpu_runtime

    ref = copy.deepcopy(model).train()
    dev = copy.deepcopy(ref).to("tpu")
    run = dev
    if mode == "compile":
        torch._dynamo.reset()
        run = torch.compile(dev, backend="tpu")
    want = ref(*args)
    weights = torch.randn(want.shape, generator=torch.Generator().manual_seed(2))
    (want.float() * weights).sum().backward()
    options = dict(compare_cpu=True, check_nan=False, raise_on_error=False) if mode == "debug" else {}
    with tpu_runtime.set_eager_mode("strict" if mode == "compile" else mode, **options):
        got = run(*[a.to("tpu") for a in args])
        (got.float() * weights.to("tpu")).sum().backward()
        report = tpu_runtime.eager.REPORT
        if mode == "debug" and report.findings:
            return {mode: f"fail: {report.first} ({len(report.findings)} flagged of {report.compared} ops compared)"}
    out, grad = _errors(got, dev, want, ref)
    verdict = ""
    if max(out, grad) > 1e-3:  # against float64: is the CPU's float32 as far off (an ill-conditioned model)?
        half = next(model.parameters()).dtype != torch.float32
        wide = torch.float32 if half else torch.float64  # (half types: float32, which every family's code takes)
        exact = copy.deepcopy(ref).to(wide)
        for p in exact.parameters():
            p.grad = None
        exact_out = exact(*[a.to(wide) if a.is_floating_point() else a for a in args])
        (exact_out * weights.to(wide)).sum().backward()
        tpu, cpu = _errors(got, dev, exact_out, exact), _errors(want, ref, exact_out, exact)
        nudged = _nudged_cpu_error(model, args, weights, exact_out, exact)
        verdict = ("as the CPU " if half else "ill-conditioned ") if max(tpu) <= 2 * max(max(cpu), nudged) else "BAD "
        verdict += f"(vs {str(wide)[6:]}: tpu {max(tpu):.1e}, cpu {max(cpu):.1e}, cpu nudged {nudged:.1e}) "
    compared = f", {report.compared} ops compared" if mode == "debug" else ""
    return {mode: verdict + f"out {out:.1e} grad {grad:.1e}{compared}"}


def _nudged_cpu_error(model: torch.nn.Module, args: tuple, weights: torch.Tensor, exact_out: torch.Tensor,
                      exact: torch.nn.Module) -> float:
    """The CPU's float32 error against float64 after nudging every weight by a random relative 2**-24 (half a
    float32 unit: what rounding the weights to float32 may already do): how far float32 noise alone carries this
    model, whatever order its sums run in."""
    nudged = copy.deepcopy(model).train()
    g = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for p in nudged.parameters():
            if p.is_floating_point():
                p.mul_(1 + torch.randn(p.shape, generator=g).sign() * 2.0 ** -24)
    out = nudged(*args)
    (out.float() * weights).sum().backward()
    return max(_errors(out, nudged, exact_out, exact))


def _errors(got: torch.Tensor, model: torch.nn.Module, want: torch.Tensor, ref: torch.nn.Module) -> tuple:
    """Output error relative to the largest output, largest gradient error relative to the largest gradient."""
    top = max(q.grad.abs().max().item() for q in ref.parameters() if q.grad is not None)
    grad = max((p.grad.cpu().double() - q.grad.double()).abs().max().item() / top
               for p, q in zip(model.parameters(), ref.parameters()) if q.grad is not None)
    return _relative(got.detach().cpu(), want.detach()), grad


def run_check(family: str, check: str, dtype: str = "float32") -> dict:
    """One check of one family in this process: what :data:`CHECKS` describes, as a dict (``dtype``: the eager
    checks' floating dtype)."""
    import transformers

    transformers.logging.set_verbosity_error()
    model, args, kind = build(family)
    if dtype != "float32":
        if check in ("export", "dynamic", "quant"):
            return {"family": family, "check": check, "skip": f"the export checks run float32, not {dtype}"}
        dt = getattr(torch, dtype)
        model, args = model.to(dt), tuple(a.to(dt) if a.is_floating_point() else a for a in args)
    start = time.perf_counter()
    try:
        if check == "export":
            result = _validated(model, args)
        elif check == "dynamic":
            result = _dynamic(model, args, kind, torch.Generator().manual_seed(3))
        elif check == "decode":
            result = _decode(model, args, kind)
        elif check == "quant":
            result = _quantized(model, args)
        else:
            result = _on_device(model, args, check)
    except Exception as e:  # the sweep reports every failure and goes on
        result = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"}
    return {"family": family, "check": check, "seconds": round(time.perf_counter() - start, 1), **result}


def main(argv: list[str] | None = None) -> int:
    """Run the sweep (each family and check in a subprocess); print one JSON line each, then a summary."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--families", default=",".join(FAMILIES), help="comma-separated model types")
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per family and check")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"),
                        help="the eager checks' floating dtype")
    parser.add_argument("--one", nargs=2, metavar=("FAMILY", "CHECK"), help=argparse.SUPPRESS)
    opts = parser.parse_args(argv)
    if opts.one:
        print(json.dumps(run_check(*opts.one, opts.dtype)))
        return 0
    failed = []
    for check in opts.checks.split(","):
        for family in opts.families.split(","):
            try:
                proc = subprocess.run([sys.executable, __file__, "--one", family, check, "--dtype", opts.dtype],
                                      capture_output=True, text=True, timeout=opts.timeout, cwd=ROOT)
                lines = proc.stdout.strip().splitlines()
                row = json.loads(lines[-1]) if lines and lines[-1].startswith("{") else \
                    {"family": family, "check": check, "error": (proc.stderr.strip().splitlines() or ["?"])[-1][:300]}
            except subprocess.TimeoutExpired:
                row = {"family": family, "check": check, "error": f"timed out after {opts.timeout:.0f} s"}
            print(json.dumps(row), flush=True)
            values = [v for k, v in row.items() if k not in ("family", "check", "seconds")]
            if "error" in row or any(isinstance(v, str) and (v.startswith(("BAD", "fail", "error"))) for v in values):
                failed.append(f"{family}/{check}")
    print(f"not passing: {', '.join(failed) or 'none'}")
    return 0


if __name__ == "__main__":
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    sys.exit(main())
