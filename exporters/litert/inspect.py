"""Read and describe .tflite files: signatures, tensors, op histogram, weights vs graph
size, and which ops the XNNPACK delegate leaves to the reference kernels.

``tpu-export inspect model.tflite`` prints :func:`inspect_file`.
"""

from __future__ import annotations

import collections
import json
import os
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from converter.call_inputs import METADATA_NAME, CallInputs
from converter.errors import ExportError

_OP_NAMES = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
_TYPE_NAMES = {v: k.lower() for k, v in vars(schema.TensorType).items() if not k.startswith("_")}


def read_model(data: bytes, what: str = "model") -> dict:
    """Parse a TFLite flatbuffer into plain Python data.

    Raises:
        ExportError: the bytes are not a TFLite model or are corrupt (one line).
    """
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ExportError(f"{what} is not a TFLite model (no 'TFL3' file identifier)")
    try:
        m = schema.Model.GetRootAs(data, 0)
        codes = []
        for i in range(m.OperatorCodesLength()):
            oc = m.OperatorCodes(i)
            codes.append(_OP_NAMES.get(max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode()), f"OP_{oc.BuiltinCode()}"))
        weights = external = 0
        for i in range(m.BuffersLength()):
            b = m.Buffers(i)
            if b.Offset() > 1:
                external += b.Size()
                if b.Offset() + b.Size() > len(data):
                    raise ExportError(f"{what} is corrupt: buffer {i} lies past the end of the file")
            else:
                weights += b.DataLength()
        subgraphs = []
        for s in range(m.SubgraphsLength()):
            sg = m.Subgraphs(s)
            tensors = []
            for t in range(sg.TensorsLength()):
                tt = sg.Tensors(t)
                shape = [int(v) for v in tt.ShapeAsNumpy()] if tt.ShapeLength() else []
                sig = [int(v) for v in tt.ShapeSignatureAsNumpy()] if tt.ShapeSignatureLength() else shape
                q = tt.Quantization()
                scales = q.ScaleLength() if q is not None else 0
                tensors.append({"name": (tt.Name() or b"").decode(), "shape": shape, "signature": sig,
                                "dtype": _TYPE_NAMES.get(tt.Type(), str(tt.Type())), "buffer": tt.Buffer(),
                                "scales": scales,  # (and a per-tensor quantization's parameters: an int8 input's)
                                "quant": (float(q.Scale(0)), int(q.ZeroPoint(0))) if scales == 1
                                and q.ZeroPointLength() == 1 else None})
            ops = []
            for o in range(sg.OperatorsLength()):
                idx = sg.Operators(o).OpcodeIndex()
                if idx >= len(codes):
                    raise ExportError(f"{what} is corrupt: operator {o} uses opcode {idx} of {len(codes)}")
                ops.append(codes[idx])
            subgraphs.append({"name": (sg.Name() or b"").decode(), "ops": ops, "tensors": tensors,
                              "inputs": [int(v) for v in sg.InputsAsNumpy()] if sg.InputsLength() else [],
                              "outputs": [int(v) for v in sg.OutputsAsNumpy()] if sg.OutputsLength() else []})
        signatures = []
        for i in range(m.SignatureDefsLength()):
            sd = m.SignatureDefs(i)
            signatures.append({
                "key": (sd.SignatureKey() or b"").decode(), "subgraph": sd.SubgraphIndex(),
                "inputs": [((sd.Inputs(j).Name() or b"").decode(), sd.Inputs(j).TensorIndex())
                           for j in range(sd.InputsLength())],
                "outputs": [((sd.Outputs(j).Name() or b"").decode(), sd.Outputs(j).TensorIndex())
                            for j in range(sd.OutputsLength())]})
        description = (m.Description() or b"").decode(errors="replace")
        version = m.Version()
    except ExportError:
        raise
    except Exception as e:  # flatbuffers raises struct/index/unicode errors on garbage
        raise ExportError(f"{what} is corrupt: {type(e).__name__} while reading the flatbuffer") from e
    return {"version": version, "description": description, "subgraphs": subgraphs, "signatures": signatures,
            "weights_bytes": weights + external, "external_bytes": external, "size": len(data),
            "weights_by_dtype": _weights_by_dtype(m, subgraphs)}


