"""``convert()``: one PyTorch model in, one target artifact out."""

from __future__ import annotations

import importlib
from typing import Any

import torch
from torch.export import ExportedProgram

from converter.capture import capture
from converter.errors import InputError
from converter.exported import is_exported, prepared
from converter.lowering import LoweredProgram, lower
from converter.passes import run_passes

#: target name → "module:function" building the artifact from a LoweredProgram.
TARGETS: dict[str, str] = {
    "tpu": "tpu_runtime.module:build",
    "stablehlo": "exporters.stablehlo:build",
    "litert": "exporters.litert:build",
    "onnx": "exporters.onnx:build",
}


def convert(model: torch.nn.Module | ExportedProgram, sample_args: Any = (), sample_kwargs: dict | None = None, *,
            target: str = "tpu", dynamic_shapes: Any = None, strict: bool = False, **options: Any) -> Any:
    """Convert a PyTorch model for one target.

    Args:
        model: the ``nn.Module``; its ``training`` flag decides inference vs training
            semantics (weight folding runs only for inference). Or a ``torch.export.ExportedProgram``
            (:mod:`converter.exported`: its sample inputs default to those it was exported with, and its
            dynamic dims are its own).
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
    target_builder(target)  # an unknown target fails before the capture
    return build(capture_program(model, sample_args, sample_kwargs, dynamic_shapes=dynamic_shapes, strict=strict),
                 target=target, **options)


def capture_program(model: torch.nn.Module | ExportedProgram, sample_args: Any = (),
                    sample_kwargs: dict | None = None, *,
                    dynamic_shapes: Any = None, strict: bool = False) -> ExportedProgram:
    """Capture ``model`` and run the shared passes: the part of :func:`convert` every target shares.

    :func:`build` makes any target's artifact from the result, so several targets cost one capture
    (torch.export is most of a small model's conversion time)::

        program = capture_program(model, (x,))
        tflite, onnx = build(program, target="litert"), build(program, target="onnx")

    Args and raises as :func:`convert` (less ``target`` and its options); the model's ``training`` flag
    decides inference vs training passes here.
    """
    if is_exported(model):
        ep, inference = prepared(model, sample_args, sample_kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
        return run_passes(ep, inference=inference)[0]
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    ep = capture(model, tuple(sample_args), sample_kwargs, dynamic_shapes, strict=strict)
    return run_passes(ep, inference=not model.training)[0]


def build(program: ExportedProgram, target: str = "tpu", **options: Any) -> Any:
    """The ``target`` artifact of a :func:`capture_program` result: :func:`convert` without the capture.

    Args:
        program: what :func:`capture_program` returned (not changed: build as many targets from it as needed).
        target: as :func:`convert`.
        **options: target options, as :func:`convert`.

    Raises:
        InputError: unknown target.
        UnsupportedOpError: an op has no lowering for the target.
    """
    builder = target_builder(target)
    return builder(lower(program, target=target, options=options), **options)


def prepare(model: torch.nn.Module | ExportedProgram, sample_args: Any = (), sample_kwargs: dict | None = None, *,
            target: str = "tpu", dynamic_shapes: Any = None, strict: bool = False, **options: Any) -> LoweredProgram:
    """Capture, run the shared passes and lower for ``target``: the program its builder starts from.

    Args and raises as :func:`convert`; returns the :class:`LoweredProgram` (the LiteRT quantizer and the
    tests read it).
    """
    program = capture_program(model, sample_args, sample_kwargs, dynamic_shapes=dynamic_shapes, strict=strict)
    return lower(program, target=target, options=options)


def convert_signatures(models: dict, *, strict: bool = False, **options: Any) -> Any:
    """One LiteRT file with a signature per entry of ``models`` (``{name: (model, args[, kwargs])}``, each model a
    module or an ``ExportedProgram``): a language model's ``prefill`` and ``decode``, the weights they share stored
    once. ``options`` as :func:`convert` takes them for ``target="litert"`` (``quantize=``…).

    Raises:
        InputError: an entry that is not ``(model, args[, kwargs])``; as :func:`convert` otherwise.
    """
    from exporters.litert import build as build_litert

    lowered = {}
    for name, entry in models.items():
        if not isinstance(entry, tuple) or len(entry) not in (2, 3):
            raise InputError(f"signature {name!r}: expected (model, args) or (model, args, kwargs)")
        model, args, kwargs = entry if len(entry) == 3 else (*entry, None)
        lowered[name] = prepare(model, args, kwargs, target="litert", strict=strict, **options)
    return build_litert(signatures=lowered, **options)


def target_builder(target: str) -> Any:
    """The builder function of ``target`` (raises InputError when unknown or not installed)."""
    if target not in TARGETS:
        raise InputError(f"unknown target '{target}'; choose one of: {', '.join(TARGETS)}")
    module, func = TARGETS[target].split(":")
    try:
        return getattr(importlib.import_module(module), func)
    except (ImportError, AttributeError) as e:
        raise InputError(f"target '{target}' is not available in this installation: {e}") from e
