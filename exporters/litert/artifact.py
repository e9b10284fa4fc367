"""The LiteRT artifact: the .tflite bytes plus a way to run them in the LiteRT Interpreter."""

from __future__ import annotations

import collections
import os
from typing import Any

import numpy as np

from converter.call_inputs import METADATA_NAME, CallInputs, check_input
from converter.errors import ExportError, InputError
from exporters.artifact_io import FileBytes, any_torch, from_numpy, read_model_file, to_numpy
from exporters.litert.builder import OUTPUT_DTYPES_METADATA
from exporters.litert.inspect import metadata_json, read_model


class LiteRTArtifact(FileBytes):
    """A converted model (``target="litert"``).

    Calling it runs the model in ``ai_edge_litert.interpreter.Interpreter`` (the
    XNNPACK delegate applies by default). It takes and returns tensors in the
    PyTorch model's layout: with ``channels_last_io`` the file's rank-4 inputs and
    outputs are NHWC and the call transposes NCHW arguments and results for you
    (use :meth:`run_raw` to feed the file's own layout). Outputs come back in the
    dtype the program declares: float64 runs as float32 in the model and its results
    are cast back (the declared dtypes are stored in the file's metadata). It takes the model's
    own call (nested inputs, ``None``; keyword arguments by name when it came from
    ``convert``: :mod:`converter.call_inputs`) or the flat inputs.

    Attributes:
        notes: conversion decisions worth knowing (int64 policy, fallbacks, …).
        num_threads: Interpreter threads used by ``__call__``.
        channels_last_io: whether rank-4 inputs/outputs are NHWC in the file.
        precision: "fp32", "fp16" (float16 weights) or "int8" (dynamic-range int8 weights, or
            full-integer int8 compute); ``validators`` judge low precision by task agreement.
    """

    def __init__(self, model: bytes, *, notes: list[str] | None = None, num_threads: int = 2,
                 channels_last_io: bool = False, precision: str = "fp32",
                 call_inputs: dict[str, CallInputs] | None = None, carried: tuple | None = None,
                 interpreter_options: dict | None = None):
        self._bytes = bytes(model)
        self._interpreter_options = dict(interpreter_options or {})  # (calibration: reference kernels, every tensor)
        self._call_inputs = dict(call_inputs or {})  # signature → its program's call structure
        #: ``({signature: buffer names}, StateCarrier)``: the buffers the model writes in place
        #: (converter.lowering.stateful), kept in the file's layout
        self._carried = carried
        self.precision = precision
        self.notes = list(notes or [])
        self.num_threads = num_threads
        self.channels_last_io = channels_last_io
        self._model = read_model(self._bytes)
        self._output_dtypes = _declared_output_dtypes(self._bytes)
        self._saved_calls = metadata_json(self._bytes, METADATA_NAME)  # (a loaded file's call inputs)
        self._interpreter = None
        self._runners: dict[str, Any] = {}
        self._quantized: dict[str, Any] = {}  # signature → its quantized inputs' and outputs' parameters

    @classmethod
    def load(cls, path: str | os.PathLike, **kwargs: Any) -> "LiteRTArtifact":
        """Open a .tflite file (raises ExportError if it is not a valid TFLite model)."""
        data = read_model_file(path)
        return cls(data, **kwargs)

    # -- bytes: to_bytes() (the .tflite file contents), save(path), size (FileBytes) ------

    # -- structure -----------------------------------------------------------------------
    @property
    def signatures(self) -> list[str]:
        """Signature keys (``serving_default`` first for single-program exports)."""
        return [s["key"] for s in self._model["signatures"]]

    @property
    def op_list(self) -> list[str]:
        """Builtin op names of every subgraph, in execution order."""
        return [op for sub in self._model["subgraphs"] for op in sub["ops"]]

    @property
    def ops(self) -> collections.Counter:
        """Histogram of builtin op names (a Counter: missing ops count 0)."""
        return collections.Counter(self.op_list)

    # -- running -------------------------------------------------------------------------
    def interpreter(self) -> Any:
        """The (cached) ``ai_edge_litert`` Interpreter for this model."""
        if self._interpreter is None:
            from ai_edge_litert.interpreter import Interpreter
            try:
                self._interpreter = Interpreter(model_content=self._bytes, num_threads=self.num_threads,
                                                **self._interpreter_options)
            except (ValueError, RuntimeError) as e:
                raise ExportError(f"the LiteRT interpreter refused the model: {str(e).strip().splitlines()[0]}") \
                    from e
        return self._interpreter

    def _runner(self, signature: str) -> Any:
        if signature not in self._runners:
            if signature not in self.signatures:
                raise InputError(f"unknown signature {signature!r}; the model has {self.signatures}")
            self._runners[signature] = self.interpreter().get_signature_runner(signature)
        return self._runners[signature]

    def _call(self, sig: str) -> CallInputs:
        """How signature ``sig`` is called (:mod:`converter.call_inputs`); a loaded file's from its metadata (a
        file without it takes positional inputs, nested or flat, in any sizes of its dynamic dims)."""
        call = self._call_inputs.get(sig)
        if call is None:
            runner = self._runner(sig)
            call = self._call_inputs[sig] = CallInputs.from_json(
                self._saved_calls.get(sig), len(runner.get_input_details()), len(runner.get_output_details()))
        return call

    def run_raw(self, *inputs: np.ndarray, signature: str | None = None) -> list[np.ndarray]:
        """Run one signature on NumPy arrays in the file's own layout; returns NumPy outputs."""
        sig = signature or self.signatures[0]
        runner = self._runner(sig)
        details = runner.get_input_details()
        names = sorted(details, key=_arg_index)
        if len(inputs) != len(names):
            raise InputError(f"signature {sig!r} takes {len(names)} inputs, got {len(inputs)}")
        feed, ranges = {}, self._call(sig).ranges
        for i, (name, x) in enumerate(zip(names, inputs)):
            arr = np.asarray(x)
            want = np.dtype(details[name]["dtype"])
            dims = ranges[i] if i < len(ranges) else None
            if dims is not None and self.channels_last_io and len(dims) == 4:
                dims = [dims[j] for j in (0, 2, 3, 1)]  # (the file's NHWC layout)
            check_input(name, arr.shape, arr.dtype, details[name]["shape_signature"], want,
                        f"signature {sig!r} of the LiteRT model", dims)
            if arr.dtype != want:
                arr = arr.astype(want)
            feed[name] = np.require(arr, requirements="C")
        shapes = [feed[name].shape for name in names]
        if self.channels_last_io:  # (the file's NHWC layout: the model's dims in NCHW order)
            shapes = [(s[0], s[3], s[1], s[2]) if len(s) == 4 else s for s in shapes]
        self._call(sig).check_links(names, shapes, f"signature {sig!r} of the LiteRT model")
        try:
            result = runner(**feed)
        except (ValueError, RuntimeError) as e:
            raise InputError(f"running signature {sig!r} failed: {str(e).strip().splitlines()[0]}") from e
        outs = [result[k] for k in sorted(result, key=_arg_index)]
        declared = self._output_dtypes.get(sig)
        if declared is not None:
            outs = [o.astype(d) if o.dtype != d else o for o, d in zip(outs, declared)]
        return outs

    def __call__(self, *args: Any, signature: str | None = None, **kwargs: Any) -> Any:
        """Run the model on torch tensors or NumPy arrays (torch in → torch out), called as the model is.

        An 8-bit quantized input (``int8_io=True``) takes float values, quantized here with the file's
        parameters, and a quantized output comes back dequantized (:meth:`run_raw` feeds and returns the codes).

        Returns the outputs in the model's structure (:mod:`converter.call_outputs`; a file saved without it:
        a single output, or a tuple when the model has several).
        """
        sig = signature or self.signatures[0]
        call = self._call(sig)
        inputs = call.flatten(args, kwargs)
        as_torch = any_torch(inputs)
        arrays = []
        for x in inputs:
            arr = to_numpy(x)
            if self.channels_last_io and arr.ndim == 4:
                arr = arr.transpose(0, 2, 3, 1)
            arrays.append(arr)
        quantized = self._quantized_io(sig)
        if quantized is not None:  # (an int8 input takes float values quantized with its parameters)
            arrays = [_quantize(a, p) if p is not None and a.dtype.kind == "f" else a
                      for a, p in zip(arrays, quantized[0])]
        names = self._carried[0].get(sig, ()) if self._carried is not None else ()
        if names:
            carrier = self._carried[1]
            outs = carrier.take(names, self.run_raw(*arrays, *carrier.inputs(names), signature=sig))
        else:
            outs = self.run_raw(*arrays, signature=signature)
        if quantized is not None:
            outs = [(o.astype(np.float32) - p[1]) * np.float32(p[0]) if p is not None else o
                    for o, p in zip(outs, quantized[1])]
        if self.channels_last_io:
            outs = [o.transpose(0, 3, 1, 2) if o.ndim == 4 else o for o in outs]
        return from_numpy(outs, as_torch, call.outputs)

    def _quantized_io(self, sig: str) -> tuple[list, list] | None:
        """``(inputs, outputs)``: the ``(scale, zero point, dtype)`` of each 8-bit quantized input and output of
        signature ``sig`` (``quantize="int8-full", int8_io=True``; a uint8 model of TFLite's converter), ``None``
        for the others; ``None`` when the signature has none."""
        if sig not in self._quantized:
            runner = self._runner(sig)

            def params(details: dict) -> list:
                found = []
                for name in sorted(details, key=_arg_index):
                    d = details[name]
                    scale, zero = d.get("quantization", (0.0, 0))
                    dtype = np.dtype(d["dtype"])
                    found.append((float(scale), int(zero), dtype) if scale and dtype in _EIGHT_BITS else None)
                return found

            ins, outs = params(runner.get_input_details()), params(runner.get_output_details())
            self._quantized[sig] = (ins, outs) if any(p is not None for p in ins + outs) else None
        return self._quantized[sig]

    def reset_state(self) -> None:
        """Start the buffers the model writes in place over from their converted values (see ``notes``)."""
        if self._carried is not None:
            self._carried[1].reset()

    def __repr__(self) -> str:
        top = ", ".join(f"{k}×{v}" for k, v in self.ops.most_common(6))
        return f"LiteRTArtifact({self.size} bytes, signatures={self.signatures}, ops: {top})"


_EIGHT_BITS = (np.dtype(np.int8), np.dtype(np.uint8))


def _quantize(x: np.ndarray, p: tuple) -> np.ndarray:
    """Float values as the codes of ``p`` = ``(scale, zero point, dtype)`` (rounded half to even, saturated)."""
    info = np.iinfo(p[2])
    return np.clip(np.rint(x / p[0]) + p[1], info.min, info.max).astype(p[2])


def _declared_output_dtypes(data: bytes) -> dict[str, list[np.dtype]]:
    """``{signature key: [declared dtype of each output]}`` from the model's metadata (empty when the file has
    none: its outputs are already in their declared dtypes)."""
    try:
        return {k: [np.dtype(d) for d in v] for k, v in metadata_json(data, OUTPUT_DTYPES_METADATA).items()}
    except (TypeError, ValueError) as e:  # (not a list of dtype names)
        raise ExportError(f"the model's {OUTPUT_DTYPES_METADATA} metadata is corrupt: {type(e).__name__}") from e


def _arg_index(name: str) -> tuple:
    head, _, tail = name.rpartition("_")
    return (head, int(tail)) if tail.isdigit() else (name, 0)
