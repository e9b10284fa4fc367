"""LiteRTArtifact (save, bytes, call), inspect_file, errors, external buffers, dynamic dims,
determinism — on small hand-written JAX programs."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from converter.errors import ExportError, InputError, UnsupportedOpError
from exporters.litert import LiteRTArtifact, build, inspect_file
from exporters.litert.inspect import read_model
from tests.litert.adapter import JaxProgram
from tests.litert.conftest import REL_TOL, check_program, outputs, rel_error

R = np.random.default_rng(0)
K = R.standard_normal((8, 3, 3, 3)).astype(np.float32)
FC = R.standard_normal((10, 8)).astype(np.float32)


def cnn(x):
    y = jax.lax.conv_general_dilated(x, K, (1, 1), [(1, 1), (1, 1)], dimension_numbers=("NCHW", "OIHW", "NCHW"))
    y = jnp.maximum(y, 0.0)
    return jnp.mean(y, axis=(2, 3)) @ FC.T, y


@pytest.fixture(scope="module")
def program() -> JaxProgram:
    return JaxProgram(cnn, [R.standard_normal((2, 3, 8, 8)).astype(np.float32)])


@pytest.fixture(scope="module")
def art(program) -> LiteRTArtifact:
    return build(program)


def test_artifact_call_torch_in_torch_out(art, program):
    x = program.samples[0]
    got = art(torch.from_numpy(x))
    assert isinstance(got, tuple) and all(isinstance(t, torch.Tensor) for t in got)
    for g, w in zip(outputs(got), program.reference(x)):
        assert rel_error(g, w) <= REL_TOL
    assert isinstance(art(x)[0], np.ndarray)


def test_artifact_ops_histogram(art):
    assert art.ops["CONV_2D"] == 1 and art.ops["RELU"] == 0 and art.ops["STABLEHLO_SORT"] == 0
    assert art.op_list[0] == "TRANSPOSE" and art.ops["TRANSPOSE"] == 2
    assert sum(art.ops.values()) == len(art.op_list)


def test_artifact_save_is_atomic(art, tmp_path, monkeypatch):
    path = tmp_path / "m.tflite"
    art.save(path)
    assert path.read_bytes() == art.to_bytes()
    assert os.listdir(tmp_path) == ["m.tflite"]

    def fail(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError):
        art.save(tmp_path / "other.tflite")
    assert os.listdir(tmp_path) == ["m.tflite"]


def test_artifact_same_model_twice_is_byte_identical(art, program):
    assert build(program).to_bytes() == art.to_bytes()


def test_artifact_load_round_trip(art, program, tmp_path):
    path = art.save(tmp_path / "m.tflite")
    loaded = LiteRTArtifact.load(path)
    x = program.samples[0]
    assert rel_error(loaded(x)[0], art(x)[0]) == 0.0


def test_inspect_file_describes_model(art, tmp_path):
    text = inspect_file(art.save(tmp_path / "m.tflite"))
    assert "signature serving_default" in text and "args_0" in text and "output_1" in text
    assert "float32[2,3,8,8]" in text and "CONV_2D×1" in text
    assert "weights" in text and "XNNPACK" in text


def test_inspect_names_ops_outside_xnnpack(tmp_path):
    prog = JaxProgram(lambda x: jnp.cumsum(jnp.tanh(x), axis=1), [np.ones((2, 5), np.float32)])
    text = inspect_file(build(prog).save(tmp_path / "c.tflite"))
    assert "outside the delegate: CUMSUM×1" in text


@pytest.mark.parametrize("content", [b"", b"not a model at all", b"\x18\x00\x00\x00TFL3" + b"\xff" * 40])
def test_inspect_corrupt_file_one_line_error(tmp_path, content):
    path = tmp_path / "bad.tflite"
    path.write_bytes(content)
    with pytest.raises(ExportError) as e:
        inspect_file(path)
    assert "\n" not in str(e.value) and "bad.tflite" in str(e.value)


def test_inspect_truncated_file_one_line_error(art, tmp_path):
    path = tmp_path / "cut.tflite"
    path.write_bytes(art.to_bytes()[: art.size // 2])
    with pytest.raises(ExportError) as e:
        inspect_file(path)
    assert "\n" not in str(e.value)


def test_inspect_missing_file(tmp_path):
    with pytest.raises(ExportError, match="cannot read"):
        inspect_file(tmp_path / "nope.tflite")


def test_external_buffers_forced_threshold(program, art):
    ext = build(program, external_buffer_threshold_bytes=64)
    info = read_model(ext.to_bytes())
    assert info["external_bytes"] > 0
    x = program.samples[0]
    for g, w in zip(outputs(ext(x)), outputs(art(x))):
        assert rel_error(g, w) == 0.0
    assert "stored after the flatbuffer" in inspect_file_bytes(ext)


def inspect_file_bytes(art: LiteRTArtifact) -> str:
    from exporters.litert.inspect import inspect_bytes
    return inspect_bytes(art.to_bytes())


def test_dynamic_batch_and_spatial_dims_run_at_other_sizes():
    prog = JaxProgram(cnn, [R.standard_normal((2, 3, 8, 8)).astype(np.float32)], {0: {0: "b", 2: "h", 3: "w"}})
    art = build(prog)
    assert list(art.interpreter().get_input_details()[0]["shape_signature"]) == [-1, 3, -1, -1]
    for shape in [(2, 3, 8, 8), (1, 3, 5, 7), (4, 3, 9, 9)]:
        x = R.standard_normal(shape).astype(np.float32)
        for g, w in zip(outputs(art(x)), prog.reference(x)):
            assert rel_error(g, w) <= REL_TOL, shape


def test_dynamic_sequence_reshape_iota():
    def f(ids):
        pos = jnp.arange(ids.shape[1])
        x = ids * 2 + pos[None, :]
        return x.reshape(-1), jnp.cumsum(x, axis=1), x.reshape(ids.shape[0], ids.shape[1], 1) * 3
    prog = JaxProgram(f, [R.integers(0, 9, (2, 5))], {0: {0: "b", 1: "s"}})
    art = check_program(prog)
    for shape in [(3, 7), (1, 2)]:
        x = R.integers(0, 9, shape)
        for g, w in zip(outputs(art(x)), prog.reference(x)):
            assert rel_error(g, w) == 0.0


def test_unsupported_primitive_names_op_and_source_line():
    prog = JaxProgram(lambda x: jax.lax.nextafter(x, x + 1) + 1, [np.ones((3, 2), np.float32)])
    with pytest.raises(UnsupportedOpError) as e:
        build(prog)
    msg = str(e.value)
    assert e.value.target == "litert" and "nextafter" in msg and "test_artifact.py" in msg


def test_unknown_option_and_signature_errors(program):
    with pytest.raises(InputError, match="unknown LiteRT option"):
        build(program, no_such_option=1)
    with pytest.raises(InputError, match="needs a program"):
        build()
    art = build(program)
    with pytest.raises(InputError, match="unknown signature"):
        art(program.samples[0], signature="decode")
    with pytest.raises(InputError, match="takes 1 tensor inputs, the call gave 2"):
        art(program.samples[0], program.samples[0])
