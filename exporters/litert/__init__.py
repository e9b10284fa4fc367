"""LiteRT (TFLite) exporter: jaxpr → TFLite builtin ops → flatbuffer, our own writer.

Pipeline: ``jax.make_jaxpr(program.closed())`` (int64 enabled, symbolic shapes for
dynamic dims, :mod:`exporters.jaxpr_trace`) → :mod:`.translate` walks the jaxpr
with the walker shared with ONNX (:mod:`exporters.jaxpr_walk`) and the rule tables
in :mod:`.rules` (composites ``aten.*`` map to builtins such as GELU or
FULLY_CONNECTED, everything else lowers through lax primitives) → :mod:`.optimize`
fuses bias/BatchNorm/activations → :mod:`.builder` writes the flatbuffer.

Layout: values carry a lazy layout (:mod:`.emitter`): convolutions and pools
compute NHWC, elementwise ops, reductions, pads, slices, concatenations and
reshapes that keep dim groups follow their inputs' layout, and a jaxpr transpose
emits nothing. A TRANSPOSE appears only where a layout-sensitive consumer needs
the logical order, so a CNN has one at its NCHW input (none with
``channels_last_io=True``) and none between layers.

Signatures: one program gives the ``serving_default`` signature with inputs
``args_0…`` and outputs ``output_0…`` (the litert-torch convention). Several
programs (e.g. ``signatures={"prefill": p1, "decode": p2}``) give one subgraph
each in one file; identical weights are stored once.

Dynamic dims: ``str`` dims of ``program.inputs`` are traced as ``jax.export``
symbolic dims (with torch.export's range constraints) and get shape signature -1;
RESHAPE uses -1 or a SHAPE-derived shape tensor, so the model runs after
``resize_tensor_input`` (the artifact's signature runner resizes for you).

Integer policy: int64 stays int64 (TFLite has int64 kernels for ADD/SUB/MUL,
comparisons, GATHER, CUMSUM, CAST, …); DIV/ABS/SIGN/POW compute in int32 between
CASTs and TOPK_V2 indices are int32 cast back. float64, bfloat16 and float16 run as float32. Integer
``&``/``|``/``^`` are exact at every width: TFLite has BITWISE_XOR and RIGHT_SHIFT
but no AND/OR, so AND/OR are built from them with ADD/SUB/MUL on int32 words
(int64 values BITCAST to pairs of words); bool and/or are LOGICAL_AND/OR.

Convolutions: 1-D/2-D → CONV_2D / DEPTHWISE_CONV_2D (grouped: SPLIT + one CONV_2D
per group); transposed (also grouped or with kernel dilation) → TRANSPOSE_CONV;
3-D → CONV_3D on NDHWC values with DHWIO filters. Reflection / replication pads
(kept whole by capture) → SLICE + CONCATENATION, which XNNPACK runs (MIRROR_PAD
splits the delegated partition and measured slower; see ``rules.composites``).

Quantization (``quantize=``, :mod:`.quantize`): ``"fp16"`` stores float32 constants
as float16 read through DEQUANTIZE (file ≈ 0.5×, compute stays float32);
``"int8"`` is dynamic-range quantization — FULLY_CONNECTED / CONV_2D / BATCH_MATMUL
weights int8 with per-output-channel symmetric scales, activations float32 (hybrid
kernels; file ≈ 0.3×); ``"int8-full"`` computes on int8 with activation ranges calibrated
on ``calibration=`` input sets (:mod:`.calibrate`, :mod:`.quantize_full`; ``int8_io=True``: int8 inputs and
outputs too). The artifact's ``precision`` says which ("fp32", "fp16", "int8"), and
``validators`` judge low precision by task-level agreement.

Large models: constants above ``external_buffer_threshold_bytes`` (default just
under 2 GiB) are written after the flatbuffer with ``Buffer.offset``/``size``.
"""

from __future__ import annotations

import json
from typing import Any, Mapping

import numpy as np

from converter.call_inputs import METADATA_NAME, CallInputs
from converter.errors import InputError
from converter.lowering.context import check_options
from converter.lowering.stateful import StateCarrier, stateful_program
from converter.lowering.stateful import note as state_note
from exporters.litert.artifact import LiteRTArtifact
from exporters.litert.builder import serialize
from exporters.litert.export import lower_program
from exporters.litert.inspect import inspect_file
from exporters.litert.quantize import check_mode, quantize_graphs
from exporters.litert.calibrate import full_integer

__all__ = ["LiteRTArtifact", "build", "inspect_file"]

_INT64_NOTE = ("int64 tensors stay int64 (inputs such as token ids keep torch's dtype); ops without an "
               "int64 kernel (DIV, FLOOR_DIV, POW, TOPK_V2 indices) compute in int32 between CASTs")
_OPTIONS = {"external_buffer_threshold_bytes", "description", "quantize", "calibration", "int8_io"}


