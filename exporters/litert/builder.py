"""Serialize :mod:`.ir` graphs into a TFLite flatbuffer with the official schema.

Uses the object API of ``ai_edge_litert.schema_py_generated`` (ModelT, SubGraphT,
…) and ``flatbuffers.Builder``; no hand-written schema. Properties:

* constant buffers are deduplicated by content across all subgraphs, so several
  signatures of one model store each weight once;
* buffer data is 16-byte aligned (what XNNPACK and mmap loaders expect);
* when the constants exceed ``external_buffer_threshold_bytes`` they are written
  after the flatbuffer and referenced with ``Buffer.offset``/``Buffer.size`` (the
  LiteRT layout for models over 2 GB);
* the output depends only on the graphs: same graphs, same bytes;
* where a signature's outputs are declared with a wider dtype than the file computes
  (float64 runs as float32), the metadata entry :data:`OUTPUT_DTYPES_METADATA` maps each
  signature key to its outputs' declared dtype names (JSON), so a loaded artifact casts
  results back like the one ``build`` returned.
"""

from __future__ import annotations

import hashlib
import json

import flatbuffers
import numpy as np
from ai_edge_litert import schema_py_generated as schema

from converter.errors import ExportError
from exporters.litert.ir import Graph, Op, Tensor
from exporters.litert.loops import called_graphs

#: Model metadata name of the declared output dtypes ``{signature key: [dtype name, …]}`` (JSON).
OUTPUT_DTYPES_METADATA = "tpu_export.output_dtypes"
#: Flatbuffers cannot address more than 2 GiB; leave room for the graph itself.
DEFAULT_EXTERNAL_THRESHOLD = 2**31 - 2**26
_ALIGN = 16

TFLITE_TYPES = {
    np.dtype(np.float32): schema.TensorType.FLOAT32,
    np.dtype(np.float16): schema.TensorType.FLOAT16,
    np.dtype(np.float64): schema.TensorType.FLOAT64,
    np.dtype(np.int8): schema.TensorType.INT8,
    np.dtype(np.uint8): schema.TensorType.UINT8,
    np.dtype(np.int16): schema.TensorType.INT16,
    np.dtype(np.int32): schema.TensorType.INT32,
    np.dtype(np.uint32): schema.TensorType.UINT32,
    np.dtype(np.int64): schema.TensorType.INT64,
    np.dtype(np.bool_): schema.TensorType.BOOL,
}

