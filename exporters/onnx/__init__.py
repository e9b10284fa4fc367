"""ONNX exporter: jaxpr → ONNX graph (``onnx`` protobufs), run with ONNX Runtime.

Pipeline: ``jax.make_jaxpr(program.closed())`` (int64 enabled, symbolic shapes for
dynamic dims, :mod:`exporters.jaxpr_trace`) → :mod:`.export` walks the jaxpr with
the walker shared with LiteRT (:mod:`exporters.jaxpr_walk`) and the rule tables in
:mod:`.rules` (composites ``aten.*`` map to ONNX operators such as Gelu,
LayerNormalization, Softmax, Resize; everything else lowers through lax
primitives) → ``onnx.checker`` → serialized bytes.

Opset 20 (ONNX IR 10), the default domain only; ONNX Runtime 1.32 runs it on its
CPU execution provider. Inputs are named ``args_0…`` and outputs ``output_0…``;
weights are initializers, identical constants stored once; node and tensor
names come from counters, so the same model and inputs give byte-identical files.

Dynamic dims: ``str`` dims of ``program.inputs`` (from torch.export
``dynamic_shapes``) are traced as ``jax.export`` symbolic dims, appear as
``dim_param`` names in the input shapes, and shapes computed from them (Reshape,
Expand, Range) read them with ``Shape`` at run time, so the model runs at other
sizes in ONNX Runtime; the sizes each was declared for, and the model's keyword arguments, are kept in the
``metadata_props`` entry ``tpu_export.call_inputs`` (:mod:`converter.call_inputs`), which a reloaded file checks.

Dtypes: int64 stays int64; float64 computes as float32 (the artifact casts outputs
back to the program's dtypes); complex values are refused (``UnsupportedOpError``).
"""

from __future__ import annotations

import json
from typing import Any

from converter.call_inputs import METADATA_NAME, CallInputs
from converter.lowering.context import check_options
from converter.lowering.stateful import StateCarrier, stateful_program
from converter.lowering.stateful import note as state_note
from exporters.onnx.artifact import OnnxArtifact
from exporters.onnx.export import OPSET, build_model

__all__ = ["OPSET", "OnnxArtifact", "build"]

_OPTIONS = {"description"}


def build(program: Any, *, num_threads: int = 2, **options: Any) -> OnnxArtifact:
    """Export a lowered program to an ONNX model.

    Args:
        program: a ``converter.lowering.interpreter.LoweredProgram``.
        num_threads: ONNX Runtime intra-op threads for ``OnnxArtifact.__call__``.
        **options: ``description`` (the model's doc string); the lowering's options
            (:data:`~converter.lowering.LOWERING_OPTIONS`) are accepted and ignored here.

    Returns:
        The :class:`OnnxArtifact`.

    Raises:
        UnsupportedOpError: an op has no ONNX mapping (names the op and source line).
        ExportError: the export failed for another reason.
        InputError: unknown options.
    """
    check_options("ONNX", options, _OPTIONS | {"num_threads"})
    notes: list[str] = []
    call_inputs, carried = CallInputs.of(program), None
    if getattr(program, "mutated_buffers", None):  # buffers written in place: carried inputs and outputs
        program = stateful_program(program)
        notes.append(state_note(program.carried))
        carried = (program.carried, StateCarrier(program.initial))
    model, out_dtypes = build_model(program, notes, description=options.get("description", "tpu-export"))
    if call_inputs.worth_saving:  # (for a reloaded file)
        model.metadata_props.add(key=METADATA_NAME, value=json.dumps(call_inputs.to_json(), sort_keys=True))
    data = model.SerializeToString(deterministic=True)
    return OnnxArtifact(data, notes=notes, num_threads=num_threads, output_dtypes=out_dtypes,
                        call_inputs=call_inputs, carried=carried)