def metadata_json(data: bytes, name: str) -> dict:
    """The model's metadata entry ``name``, a JSON object ``{signature key: …}`` (the declared output dtypes, the
    call inputs); empty when the file has none."""
    try:
        m = schema.Model.GetRootAs(data, 0)
        for i in range(m.MetadataLength()):
            entry = m.Metadata(i)
            if (entry.Name() or b"").decode() == name:
                found = json.loads(m.Buffers(entry.Buffer()).DataAsNumpy().tobytes())
                if not isinstance(found, dict):
                    raise TypeError(f"a JSON {type(found).__name__}, not an object")
                return found
    except (ValueError, TypeError, IndexError, AttributeError) as e:  # flatbuffers/json errors on a damaged entry
        raise ExportError(f"the model's {name} metadata is corrupt: {type(e).__name__}") from e
    return {}


def _weights_by_dtype(m: Any, subgraphs: list[dict]) -> dict[str, int]:
    """Bytes of constant buffers by the dtype of the tensors that use them (each buffer once)."""
    dtype_of: dict[int, str] = {}
    for sub in subgraphs:
        for t in sub["tensors"]:
            if t["buffer"] > 0:
                dtype_of.setdefault(t["buffer"], t["dtype"])
    out: dict[str, int] = {}
    for index, dtype in sorted(dtype_of.items()):
        b = m.Buffers(index) if index < m.BuffersLength() else None
        size = 0 if b is None else (b.Size() if b.Offset() > 1 else b.DataLength())
        if size:
            out[dtype] = out.get(dtype, 0) + size
    return out


def delegated_ops(data: bytes) -> tuple[list[str], list[str]] | None:
    """(ops XNNPACK runs, ops it leaves to the reference kernels) for the primary subgraph.

    Loads the model in the LiteRT Interpreter (which applies XNNPACK by default)
    and walks back from each DELEGATE node's outputs to its inputs to find the
    nodes it replaced. Returns ``None`` when the interpreter refuses the model.
    """
    from ai_edge_litert.interpreter import Interpreter
    try:
        it = Interpreter(model_content=data, num_threads=1)
        it.allocate_tensors()
        nodes = it._get_ops_details()
    except (ValueError, RuntimeError):
        return None
    delegates = [n for n in nodes if n["op_name"] == "DELEGATE"]
    plain = [n for n in nodes if n["op_name"] != "DELEGATE"]
    producer = {int(t): n["index"] for n in plain for t in n["outputs"]}
    covered: set[int] = set()
    for d in delegates:
        stop = {int(t) for t in d["inputs"]}
        todo = [int(t) for t in d["outputs"]]
        while todo:
            t = todo.pop()
            if t in stop or t not in producer or producer[t] in covered:
                continue
            covered.add(producer[t])
            todo.extend(int(i) for i in nodes[producer[t]]["inputs"] if i >= 0)
    inside = [n["op_name"] for n in plain if n["index"] in covered]
    outside = [n["op_name"] for n in plain if n["index"] not in covered]
    return inside, outside


def _hist(names: list[str]) -> str:
    return ", ".join(f"{k}×{v}" for k, v in sorted(collections.Counter(names).items(), key=lambda kv: (-kv[1], kv[0])))


def _tensor_line(name: str, t: dict) -> str:
    shape = "[" + ",".join(str(d) for d in t["signature"]) + "]"
    quant = t.get("quant")
    return f"    {name:<12} {t['dtype']}{shape}" + (
        f" quantized: real = {quant[0]:.6g} * (q {'-' if quant[1] >= 0 else '+'} {abs(quant[1])})"
        if quant is not None else "")