def build(program: Any = None, *, signatures: Mapping[str, Any] | None = None, channels_last_io: bool = False,
          num_threads: int = 2, **options: Any) -> LiteRTArtifact:
    """Export lowered program(s) to a LiteRT flatbuffer.

    Args:
        program: a ``converter.lowering.interpreter.LoweredProgram``; it becomes the
            ``serving_default`` signature. May be ``None`` when ``signatures`` is given.
        signatures: more named signatures ``{key: LoweredProgram}`` in the same file,
            sharing identical weights (e.g. ``{"prefill": a, "decode": b}``).
        channels_last_io: rank-4 inputs/outputs are NHWC in the file (no TRANSPOSE at
            the model boundary); the artifact's ``__call__`` still takes NCHW.
        num_threads: Interpreter threads for ``LiteRTArtifact.__call__``.
        **options: ``external_buffer_threshold_bytes`` (write constants after the
            flatbuffer when their total size exceeds this; default just under 2 GiB),
            ``description`` (model description string), ``quantize`` (``"fp16"``: float16
            weights read through DEQUANTIZE; ``"int8"``: dynamic-range int8 weights of
            FULLY_CONNECTED / CONV_2D / BATCH_MATMUL with per-channel scales; ``"int8-full"``:
            int8 compute, see :mod:`.quantize_full`; ``None`` or ``"fp32"``: float32, the
            default — see :mod:`.quantize`), ``calibration`` (``"int8-full"``: the input sets
            whose activation ranges it takes, each a tuple of the model's inputs; default: the
            sample inputs), ``int8_io`` (``"int8-full"``: int8 inputs and outputs).

    Returns:
        The :class:`LiteRTArtifact`.

    Raises:
        UnsupportedOpError: an op has no TFLite mapping (names the op and source line).
        ExportError: the export failed for another reason.
        InputError: bad arguments (e.g. an unknown ``quantize`` mode).
    """
    quantize = check_mode(options.get("quantize"))
    programs: dict[str, Any] = {}
    if program is not None:
        programs["serving_default"] = program
    for key, prog in (signatures or {}).items():
        if not isinstance(key, str) or not key:
            raise InputError(f"signature names must be non-empty strings, got {key!r}")
        if key in programs:
            raise InputError(f"signature {key!r} given twice")
        programs[key] = prog
    if not programs:
        raise InputError("build() needs a program or a signatures mapping")
    check_options("LiteRT", options, _OPTIONS | {"signatures", "channels_last_io", "num_threads"})
    notes: list[str] = []
    call_inputs = {k: CallInputs.of(p) for k, p in programs.items()}
    carried, carrier = {}, StateCarrier({})
    for key, prog in list(programs.items()):
        if getattr(prog, "mutated_buffers", None):  # buffers written in place: carried inputs and outputs
            programs[key] = prog = stateful_program(prog)
            carried[key] = prog.carried
            carrier.add({n: v.transpose(0, 2, 3, 1) if channels_last_io and np.ndim(v) == 4 else v
                         for n, v in prog.initial.items()})  # (in the file's layout; signatures of one model share
            # them: one KV cache)
    if carried:
        notes.append(state_note(sorted({n for names in carried.values() for n in names})))
    graphs = [lower_program(p, key, channels_last_io=channels_last_io, notes=notes, options=options)
              for key, p in programs.items()]
    if any(t.dtype.name == "int64" for g in graphs for t in g.tensors()):
        notes.insert(0, _INT64_NOTE)
    if channels_last_io:
        notes.append("channels_last_io: rank-4 inputs and outputs are NHWC in the file")
    if quantize == "int8-full":
        full_integer(graphs, programs, call_inputs, options.get("calibration"), channels_last_io=channels_last_io,
                     stateful=bool(carried), notes=notes, int8_io=bool(options.get("int8_io")))
    elif options.get("calibration") is not None or options.get("int8_io"):
        raise InputError("calibration= and int8_io= are options of quantize='int8-full' only")
    elif quantize is not None:
        quantize_graphs(graphs, quantize, notes)
    saved = {k: c.to_json() for k, c in call_inputs.items() if c.worth_saving}
    data = serialize(graphs, description=options.get("description", "tpu-export"),
                     external_buffer_threshold_bytes=options.get("external_buffer_threshold_bytes"),
                     metadata={METADATA_NAME: json.dumps(saved, sort_keys=True).encode()} if saved else None)
    if len(data) > 2**31 and options.get("external_buffer_threshold_bytes") is None:
        notes.append("weights are stored after the flatbuffer (Buffer.offset/size): the model exceeds 2 GB")
    return LiteRTArtifact(data, notes=notes, num_threads=num_threads, channels_last_io=channels_last_io,
                          precision={None: "fp32", "int8-full": "int8"}.get(quantize, quantize),
                          call_inputs=call_inputs,
                          carried=(carried, carrier) if carried else None)
