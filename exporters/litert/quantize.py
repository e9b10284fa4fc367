"""Post-training weight quantization of LiteRT graphs (``build(..., quantize="fp16" | "int8")``).

Runs on the :mod:`.ir` graphs after translation and optimization, before the
builder, and produces what TFLite's own post-training modes produce:

* ``"fp16"`` — float16 weights: every float32 constant with at least
  :data:`FP16_MIN_ELEMENTS` elements is stored as float16 and read through a
  DEQUANTIZE (float16 → float32) op at the start of the graph. Compute stays
  float32; the XNNPACK delegate folds the DEQUANTIZE of a constant into the
  consuming op's packed weights, the reference kernels compute it once at
  ``allocate_tensors`` (constant input), so run time is unchanged and the file
  halves.
* ``"int8"`` — dynamic-range (weight-only) quantization: the constant weights of
  FULLY_CONNECTED, CONV_2D and BATCH_MATMUL become int8 with symmetric
  per-output-channel scales (``QuantizationParameters.scale`` per channel, zero
  points 0, ``quantized_dimension`` = the output-channel axis); biases and
  activations stay float32 and the runtime picks its hybrid kernels, which quantize
  the activations on the fly (``asymmetric_quantize_inputs`` on FULLY_CONNECTED and
  BATCH_MATMUL, as TFLite's converter sets it). XNNPACK runs the hybrid
  FULLY_CONNECTED / CONV_2D / BATCH_MATMUL. Other float constants stay float32.

  DEPTHWISE_CONV_2D stays float32 although TFLite has a hybrid kernel for it: the
  XNNPACK delegate does not take the hybrid form, so it splits the delegated
  partition. Measured on a conv/conv/depthwise/linear net (1×3×64×64, 2 threads,
  alternating blocks, two runs): quantizing the depthwise weights made the model
  1.5–1.6× slower and saved 0.9 KB (depthwise filters are k·k·C values).

``"int8-full"`` (int8 activations too, from calibrated ranges) is :mod:`.quantize_full`.
"""

from __future__ import annotations

import numpy as np

from converter.errors import InputError
from exporters.litert.ir import Graph, Op, QuantParams, Tensor
from exporters.litert.loops import called_graphs

#: Accepted values of the ``quantize`` option (``None`` = float32).
MODES = ("fp16", "int8", "int8-full")
#: Float constants smaller than this stay float32 under fp16 (scalars, tiny per-channel vectors).
FP16_MIN_ELEMENTS = 16
#: op → (weights input index, output-channel axis of the weights in TFLite layout; ``None`` = last).
INT8_WEIGHTS = {"FULLY_CONNECTED": (1, 0), "CONV_2D": (1, 0), "BATCH_MATMUL": (1, None)}
#: Hybrid ops whose options say how to quantize the float input (TFLite's converter sets True).
_ASYMMETRIC_INPUTS = {"FULLY_CONNECTED", "BATCH_MATMUL"}


def check_mode(mode: object) -> str | None:
    """Validate the ``quantize`` option: ``None``/``"fp32"`` → ``None``, else ``"fp16"``/``"int8"``/``"int8-full"``
    (full-integer: :mod:`.quantize_full`).

    Raises:
        InputError: any other value.
    """
    if mode is None or mode == "fp32":
        return None
    if mode not in MODES:
        raise InputError(f"unknown LiteRT quantize mode {mode!r}; choose one of: fp32, {', '.join(MODES)}")
    return str(mode)


def quantize_graphs(graphs: list[Graph], mode: str, notes: list[str]) -> None:
    """Quantize the weights of ``graphs`` and of the loop bodies they call in place (``mode`` from
    :func:`check_mode`)."""
    bodies = dict.fromkeys(sub for g in graphs for sub in called_graphs(g))  # (loops' subgraphs, once each)
    counts = [(_fp16 if mode == "fp16" else _int8)(g) for g in [*graphs, *bodies]]
    n = sum(counts)
    if mode == "fp16":
        notes.append(f"fp16 weights: {n} float32 constants stored as float16 and read through DEQUANTIZE; "
                     "compute stays float32")
    else:
        notes.append(f"int8 dynamic-range quantization: {n} weight tensors of FULLY_CONNECTED / CONV_2D / "
                     "BATCH_MATMUL stored as int8 with per-channel symmetric scales; activations and other "
                     "weights stay float32 (hybrid kernels)")


def _fp16(graph: Graph) -> int:
    """Replace float32 constants read by ops with DEQUANTIZE(float16 constant)."""
    replaced: dict[Tensor, Tensor] = {}
    dequant: list[Op] = []
    for op in graph.ops:
        for i, t in enumerate(op.inputs):
            if t is None or not t.is_const or np.dtype(t.dtype) != np.float32 or t.data.size < FP16_MIN_ELEMENTS:
                continue
            if t not in replaced:
                half = Tensor(t.shape, t.signature, np.dtype(np.float16), f"{t.name}_fp16",
                              np.ascontiguousarray(t.data.astype(np.float16)))
                out = Tensor(t.shape, t.signature, np.dtype(np.float32), f"{t.name}_dequantized")
                dequant.append(Op("DEQUANTIZE", [half], [out]))
                replaced[t] = out
            op.inputs[i] = replaced[t]
    graph.ops[:0] = dequant
    return len(replaced)


def quantize_per_channel(w: np.ndarray, axis: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric int8 quantization of ``w`` with one scale per slice along ``axis``.

    Returns:
        ``(q, scale)``: int8 values in [-127, 127] and float32 scales (``w ≈ q * scale``);
        an all-zero channel gets scale 1.
    """
    w = np.asarray(w, np.float32)
    others = tuple(d for d in range(w.ndim) if d != axis)
    amax = np.max(np.abs(w), axis=others) if others else np.abs(w)
    scale = np.where(amax > 0, amax / 127.0, 1.0).astype(np.float32)
    shape = [1] * w.ndim
    shape[axis] = -1
    q = np.clip(np.rint(w / scale.reshape(shape)), -127, 127).astype(np.int8)
    return q, scale


def _int8(graph: Graph) -> int:
    """Quantize the constant weights of the hybrid-capable ops."""
    replaced: dict[Tensor, Tensor] = {}
    for op in graph.ops:
        spec = INT8_WEIGHTS.get(op.code)
        if spec is None or len(op.inputs) <= spec[0]:
            continue
        wi, axis = spec
        t = op.inputs[wi]
        if t is None or not t.is_const or np.dtype(t.dtype) != np.float32 or t.data.ndim < 2:
            continue
        if op.code == "BATCH_MATMUL" and op.inputs[0].is_const:
            continue
        if op.code == "BATCH_MATMUL":
            axis = t.data.ndim - (2 if op.options.get("adjY") else 1)
        key = t
        if key not in replaced:
            q, scale = quantize_per_channel(t.data, axis)
            replaced[key] = Tensor(t.shape, t.signature, np.dtype(np.int8), f"{t.name}_int8", q,
                                   QuantParams(scale, np.zeros(scale.size, np.int64), axis))
        op.inputs[wi] = replaced[key]
        if op.code in _ASYMMETRIC_INPUTS:
            op.options["asymmetricQuantizeInputs"] = True
    return len(replaced)
