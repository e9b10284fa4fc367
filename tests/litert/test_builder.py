"""The flatbuffer writer on hand-built graphs: round trip, dedup, alignment, external buffers."""

from __future__ import annotations

import numpy as np
import pytest
from ai_edge_litert.interpreter import Interpreter

from converter.errors import ExportError
from exporters.litert.builder import serialize
from exporters.litert.inspect import read_model
from exporters.litert.ir import Graph, Op, Tensor

F32 = np.dtype(np.float32)


def _graph(name: str = "serving_default", weight: np.ndarray | None = None) -> Graph:
    w = np.arange(6, dtype=np.float32).reshape(2, 3) if weight is None else weight
    x = Tensor((1, 3), (-1, 3), F32, "x")
    y = Tensor((1, 2), (-1, 2), F32, "y")
    fc = Op("FULLY_CONNECTED", [x, Tensor(w.shape, w.shape, F32, "w", w), None], [y], {"fusedActivationFunction": 1})
    return Graph(name, [fc], [x], [y], ["args_0"], ["output_0"])


def _run(data: bytes, x: np.ndarray, signature: str = "serving_default") -> np.ndarray:
    runner = Interpreter(model_content=data).get_signature_runner(signature)
    return runner(args_0=x)["output_0"]


def test_builder_round_trip_runs_with_dynamic_batch():
    data = serialize([_graph()])
    x = np.array([[1, -2, 3], [0, 1, 0], [-1, -1, -1]], np.float32)
    want = np.maximum(x @ np.arange(6, dtype=np.float32).reshape(2, 3).T, 0)
    np.testing.assert_allclose(_run(data, x), want)
    info = read_model(data)
    assert info["signatures"][0]["key"] == "serving_default"
    assert info["subgraphs"][0]["tensors"][0]["signature"] == [-1, 3]


def test_builder_shares_identical_buffers_between_signatures():
    w = np.random.default_rng(0).standard_normal((64, 3)).astype(np.float32)
    one = serialize([_graph("a", w)])
    two = serialize([_graph("a", w), _graph("b", w.copy())])
    info = read_model(two)
    assert info["weights_bytes"] == w.nbytes
    assert len(two) - len(one) < w.nbytes
    x = np.ones((1, 3), np.float32)
    np.testing.assert_allclose(_run(two, x, "b"), np.maximum(x @ w.T, 0), rtol=1e-6)


def test_builder_aligns_buffer_data_to_16_bytes():
    data = serialize([_graph(weight=np.ones((2, 3), np.float32) * 7)])
    payload = np.full(6, 7, np.float32).tobytes()
    assert data.find(payload) % 16 == 0


def test_builder_external_buffers_after_flatbuffer_run():
    w = np.random.default_rng(1).standard_normal((2, 3)).astype(np.float32)
    inline = serialize([_graph(weight=w)])
    ext = serialize([_graph(weight=w)], external_buffer_threshold_bytes=0)
    info = read_model(ext)
    assert info["external_bytes"] == w.nbytes and info["weights_bytes"] == w.nbytes
    assert ext.rfind(w.tobytes()) > len(ext) - w.nbytes - 16  # stored at the end
    x = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.testing.assert_allclose(_run(ext, x), _run(inline, x))


def test_builder_is_deterministic():
    assert serialize([_graph()]) == serialize([_graph()])


def test_builder_rejects_unknown_option_field():
    g = _graph()
    g.ops[0].options["noSuchField"] = 1
    with pytest.raises(ExportError, match="noSuchField"):
        serialize([g])