#: Builtin options table per operator (the union member name, without ``T``).
OPTIONS = {
    "ADD": "AddOptions", "SUB": "SubOptions", "MUL": "MulOptions", "DIV": "DivOptions",
    "MAXIMUM": "MaximumMinimumOptions", "MINIMUM": "MaximumMinimumOptions", "POW": "PowOptions",
    "SQUARED_DIFFERENCE": "SquaredDifferenceOptions", "FLOOR_DIV": "FloorDivOptions",
    "FLOOR_MOD": "FloorModOptions", "ABS": "AbsOptions", "NEG": "NegOptions", "EXP": "ExpOptions",
    "SQUARE": "SquareOptions", "SIGN": "SignOptions", "COS": None, "SIN": None,
    "EQUAL": "EqualOptions", "NOT_EQUAL": "NotEqualOptions", "LESS": "LessOptions",
    "LESS_EQUAL": "LessEqualOptions", "GREATER": "GreaterOptions", "GREATER_EQUAL": "GreaterEqualOptions",
    "LOGICAL_AND": "LogicalAndOptions", "LOGICAL_OR": "LogicalOrOptions", "LOGICAL_NOT": "LogicalNotOptions",
    "SELECT_V2": "SelectV2Options", "CAST": "CastOptions", "FULLY_CONNECTED": "FullyConnectedOptions",
    "BATCH_MATMUL": "BatchMatMulOptions", "CONV_2D": "Conv2DOptions",
    "DEPTHWISE_CONV_2D": "DepthwiseConv2DOptions", "TRANSPOSE_CONV": "TransposeConvOptions",
    "MAX_POOL_2D": "Pool2DOptions", "AVERAGE_POOL_2D": "Pool2DOptions", "SUM": "ReducerOptions",
    "MEAN": "ReducerOptions", "REDUCE_MAX": "ReducerOptions", "REDUCE_MIN": "ReducerOptions",
    "REDUCE_PROD": "ReducerOptions", "REDUCE_ANY": "ReducerOptions", "REDUCE_ALL": "ReducerOptions",
    "ARG_MAX": "ArgMaxOptions", "ARG_MIN": "ArgMinOptions", "RESHAPE": "ReshapeOptions",
    "TRANSPOSE": "TransposeOptions", "CONCATENATION": "ConcatenationOptions", "SLICE": "SliceOptions",
    "STRIDED_SLICE": "StridedSliceOptions", "PAD": "PadOptions", "PADV2": "PadV2Options",
    "MIRROR_PAD": "MirrorPadOptions", "GATHER": "GatherOptions", "GATHER_ND": "GatherNdOptions",
    "SCATTER_ND": "ScatterNdOptions", "CUMSUM": "CumsumOptions", "TOPK_V2": "TopKV2Options",
    "SOFTMAX": "SoftmaxOptions", "LOG_SOFTMAX": "LogSoftmaxOptions", "GELU": "GeluOptions",
    "HARD_SWISH": "HardSwishOptions", "LEAKY_RELU": "LeakyReluOptions",
    "RESIZE_BILINEAR": "ResizeBilinearOptions", "RESIZE_NEAREST_NEIGHBOR": "ResizeNearestNeighborOptions",
    "BROADCAST_TO": "BroadcastToOptions", "SHAPE": "ShapeOptions", "RANGE": "RangeOptions",
    "SQUEEZE": "SqueezeOptions", "EXPAND_DIMS": "ExpandDimsOptions", "TILE": "TileOptions",
    "REVERSE_V2": "ReverseV2Options", "DYNAMIC_UPDATE_SLICE": "DynamicUpdateSliceOptions",
    "SPLIT": "SplitOptions", "PACK": "PackOptions", "UNPACK": "UnpackOptions", "FILL": "FillOptions",
    "DEPTH_TO_SPACE": "DepthToSpaceOptions", "ZEROS_LIKE": "ZerosLikeOptions", "WHERE": "WhereOptions",
    "ATAN2": "ATan2Options", "BITWISE_XOR": "BitwiseXorOptions", "RIGHT_SHIFT": "RightShiftOptions",
    "WHILE": "WhileOptions",
}


#: Operators whose lowest registered kernel version is above 1 (the resolver refuses v1).
_MIN_VERSION = {"BROADCAST_TO": 2}


class _AlignedBufferT(schema.BufferT):
    """A BufferT whose data vector starts on a 16-byte boundary."""

    def Pack(self, builder: flatbuffers.Builder) -> int:  # noqa: N802 (schema API name)
        data = None
        if self.data is not None:
            payload = self.data
            builder.StartVector(1, len(payload), _ALIGN)
            builder.head -= len(payload)
            builder.Bytes[builder.head:builder.head + len(payload)] = payload
            builder.vectorNumElems = len(payload)
            data = builder.EndVector()
        schema.BufferStart(builder)
        if data is not None:
            schema.BufferAddData(builder, data)
        if self.offset:
            schema.BufferAddOffset(builder, self.offset)
            schema.BufferAddSize(builder, self.size)
        return schema.BufferEnd(builder)


_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}


def op_code_value(code: str) -> int:
    """The ``BuiltinOperator`` enum value of an operator name."""
    try:
        return getattr(schema.BuiltinOperator, code)
    except AttributeError:
        raise ExportError(f"unknown TFLite builtin operator {code}") from None


