"""Loops in ONNX and LiteRT files (``exporters/loops.py``, ``exporters/{onnx,litert}/loops.py``): a ``while`` and a
``scan`` too long to unroll become one ONNX ``Loop`` / LiteRT ``WHILE`` (both were refused by name), with carries,
stacked outputs, reverse scans, weights the body reads, nested loops and dynamic dims; ``nn.LSTM``/``nn.GRU``/``nn.RNN``
over a long sequence export as loops (unrolled: one copy of the step per frame), also with a dynamic length."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from converter.api import build, capture_program
from exporters.litert import build as build_litert
from exporters.onnx import build as build_onnx
from tests.litert.adapter import JaxProgram

BUILD = {"onnx": build_onnx, "litert": build_litert}
LOOP = {"onnx": "Loop", "litert": "WHILE"}
#: one worker: the recurrent model's captures serve every target
pytestmark = pytest.mark.xdist_group("exporter-loops")
R = np.random.default_rng(0)
X = R.standard_normal((200, 3)).astype(np.float32)
W = (R.standard_normal((3, 3)) * 0.4).astype(np.float32)


def _long_scans(x):
    carry, ys = jax.lax.scan(lambda h, a: (jnp.tanh(h @ W + a), h * a), x[0], x)  # a weight in the body
    total, back = jax.lax.scan(lambda h, a: (h + a, h), jnp.zeros_like(x[0]), x, reverse=True)
    return carry, ys, total, back


def _while(x, n):
    def body(state):
        i, h = state
        _, inner = jax.lax.while_loop(lambda s: s[0] < 3, lambda s: (s[0] + 1, s[1] * 0.5 + 1.0), (0, h))  # nested
        return i + 1, jnp.tanh(inner @ W) + x

    return jax.lax.while_loop(lambda s: s[0] < n[0], body, (jnp.int32(0), x))


@pytest.mark.parametrize("target", list(BUILD))
def test_a_long_scan_is_one_loop(target):
    program = JaxProgram(_long_scans, [X])
    art = BUILD[target](program)
    for g, w in zip(art(X), program.reference(X)):
        np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)
    assert art.ops[LOOP[target]] == 2
    assert len(art.op_list) < 80  # (unrolled: over 1000 ops)


@pytest.mark.parametrize("target", list(BUILD))
def test_a_while_loop_runs_its_data_dependent_trip_count(target):
    x = X[:4]
    program = JaxProgram(_while, [x, np.array([5], np.int32)])
    art = BUILD[target](program)
    for n in (5, 0, 12):
        count = np.array([n], np.int32)
        got, want = art(x, count), program.reference(x, count)
        assert int(np.asarray(got[0])) == n
        np.testing.assert_allclose(got[1], want[1], rtol=2e-5, atol=2e-6)
    assert art.ops[LOOP[target]] == 2


@pytest.mark.parametrize("target", list(BUILD))
def test_a_long_scan_keeps_a_dynamic_dim(target):
    program = JaxProgram(_long_scans, [X[:, None, :].repeat(2, 1)], dynamic={0: {1: "b"}})
    art = BUILD[target](program)
    for b in (2, 5):
        x = np.ascontiguousarray(np.broadcast_to(X[:, None, :], (200, b, 3)) * np.arange(1, b + 1)[None, :, None] / b)
        x = x.astype(np.float32)
        for g, w in zip(art(x), program.reference(x)):
            np.testing.assert_allclose(g, w, rtol=2e-5, atol=2e-6)


class _Recurrent(torch.nn.Module):
    """Every recurrent layer kind over one long sequence: 2-layer bidirectional LSTM, GRU (batch first), RNN."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lstm = torch.nn.LSTM(4, 6, num_layers=2, bidirectional=True)
        self.gru = torch.nn.GRU(12, 5, batch_first=True)
        self.rnn = torch.nn.RNN(5, 3)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        z, hg = self.gru(y.transpose(0, 1))
        q, hr = self.rnn(z.transpose(0, 1))
        return q, h, c, hg, hr


@pytest.fixture(scope="module")
def recurrent():
    """The model, a [100, 2, 4] sequence, and its captures (one per set of dynamic dims, for every target)."""
    torch.manual_seed(1)
    model, x = _Recurrent().eval(), torch.randn(100, 2, 4)
    batch = capture_program(model, (x,), dynamic_shapes=({1: torch.export.Dim("batch", min=1, max=16)},))
    dims = {0: torch.export.Dim("steps", min=2, max=1000), 1: torch.export.Dim("batch", min=1, max=16)}
    return model, x, batch, capture_program(model, (x,), dynamic_shapes=(dims,))


@pytest.mark.parametrize("target", ["onnx", "litert", "stablehlo"])
def test_recurrent_layers_over_a_long_sequence_export_as_loops(recurrent, target):
    model, x, batch_dynamic, _ = recurrent
    art = build(batch_dynamic, target=target)
    for batch in (x, torch.randn(100, 5, 4)):
        with torch.no_grad():
            want = model(batch)
        got = art(batch)
        for g, w in zip(got, want):
            torch.testing.assert_close(torch.as_tensor(np.asarray(g)), w, rtol=1e-5, atol=1e-5)
    if target in LOOP:
        assert art.ops[LOOP[target]] == 6  # one per layer and direction
        assert len(art.op_list) < 600


@pytest.mark.parametrize("target", ["tpu", "stablehlo", "onnx", "litert"])
def test_recurrent_layers_with_a_dynamic_sequence_length(recurrent, target):
    # torch.export specialized the length ("Constraints violated"): its fake-tensor rule for these ops looped over
    # time (converter.capture.recurrent_shape_rules computes their shapes instead)
    model, _, _, length_dynamic = recurrent
    art = build(length_dynamic, target=target)
    for steps, batch in ((100, 2), (3, 1), (250, 3)):
        seq = torch.randn(steps, batch, 4, generator=torch.Generator().manual_seed(steps))
        with torch.no_grad():
            want = model(seq)
        for g, w in zip(art(seq), want, strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(g)), w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("target", ["onnx", "litert"])
def test_inspect_shows_what_runs_inside_the_loops(recurrent, target, tmp_path):
    from exporters.litert.inspect import inspect_file
    from exporters.onnx.inspect import inspect_onnx

    path = tmp_path / ("m.onnx" if target == "onnx" else "m.tflite")
    build(recurrent[2], target=target).save(path)  # (the batch-dynamic capture)
    text = (inspect_onnx if target == "onnx" else inspect_file)(path)
    if target == "onnx":
        assert "Loop ×6" in text and "inside loops (" in text and "Sigmoid" in text.split("inside loops")[1]
    else:  # a condition and a body per WHILE, listed after the signature
        loops = [line for line in text.splitlines() if line.startswith("loop subgraph")]
        assert len(loops) == 12 and sum("FULLY_CONNECTED" in line for line in loops) == 6, text
