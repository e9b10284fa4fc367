"""Read and describe .onnx files: opset, inputs/outputs (dynamic dims by name), op
histogram, weights vs graph size, and whether onnxruntime's CPU provider loads it.

``tpu-export inspect model.onnx`` prints :func:`inspect_onnx`.
"""

from __future__ import annotations

import collections
import os
from typing import Any

from converter.call_inputs import METADATA_NAME, CallInputs
from converter.errors import ExportError, first_line


def read_onnx(data: bytes, what: str = "model") -> Any:
    """Parse ONNX bytes into a ``ModelProto`` and check it.

    Raises:
        ExportError: the bytes are not an ONNX model or fail ``onnx.checker`` (one line).
    """
    import onnx

    try:
        model = onnx.load_model_from_string(data)
    except Exception as e:  # protobuf raises DecodeError (and friends) on garbage
        raise ExportError(f"{what} is not an ONNX model ({type(e).__name__} while parsing the protobuf)") from e
    if not model.graph.node and not model.graph.output:
        raise ExportError(f"{what} is not an ONNX model (no graph)")
    try:
        onnx.checker.check_model(model)
    except Exception as e:  # onnx.checker.ValidationError and C++ errors
        raise ExportError(f"{what} is not a valid ONNX model: {first_line(e)}") from e
    return model


def _value_info(v: Any) -> tuple[str, str, list]:
    import onnx

    t = v.type.tensor_type
    dtype = onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name if t.elem_type else "?"
    dims = [d.dim_param or (d.dim_value if d.HasField("dim_value") else "?") for d in t.shape.dim]
    return v.name, dtype, dims


def describe_onnx(data: bytes, what: str = "model") -> dict:
    """The facts :func:`inspect_onnx` prints, as plain Python data."""
    model = read_onnx(data, what)
    g = model.graph
    weights = sum(len(t.raw_data) or 0 for t in g.initializer)
    external = sum(1 for t in g.initializer if t.data_location == 1)
    return {
        "opsets": {o.domain or "ai.onnx": o.version for o in model.opset_import},
        "producer": f"{model.producer_name} {model.producer_version}".strip(),
        "inputs": [_value_info(v) for v in g.input],
        "outputs": [_value_info(v) for v in g.output],
        "ops": collections.Counter(n.op_type for n in g.node),
        "loop_ops": collections.Counter(op for n in g.node for op in body_ops(n)),
        "weights_bytes": weights, "external_tensors": external, "initializers": len(g.initializer),
        "size": len(data),
        "call_inputs": next((p.value for p in model.metadata_props if p.key == METADATA_NAME), None),
    }


def inspect_onnx(path: str | os.PathLike) -> str:
    """A readable description of the .onnx file at ``path``.

    Raises:
        ExportError: the file is not a valid ONNX model.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise ExportError(f"cannot read {path}: {e.strerror or e}") from e
    info = describe_onnx(data, what=str(path))
    lines = [f"ONNX model {path}: {info['size']} bytes, opset "
             + ", ".join(f"{d} {v}" for d, v in sorted(info["opsets"].items()))
             + (f", produced by {info['producer']}" if info["producer"] else "")]
    for kind in ("inputs", "outputs"):
        for name, dtype, dims in info[kind]:
            lines.append(f"  {kind[:-1]:6} {name:12} {dtype:9} [{', '.join(str(d) for d in dims)}]")
    calls = CallInputs.from_json(info["call_inputs"], len(info["inputs"]), len(info["outputs"]))
    lines += [f"  {line}" for line in calls.describe([name for name, _, _ in info["inputs"]],
                                                     [name for name, _, _ in info["outputs"]])]
    graph = info["size"] - info["weights_bytes"]
    lines.append(f"  size: weights {info['weights_bytes']} bytes in {info['initializers']} initializers, "
                 f"graph {graph} bytes" + (f" ({info['external_tensors']} tensors stored externally)"
                                           if info["external_tensors"] else ""))
    lines.append(f"  ops ({sum(info['ops'].values())}): "
                 + ", ".join(f"{op} ×{n}" for op, n in sorted(info["ops"].items(), key=lambda kv: (-kv[1], kv[0]))))
    if info["loop_ops"]:
        lines.append(f"  inside loops ({sum(info['loop_ops'].values())}): "
                     + ", ".join(f"{op} ×{n}" for op, n in sorted(info["loop_ops"].items(),
                                                                    key=lambda kv: (-kv[1], kv[0]))))
    lines.append(f"  onnxruntime CPU: {_ort_status(data)}")
    return "\n".join(lines)


def inner_nodes(node: Any) -> list:
    """The nodes inside ``node``'s subgraphs (a ``Loop``'s body), nested ones included, each before its own."""
    out = []
    for attr in node.attribute:
        if attr.type == attr.GRAPH:
            for inner in attr.g.node:
                out += [inner, *inner_nodes(inner)]
    return out


def body_ops(node: Any) -> list[str]:
    """The op types inside ``node``'s subgraphs (:func:`inner_nodes`)."""
    return [n.op_type for n in inner_nodes(node)]


def _ort_status(data: bytes) -> str:
    try:
        import onnxruntime as ort
    except ImportError:
        return "not installed"
    try:
        ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    except Exception as e:  # the runtime's own words, first line
        return "refuses it: " + (str(e).strip().splitlines() or [type(e).__name__])[0][:200]
    return "loads"