def inspect_bytes(data: bytes, label: str = "model") -> str:
    """Describe a TFLite model held in memory (see :func:`inspect_file`)."""
    info = read_model(data, label)
    lines = [f"{label}: {info['size']:,} bytes (weights {info['weights_bytes']:,} · graph "
             f"{info['size'] - info['weights_bytes']:,}"
             + (f", {info['external_bytes']:,} bytes stored after the flatbuffer" if info["external_bytes"] else "")
             + f"), schema v{info['version']}" + (f", by {info['description']!r}" if info["description"] else "")]
    if not info["subgraphs"]:
        raise ExportError(f"{label} is corrupt: it has no subgraph")
    by_dtype = sorted(info["weights_by_dtype"].items(), key=lambda kv: -kv[1])
    if by_dtype:
        per_channel = sum(1 for s in info["subgraphs"] for t in s["tensors"] if t["scales"] > 1)
        lines.append("weights by dtype: " + " · ".join(f"{d} {n:,}" for d, n in by_dtype)
                     + (f" ({per_channel} tensors quantized per channel)" if per_channel else ""))
    first = info["subgraphs"][0]
    default = {"key": "(no signature)", "subgraph": 0,
               "inputs": [(f"input_{i}", t) for i, t in enumerate(first["inputs"])],
               "outputs": [(f"output_{i}", t) for i, t in enumerate(first["outputs"])]}
    calls = metadata_json(data, METADATA_NAME)
    for sig in info["signatures"] or [default]:
        if not 0 <= sig["subgraph"] < len(info["subgraphs"]):
            raise ExportError(f"{label} is corrupt: signature {sig['key']!r} names a missing subgraph")
        sub = info["subgraphs"][sig["subgraph"]]
        lines.append(f"signature {sig['key']} (subgraph {sig['subgraph']}, {len(sub['ops'])} ops)")
        try:
            lines += ["  inputs:"] + [_tensor_line(n, sub["tensors"][i]) for n, i in sig["inputs"]]
            lines += ["  outputs:"] + [_tensor_line(n, sub["tensors"][i]) for n, i in sig["outputs"]]
        except IndexError:
            raise ExportError(f"{label} is corrupt: signature {sig['key']!r} names a missing tensor") from None
        names, outs = [n for n, _ in sig["inputs"]], [n for n, _ in sig["outputs"]]
        call = CallInputs.from_json(calls.get(sig["key"]), len(names), len(outs))
        lines += [f"  {line}" for line in call.describe(names, outs)]
        lines.append(f"  ops: {_hist(sub['ops'])}")
    named = {sig["subgraph"] for sig in info["signatures"] or [default]}
    for index, sub in enumerate(info["subgraphs"]):
        if index not in named:  # (a WHILE's condition or body)
            lines.append(f"loop subgraph {index} {sub['name']} ({len(sub['ops'])} ops): {_hist(sub['ops'])}")
    split = delegated_ops(data)
    if split is None:
        raise ExportError(f"{label} is corrupt: the LiteRT interpreter refused to load it")
    inside, outside = split
    total = len(inside) + len(outside)
    lines.append(f"XNNPACK (subgraph 0): {len(inside)} of {total} ops delegated"
                 + (f"; outside the delegate: {_hist(outside)}" if outside else "; all ops delegated"))
    return "\n".join(lines)


def inspect_file(path: str | os.PathLike) -> str:
    """Describe a .tflite file: signatures, input/output tensors, op histogram, size split
    weights vs graph, and the ops the XNNPACK delegate does not take.

    Raises:
        ExportError: the file is missing, not a TFLite model, or corrupt (one clear line).
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror}") from e
    return inspect_bytes(data, os.path.basename(os.fspath(path)))


def tensor_dtype(name: str) -> np.dtype:
    """NumPy dtype of a TFLite type name as :func:`read_model` reports it."""
    return np.dtype({"bool": np.bool_}.get(name, name))


def describe(info: dict) -> dict[str, Any]:
    """A JSON-ready summary of :func:`read_model`'s result."""
    return {"size": info["size"], "weights_bytes": info["weights_bytes"],
            "weights_by_dtype": dict(info.get("weights_by_dtype", {})),
            "signatures": [s["key"] for s in info["signatures"]],
            "ops": dict(collections.Counter(op for s in info["subgraphs"] for op in s["ops"]))}
