"""``convert()``: one PyTorch model in, one target artifact out."""

from __future__ import annotations

import importlib
from typing import Any

import torch

from converter.capture import capture
from converter.errors import InputError
from converter.lowering import LoweredProgram, lower
from converter.passes import run_passes

#: target name → "module:function" building the artifact from a LoweredProgram.
TARGETS: dict[str, str] = {
    "tpu": "tpu_runtime.module:build",
    "stablehlo": "exporters.stablehlo:build",
    "litert": "exporters.litert:build",
    "onnx": "exporters.onnx:build",
}


def convert(model: torch.nn.Module, sample_args: Any = (), sample_kwargs: dict | None = None, *,
            target: str = "tpu", dynamic_shapes: Any = None, strict: bool = False, **options: Any) -> Any:
    """Convert a PyTorch model for one target.

    Args:
        model: the ``nn.Module``; its ``training`` flag decides inference vs training
            semantics (weight folding runs only for inference).
        sample_args: positional sample inputs (a tensor or a tuple).
        sample_kwargs: keyword sample inputs.
        target: "tpu" (a callable compiled with jax.jit), "stablehlo", "litert" or "onnx".
        dynamic_shapes: torch.export ``dynamic_shapes``; dynamic dims stay dynamic in
            every target that supports it.
        strict: use torch.export's strict tracing.
        **options: target options (e.g. ``channels_last_io`` for LiteRT).

    Returns:
        The target's artifact: ``TpuModule`` for "tpu", ``StableHLOArtifact`` for
        "stablehlo", ``LiteRTArtifact`` for "litert".

    Raises:
        InputError: unknown target or bad inputs.
        CaptureError: torch.export failed.
        UnsupportedOpError: an op has no lowering for the target.
    """
    builder = target_builder(target)
    program = prepare(model, sample_args, sample_kwargs, target=target, dynamic_shapes=dynamic_shapes,
                      strict=strict, **options)
    return builder(program, **options)


def prepare(model: torch.nn.Module, sample_args: Any = (), sample_kwargs: dict | None = None, *,
            target: str = "tpu", dynamic_shapes: Any = None, strict: bool = False, **options: Any) -> LoweredProgram:
    """Capture, run the shared passes and lower: the program every target builder starts from.

    Args and raises as :func:`convert`; returns the :class:`LoweredProgram`, which
    several targets can be built from without capturing again.
    """
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    ep = capture(model, tuple(sample_args), sample_kwargs, dynamic_shapes, strict=strict)
    ep, _ = run_passes(ep, inference=not model.training)
    return lower(ep, target=target, options=options)


def target_builder(target: str) -> Any:
    """The builder function of ``target`` (raises InputError when unknown or not installed)."""
    if target not in TARGETS:
        raise InputError(f"unknown target '{target}'; choose one of: {', '.join(TARGETS)}")
    module, func = TARGETS[target].split(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise InputError(f"target '{target}' is not available in this installation: {e}") from e
