"""Capture: torch.export → core ATen, keeping a declared list of high-level ops whole."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.export import ExportedProgram

from converter.errors import CaptureError, InputError

aten = torch.ops.aten

#: High-level ops that targets map better whole (TFLite builtins, Pallas kernels).
#: They are kept out of the decomposition table and lowered as composites.
PRESERVED_OPS: tuple = (
    aten.scaled_dot_product_attention.default,
    aten.layer_norm.default,
    aten.rms_norm.default,
    aten.group_norm.default,
    aten.linear.default,
    aten.gelu.default,
    aten.silu.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.mish.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten._softmax.default,
    aten._log_softmax.default,
    aten.pixel_shuffle.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_bilinear2d.vec,
    aten.embedding.default,
    aten.embedding_bag.padding_idx,
    aten._embedding_bag.default,
)


@functools.lru_cache(maxsize=1)
def _base_table() -> Any:
    table = torch.export.default_decompositions()
    for op in PRESERVED_OPS:
        if op in table:
            table.pop(op)
    return table


def decomposition_table() -> Any:
    """torch.export's default core-ATen decompositions minus :data:`PRESERVED_OPS`.

    Building the table costs ~0.2 s, so it is built once and copied per capture.
    """
    return _base_table().copy()


def capture(model: torch.nn.Module, sample_args: tuple, sample_kwargs: dict | None = None,
            dynamic_shapes: Any = None, *, strict: bool = False, decompose: bool = True) -> ExportedProgram:
    """Capture ``model`` with torch.export and decompose it to core ATen.

    Args:
        model: the module to capture (its train/eval mode is respected).
        sample_args: positional sample inputs.
        sample_kwargs: keyword sample inputs.
        dynamic_shapes: torch.export ``dynamic_shapes`` (e.g. ``{"x": {0: Dim("b")}}``).
        strict: use torch.export's strict (TorchDynamo) tracing.
        decompose: run the core-ATen decomposition with the preserve-list.

    Returns:
        The ExportedProgram.

    Raises:
        InputError: ``model`` is not a module or the inputs are not a tuple.
        CaptureError: torch.export failed; the message keeps torch's explanation.
    """
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    if not isinstance(sample_args, (tuple, list)):
        raise InputError(f"sample_args must be a tuple of inputs, got {type(sample_args).__name__}")
    try:
        ep = torch.export.export(model, tuple(sample_args), sample_kwargs or None,
                                 dynamic_shapes=dynamic_shapes, strict=strict)
        if decompose:
            ep = ep.run_decompositions(decomposition_table())
    except Exception as e:  # torch.export raises many types; keep its message, one line first
        first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise CaptureError(f"torch.export failed on {type(model).__name__}: {first}") from e
    return ep