def _options(op: Op, number: dict):
    """The ``(BuiltinOptions type, <Name>OptionsT)`` of an operator (``NONE`` when it takes none); a
    subgraph named in the options (a loop's body) is its index in ``number``."""
    name = op.options_type or OPTIONS.get(op.code)
    if name is None:
        if op.options:
            raise ExportError(f"{op.code} takes no builtin options, got {op.options}")
        return schema.BuiltinOptions.NONE, None
    obj = getattr(schema, name + "T")()
    for key, value in op.options.items():
        if not hasattr(obj, key):
            raise ExportError(f"{name} has no field {key!r}")
        setattr(obj, key, number[value] if isinstance(value, Graph) else value)
    return getattr(schema.BuiltinOptions, name), obj


def serialize(graphs: list[Graph], *, description: str = "tpu-export",
              external_buffer_threshold_bytes: int | None = None, metadata: dict[str, bytes] | None = None) -> bytes:
    """Write ``graphs`` (one per signature) as one TFLite model.

    Args:
        graphs: subgraphs in signature order; their input/output names become the
            signature's ``TensorMap`` names. The subgraphs their loops call follow them.
        description: the model description string.
        external_buffer_threshold_bytes: put constants after the flatbuffer when
            their total size exceeds this (default: just under 2 GiB).
        metadata: more metadata entries ``{name: bytes}`` (each signature's call inputs: ``{signature key:
            CallInputs.to_json()}`` under ``converter.call_inputs.METADATA_NAME``).

    Returns:
        The model file's bytes.
    """
    threshold = DEFAULT_EXTERNAL_THRESHOLD if external_buffer_threshold_bytes is None \
        else external_buffer_threshold_bytes
    payloads: list[bytes] = []
    buffer_of: dict[bytes, int] = {}
    op_codes: list[int] = []
    code_index: dict[int, int] = {}
    model = schema.ModelT()
    model.version = 3
    model.description = description
    model.subgraphs, model.signatureDefs = [], []
    bodies = [sub for g in graphs for sub in called_graphs(g)]
    number = {g: i for i, g in enumerate([*graphs, *dict.fromkeys(bodies)])}
    for gi, graph in enumerate(number):
        tensors = graph.tensors()
        index = {t: i for i, t in enumerate(tensors)}
        sub = schema.SubGraphT()
        sub.name = graph.name
        sub.tensors = [_tensor(t, payloads, buffer_of) for t in tensors]
        sub.inputs = [index[t] for t in graph.inputs]
        sub.outputs = [index[t] for t in graph.outputs]
        sub.operators = []
        for op in graph.ops:
            value = op_code_value(op.code)
            if value not in code_index:
                code_index[value] = len(op_codes)
                op_codes.append(value)
            o = schema.OperatorT()
            o.opcodeIndex = code_index[value]
            o.inputs = [-1 if t is None else index[t] for t in op.inputs]
            o.outputs = [index[t] for t in op.outputs]
            o.builtinOptionsType, o.builtinOptions = _options(op, number)
            sub.operators.append(o)
        model.subgraphs.append(sub)
        if gi >= len(graphs):  # a loop's condition or body: no signature
            continue
        sig = schema.SignatureDefT()
        sig.signatureKey = graph.name
        sig.subgraphIndex = gi
        sig.inputs = [_tensor_map(n, index[t]) for n, t in zip(graph.input_names, graph.inputs)]
        sig.outputs = [_tensor_map(n, index[t]) for n, t in zip(graph.output_names, graph.outputs)]
        model.signatureDefs.append(sig)
    model.operatorCodes = []
    for value in op_codes:
        oc = schema.OperatorCodeT()
        oc.builtinCode = value
        oc.deprecatedBuiltinCode = min(value, schema.BuiltinOperator.PLACEHOLDER_FOR_GREATER_OP_CODES)
        oc.version = _MIN_VERSION.get(_NAMES[value], 1)
        model.operatorCodes.append(oc)
    external = sum(len(p) for p in payloads) > threshold
    # Metadata buffers come after the constants' and always stay inside the flatbuffer.
    meta = _metadata(graphs) + sorted((metadata or {}).items())
    model.metadata = [_metadata_entry(name, len(payloads) + 1 + i) for i, (name, _) in enumerate(meta)] or None
    meta_buffers = [_AlignedBufferT(data=data) for _, data in meta]
    if not external:
        model.buffers = [_AlignedBufferT()] + [_AlignedBufferT(data=p) for p in payloads] + meta_buffers
        return _pack(model)
    # Two passes: offsets are fixed-width fields, so the flatbuffer's size does not
    # depend on their values; pack once to learn it, then with the real offsets.
    model.buffers = [_AlignedBufferT()] + [_AlignedBufferT(offset=2**40, size=len(p)) for p in payloads] \
        + meta_buffers
    head = len(_pack(model))
    offsets, pos = [], _align(head)
    for p in payloads:
        offsets.append(pos)
        pos = _align(pos + len(p))
    for buf, off in zip(model.buffers[1:1 + len(payloads)], offsets):
        buf.offset = off
    flat = _pack(model)
    if len(flat) != head:
        raise ExportError("internal error: flatbuffer size changed between packing passes")
    out = bytearray(pos)
    out[:head] = flat
    for p, off in zip(payloads, offsets):
        out[off:off + len(p)] = p
    return bytes(out)


