"""The ONNX artifact: the .onnx bytes plus a way to run them in ONNX Runtime (CPU)."""

from __future__ import annotations

import collections
import os
from typing import Any, Sequence

import numpy as np

from converter.call_inputs import METADATA_NAME, CallInputs, check_input
from converter.errors import ExportError, InputError
from exporters.artifact_io import FileBytes, any_torch, from_numpy, read_model_file, to_numpy


class OnnxArtifact(FileBytes):
    """A converted model (``target="onnx"``).

    Calling it runs the model in an ``onnxruntime.InferenceSession`` on the CPU
    execution provider: torch tensors in → torch tensors out (NumPy in → NumPy out);
    one output is returned as is, several as a tuple. It takes the model's own call (nested
    inputs, ``None``; keyword arguments by name when it came from ``convert``:
    :mod:`converter.call_inputs`) or the flat inputs.

    Attributes:
        notes: conversion decisions worth knowing (float64 policy, index ranges, …).
        num_threads: ONNX Runtime intra-op threads used by ``__call__``.
        precision: "fp32" (validators judge fp32 artifacts by tolerance).
    """

    def __init__(self, model: bytes, *, notes: list[str] | None = None, num_threads: int = 2,
                 output_dtypes: Sequence[Any] | None = None, call_inputs: CallInputs | None = None,
                 carried: tuple | None = None):
        self._bytes = bytes(model)
        self._call_inputs = call_inputs
        #: ``(buffer names, StateCarrier)`` of the buffers the model writes in place (converter.lowering.stateful)
        self._carried = carried
        self.notes = list(notes or [])
        self.num_threads = num_threads
        self.precision = "fp32"
        self._output_dtypes = [np.dtype(d) for d in output_dtypes] if output_dtypes is not None else None
        self._model = None
        self._session = None

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs: Any) -> "OnnxArtifact":
        """Open a .onnx file (raises ExportError if it is not a valid ONNX model)."""
        data = read_model_file(path)
        art = cls(data, **kwargs)
        art.model()
        return art

    # -- bytes: to_bytes() (the .onnx file contents), save(path), size (FileBytes) ------

    # -- structure -----------------------------------------------------------------------
    def model(self) -> Any:
        """The parsed ``onnx.ModelProto``."""
        if self._model is None:
            import onnx
            try:
                self._model = onnx.load_from_string(self._bytes)
            except Exception as e:  # protobuf raises its own DecodeError
                raise ExportError(f"not a valid ONNX model: {type(e).__name__}: {e}") from e
        return self._model

    @property
    def op_list(self) -> list[str]:
        """ONNX op types of the graph, in execution order; a ``Loop``'s body follows the ``Loop``."""
        from exporters.onnx.inspect import body_ops

        return [op for n in self.model().graph.node for op in (n.op_type, *body_ops(n))]

    @property
    def ops(self) -> collections.Counter:
        """Histogram of op types (a Counter: missing ops count 0)."""
        return collections.Counter(self.op_list)

    @property
    def input_names(self) -> list[str]:
        """Graph input names (``args_0…``)."""
        return [i.name for i in self.model().graph.input]

    @property
    def output_names(self) -> list[str]:
        """Graph output names (``output_0…``)."""
        return [o.name for o in self.model().graph.output]

    # -- running -------------------------------------------------------------------------
    def session(self) -> Any:
        """The (cached) ``onnxruntime.InferenceSession`` on the CPU execution provider."""
        if self._session is None:
            try:
                import onnxruntime as ort
            except ImportError as e:
                raise ExportError("running an ONNX artifact needs onnxruntime: pip install 'tpu-export[onnx]'") from e
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = self.num_threads
            opts.inter_op_num_threads = 1
            opts.log_severity_level = 3
            try:
                self._session = ort.InferenceSession(self._bytes, opts, providers=["CPUExecutionProvider"])
            except Exception as e:  # onnxruntime raises its own exception types
                raise ExportError(f"ONNX Runtime refused the model: {str(e).strip().splitlines()[0]}") from e
        return self._session

    def call_inputs(self) -> CallInputs:
        """How the model is called (:mod:`converter.call_inputs`); a loaded file's from its metadata (a file
        without it takes positional inputs, nested or flat, in any sizes of its dynamic dims)."""
        if self._call_inputs is None:
            saved = next((p.value for p in self.model().metadata_props if p.key == METADATA_NAME), None)
            self._call_inputs = CallInputs.from_json(saved, len(self.session().get_inputs()),
                                                     len(self.session().get_outputs()))
        return self._call_inputs

    def run_raw(self, *inputs: Any) -> list[np.ndarray]:
        """Run on NumPy arrays (cast to the model's input dtypes); returns NumPy outputs."""
        sess = self.session()
        specs = sess.get_inputs()
        if len(inputs) != len(specs):
            raise InputError(f"the ONNX model takes {len(specs)} inputs, got {len(inputs)}")
        feed, ranges = {}, self.call_inputs().ranges
        arrays = [np.asarray(x) for x in inputs]
        for i, (spec, arr) in enumerate(zip(specs, arrays)):
            want = _ORT_TYPES.get(spec.type)
            check_input(spec.name, arr.shape, arr.dtype, spec.shape, want or spec.type[7:-1], "the ONNX model",
                        ranges[i] if i < len(ranges) else None)
            if want is not None and arr.dtype != want:
                arr = arr.astype(want)
            feed[spec.name] = np.require(arr, requirements="C")  # 0-d inputs stay 0-d
        self.call_inputs().check_links([s.name for s in specs], [a.shape for a in arrays], "the ONNX model")
        try:
            if any(spec.type in _BIT_TYPES for spec in (*specs, *sess.get_outputs())):
                outs = _run_bit_typed(sess, feed)
            else:
                outs = sess.run(None, feed)
        except Exception as e:  # onnxruntime raises its own exception types
            raise InputError(f"running the ONNX model failed: {str(e).strip().splitlines()[0]}") from e
        if self._output_dtypes is not None:
            outs = [o.astype(d) if o.dtype != d else o for o, d in zip(outs, self._output_dtypes)]
        return outs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model on torch tensors or NumPy arrays (torch in → torch out), called as the model is.

        Returns the outputs in the model's structure (:mod:`converter.call_outputs`; a file saved without it:
        a single output, or a tuple when the model has several).
        """
        call = self.call_inputs()
        inputs = call.flatten(args, kwargs)
        as_torch = any_torch(inputs)
        arrays = [to_numpy(x) for x in inputs]
        if self._carried is None:
            return from_numpy(self.run_raw(*arrays), as_torch, call.outputs)
        names, carrier = self._carried
        outs = self.run_raw(*arrays, *carrier.inputs(names))
        return from_numpy(carrier.take(names, outs), as_torch, call.outputs)

    def reset_state(self) -> None:
        """Start the buffers the model writes in place over from their converted values (see ``notes``)."""
        if self._carried is not None:
            self._carried[1].reset()

    def __repr__(self) -> str:
        top = ", ".join(f"{k}×{v}" for k, v in self.ops.most_common(6))
        return f"OnnxArtifact({self.size} bytes, ops: {top})"


_ORT_TYPES = {"tensor(float)": np.dtype(np.float32), "tensor(double)": np.dtype(np.float64),
              "tensor(float16)": np.dtype(np.float16), "tensor(int64)": np.dtype(np.int64),
              "tensor(int32)": np.dtype(np.int32), "tensor(int16)": np.dtype(np.int16),
              "tensor(int8)": np.dtype(np.int8), "tensor(uint8)": np.dtype(np.uint8),
              "tensor(bool)": np.dtype(np.bool_)}


def _bit_types() -> dict:
    """ORT type name → (ml_dtypes dtype, ONNX element type, integer dtype of its width): the types ONNX Runtime's
    ``run`` cannot take or return as NumPy arrays (NumPy has them only through ml_dtypes)."""
    import ml_dtypes
    from onnx import TensorProto as P

    kinds = {"bfloat16": (ml_dtypes.bfloat16, P.BFLOAT16, np.uint16),
             "float8e4m3fn": (ml_dtypes.float8_e4m3fn, P.FLOAT8E4M3FN, np.uint8),
             "float8e5m2": (ml_dtypes.float8_e5m2, P.FLOAT8E5M2, np.uint8),
             "float8e4m3fnuz": (ml_dtypes.float8_e4m3fnuz, P.FLOAT8E4M3FNUZ, np.uint8),
             "float8e5m2fnuz": (ml_dtypes.float8_e5m2fnuz, P.FLOAT8E5M2FNUZ, np.uint8)}
    return {f"tensor({k})": (np.dtype(d), e, np.dtype(b)) for k, (d, e, b) in kinds.items()}


_BIT_TYPES = _bit_types()


def _run_bit_typed(sess: Any, feed: dict) -> list[np.ndarray]:
    """``sess.run`` for a model with bfloat16/float8 inputs or outputs: through ``OrtValue``s, each such array
    passed and read back as the bits of its width (ONNX Runtime's NumPy conversion has no type for them)."""
    import ctypes

    import onnxruntime as ort

    kinds = {spec.name: _BIT_TYPES.get(spec.type) for spec in sess.get_inputs()}
    values = {}
    for name, arr in feed.items():
        kind = kinds[name]
        if kind is None:
            values[name] = ort.OrtValue.ortvalue_from_numpy(arr)
        else:
            bits = np.ascontiguousarray(arr.astype(kind[0], copy=False).view(kind[2]))
            values[name] = ort.OrtValue.ortvalue_from_numpy_with_onnx_type(bits, kind[1])
    outs = []
    for value in sess.run_with_ort_values(None, values):
        kind = _BIT_TYPES.get(value.data_type())
        if kind is None:
            outs.append(value.numpy())
            continue
        out = np.empty(value.shape(), kind[2])
        if out.size:
            ctypes.memmove(out.ctypes.data, value.data_ptr(), out.nbytes)
        outs.append(out.view(kind[0]))
    return outs