def _metadata(graphs: list[Graph]) -> list[tuple[str, bytes]]:
    """The model's metadata entries ``(name, bytes)``: the declared output dtypes, when any
    output's differs from its tensor's (see the module docstring)."""
    declared = {g.name: [np.dtype(d).name for d in g.output_dtypes] for g in graphs}
    if not any(np.dtype(d) != np.dtype(t.dtype) for g in graphs for d, t in zip(g.output_dtypes, g.outputs)):
        return []
    return [(OUTPUT_DTYPES_METADATA, json.dumps(declared, sort_keys=True).encode())]


def _metadata_entry(name: str, buffer: int) -> schema.MetadataT:
    """A ``Metadata`` table naming buffer ``buffer``."""
    m = schema.MetadataT()
    m.name, m.buffer = name, buffer
    return m


def _align(n: int) -> int:
    """``n`` rounded up to the buffer alignment."""
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


def _pack(model: schema.ModelT) -> bytes:
    """Serialize a ModelT with the ``TFL3`` file identifier."""
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _tensor_map(name: str, index: int) -> schema.TensorMapT:
    """A signature's ``TensorMap`` entry."""
    m = schema.TensorMapT()
    m.name, m.tensorIndex = name, index
    return m


def _tensor(t: Tensor, payloads: list[bytes], buffer_of: dict[bytes, int]) -> schema.TensorT:
    """A TensorT for ``t``; a constant's bytes go to ``payloads`` (deduplicated through ``buffer_of``)."""
    out = schema.TensorT()
    try:
        out.type = TFLITE_TYPES[np.dtype(t.dtype)]
    except KeyError:
        raise ExportError(f"tensor {t.name}: dtype {np.dtype(t.dtype).name} has no TFLite type") from None
    out.name = t.name
    out.shape = [int(d) for d in t.shape]
    if t.dynamic:
        out.shapeSignature = [int(d) for d in t.signature]
    out.buffer = 0
    if t.quant is not None:
        q = schema.QuantizationParametersT()
        q.scale = [float(v) for v in np.asarray(t.quant.scale, np.float32).reshape(-1)]
        q.zeroPoint = [int(v) for v in np.asarray(t.quant.zero_point).reshape(-1)]
        q.quantizedDimension = int(t.quant.axis)
        out.quantization = q
    if t.data is not None and t.data.size:  # a zero-size constant has no bytes: buffer 0, as TFLite expects
        payload = np.ascontiguousarray(t.data, dtype=t.dtype).tobytes()
        key = hashlib.sha256(payload).digest() + len(payload).to_bytes(8, "little")
        if key not in buffer_of:
            payloads.append(payload)
            buffer_of[key] = len(payloads)
        out.buffer = buffer_of[key]
    return out
