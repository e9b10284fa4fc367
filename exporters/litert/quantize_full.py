"""Full-integer post-training quantization of LiteRT graphs (``build(..., quantize="int8-full")``).

What TFLite's converter makes from a representative dataset, without TensorFlow. The activation ranges come from
calibration (:mod:`exporters.litert.calibrate`: the float32 model run on the calibration inputs in the LiteRT
interpreter); :func:`quantize_int8` then rewrites the graph:

* each op with an int8 kernel (:data:`INT8_OPS`) computes on int8 tensors: activations asymmetric per tensor
  (``real = scale * (q - zero_point)``, the range widened to hold 0), the weights of convolutions (also depthwise
  and transposed) and FULLY_CONNECTED symmetric per output channel, their biases int32 at ``input scale *
  weight scale``;
* LOGISTIC takes the fixed output scale 1/256 (zero point -128) and TANH 1/128 (0) their int8 kernels require,
  where the calibrated range spans at least 16 of those codes (a soft cap's ``30 * tanh(x / 30)`` spans two: it
  stays float32);
* pools, reshapes, transposes, pads, slices, gathers, splits and resizes keep their input's parameters (their
  kernels require it) and are int8 only where their input already is (a QUANTIZE / DEQUANTIZE pair around a
  reshape would cost more than it saves); CONCATENATION requantizes an input whose parameters differ from its
  output's;
* every other op stays float32 between a DEQUANTIZE and a QUANTIZE (the artifact's notes list them), and so does
  an op whose int8 form would not hold its values: one adding a constant that holds ``-inf`` or a value past
  :data:`LARGEST` (an attention mask), or a constant below the output's resolution (a layer norm's ``eps``), one
  whose kernel would rescale by more than :data:`MAX_RESCALE`; the attention's BATCH_MATMUL and SOFTMAX are
  left out too: int8 kernels run them, at a cost in accuracy (quantized, minGPT's logits lost 6 dB of SNR
  against PyTorch: 26.6 against 32.9);
* the model's inputs are quantized first and its outputs dequantized last (float32 inputs and outputs), or, with
  ``int8_io``, are int8 themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from exporters.litert.ir import Graph, Op, QuantParams, Tensor
from exporters.litert.quantize import quantize_per_channel

_F32 = np.dtype(np.float32)
_I8 = np.dtype(np.int8)
_I32 = np.dtype(np.int32)

#: How an int8 op's output parameters are chosen: ``"own"`` from its calibrated range, ``"same"`` its data
#: input's (the kernel requires them equal), or a fixed ``(scale, zero point)``.
INT8_OPS: dict[str, Any] = {
    **dict.fromkeys(("CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "ADD", "SUB", "MUL",
                     "MEAN", "CONCATENATION", "HARD_SWISH", "LEAKY_RELU", "GELU", "RSQRT"), "own"),
    "LOGISTIC": (1.0 / 256, -128), "TANH": (1.0 / 128, 0),
    **dict.fromkeys(("MAX_POOL_2D", "AVERAGE_POOL_2D", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "PAD",
                     "PADV2", "STRIDED_SLICE", "SLICE", "GATHER", "SPLIT", "RESIZE_NEAREST_NEIGHBOR",
                     "RESIZE_BILINEAR", "DEPTH_TO_SPACE"), "same"),
}
#: Ops with weights: ``(weights input, per-channel axis of the weights in TFLite layout (OHWI, 1HWC, OI), bias
#: input)``.
_WEIGHTS = {"CONV_2D": (1, 0, 2), "DEPTHWISE_CONV_2D": (1, 3, 2), "FULLY_CONNECTED": (1, 0, 2),
            "TRANSPOSE_CONV": (1, 0, 3)}
#: Ops whose every input is data (the others' data is their first input, SPLIT's its second).
_ALL_DATA = {"ADD", "SUB", "MUL", "CONCATENATION"}


def _data_inputs(op: Op) -> list[int]:
    """Positions of ``op``'s inputs that hold (float) data, weights and bias excluded."""
    if op.code in _ALL_DATA:
        return list(range(len(op.inputs)))
    if op.code == "SPLIT":
        return [1]
    if op.code == "TRANSPOSE_CONV":  # (output shape, weights, input, bias)
        return [2]
    if op.code == "PADV2":
        return [0, 2]  # (the pad value: quantized with the input's parameters)
    return [0]


#: Values past this magnitude (``torch.finfo(float32).min`` as a mask's "minus infinity") have no useful int8
#: code, and scales that large overflow the int8 kernels' fixed-point multipliers (the interpreter aborts): an op
#: whose range or constant reaches it stays float32, as one adding ``-inf`` does.
LARGEST = 1e9
#: The largest factor an int8 op may rescale by (see ``_Rewriter._int8_holds``).
MAX_RESCALE = 2.0 ** 16


def params(lo: float, hi: float) -> QuantParams:
    """Asymmetric int8 parameters covering ``[lo, hi]`` (widened to hold 0, as TFLite's converter does; an
    all-zero range takes [0, 1] and a range narrower than 1e-6 that width, keeping the kernels' scale ratios
    moderate)."""
    lo, hi = min(float(lo), 0.0), max(float(hi), 0.0)
    if hi - lo < 1e-6:
        hi = lo + (1.0 if hi == lo else 1e-6)
    scale = (hi - lo) / 255.0
    zero = int(np.clip(np.round(-128.0 - lo / scale), -128, 127))
    return QuantParams(np.array([scale], np.float32), np.array([zero], np.int64))


def _fixed(scale: float, zero: int) -> QuantParams:
    return QuantParams(np.array([scale], np.float32), np.array([zero], np.int64))


def _same(a: QuantParams, b: QuantParams) -> bool:
    return np.array_equal(a.scale, b.scale) and np.array_equal(a.zero_point, b.zero_point)


def _quantized_const(t: Tensor, p: QuantParams) -> Tensor:
    """The float constant ``t`` as int8 with parameters ``p``."""
    real = np.clip(np.asarray(t.data, np.float32), *_span(p))  # (a max pool's -inf padding: the lowest code)
    q = np.clip(np.round(real / p.scale[0]) + p.zero_point[0], -128, 127).astype(np.int8)
    return Tensor(t.shape, t.signature, _I8, f"{t.name}_int8", q, p)


def _span(p: QuantParams) -> tuple[float, float]:
    """The real values ``p``'s int8 codes cover."""
    return float(p.scale[0] * (-128 - p.zero_point[0])), float(p.scale[0] * (127 - p.zero_point[0]))


def is_activation(t: Any) -> bool:
    """Whether ``t`` is a float32 tensor an op computes (no constant): what int8 compute quantizes."""
    return t is not None and not t.is_const and np.dtype(t.dtype) == _F32


class _Rewriter:
    """One graph's rewrite (see the module docstring); ``ranges``: float activation → ``(min, max)``."""

    def __init__(self, graph: Graph, ranges: dict, int8_io: bool = False):
        self.graph, self.ranges, self.int8_io = graph, ranges, int8_io
        self.int8: dict[Tensor, Tensor] = {}  # float activation → its int8 twin
        self.results: dict[Tensor, Tensor] = {}  # int8 output of a rewritten op → the float tensor it replaced
        self.requantized: dict[tuple, Tensor] = {}  # (int8 tensor, scale, zero point) → requantized copy
        self.ops: list[Op] = []
        self.float_ops: list[str] = []

    def _twin(self, t: Tensor, p: QuantParams | None = None) -> Tensor:
        """``t``'s int8 twin (quantized here if none yet: a QUANTIZE op), with parameters ``p`` when given (a
        QUANTIZE of the twin requantizes it)."""
        q = self.int8.get(t)
        if q is None:
            q = self.int8[t] = Tensor(t.shape, t.signature, _I8, f"{t.name}_int8", quant=p or params(*self.ranges[t]))
            self.ops.append(Op("QUANTIZE", [t], [q]))
        if p is None or _same(q.quant, p):
            return q
        key = (q, float(p.scale[0]), int(p.zero_point[0]))
        r = self.requantized.get(key)
        if r is None:
            r = self.requantized[key] = Tensor(t.shape, t.signature, _I8, f"{t.name}_requantized", quant=p)
            self.ops.append(Op("QUANTIZE", [q], [r]))
        return r

    def _quantizable(self, op: Op) -> bool:
        rule = INT8_OPS.get(op.code)
        if rule is None or any(isinstance(v, Graph) for v in op.options.values()):
            return False
        data = [op.inputs[i] for i in _data_inputs(op) if i < len(op.inputs) and op.inputs[i] is not None]
        if not any(is_activation(t) for t in data) or any(np.dtype(t.dtype) != _F32 for t in data):
            return False
        if any(t not in self.ranges or not self._moderate(t) for t in data if not t.is_const):
            return False
        if any(t.is_const and not (np.abs(t.data) < LARGEST).all() for t in data) and op.code != "PADV2":
            return False  # (an attention mask's -inf: int8 has no code for it; a pool's -inf padding is the lowest)
        if rule == "same" and data[0] not in self.int8:  # (no island starts at a data-movement op)
            return False
        if any(not is_activation(t) or (rule == "own" and (t not in self.ranges or not self._moderate(t)))
               for t in op.outputs):
            return False
        if isinstance(rule, tuple) and not self._fills(op.outputs[0], rule[0]):
            return False
        if op.code in _WEIGHTS:
            wi, _, bi = _WEIGHTS[op.code]
            w = op.inputs[wi]
            b = op.inputs[bi] if len(op.inputs) > bi else None
            if w is None or not w.is_const or np.dtype(w.dtype) != _F32 or w.data.ndim < 2:
                return False
            if b is not None and (not b.is_const or np.dtype(b.dtype) != _F32):
                return False
        return rule == "same" or self._int8_holds(op, rule, data)

    def _input_scale(self, t: Tensor) -> float:
        """The scale ``t`` will have as an int8 input (its twin's, or its own range's)."""
        if t in self.int8:
            return float(self.int8[t].quant.scale[0])
        lo, hi = (t.data.min(), t.data.max()) if t.is_const else self.ranges[t]
        return float(params(lo, hi).scale[0])

    def _int8_holds(self, op: Op, rule: Any, data: list) -> bool:
        """Whether the op's int8 form holds what it computes: an ADD / SUB's constant is not below the output's
        resolution, and each factor the int8 kernel rescales by (an input's scale over the output's; a
        product's, a convolution's or FULLY_CONNECTED's ``input scale * weight scale`` over it) is at most
        :data:`MAX_RESCALE`: ADD's fixed-point output multiplier must stay below 1 (``2 * input scale / (2**20 *
        output scale)``), and a score of range 1e-7 plus a mask of range 1 aborted the interpreter."""
        out = rule[0] if isinstance(rule, tuple) else float(params(*self.ranges[op.outputs[0]]).scale[0])
        ins = [self._input_scale(t) for t in data]
        if op.code in ("ADD", "SUB") and any(t.is_const and 0 < np.abs(t.data).max() < out / 2 for t in data):
            return False  # (a layer norm's ``variance + eps``: eps rounds away, and a constant row's rsqrt(0) is inf)
        factors = ins if op.code != "MUL" else [float(np.prod(ins))]
        if op.code in _WEIGHTS:
            w = op.inputs[_WEIGHTS[op.code][0]].data
            factors = [ins[0] * float(np.abs(w).max()) / 127]
        return max(factors) / out <= MAX_RESCALE

    def _fills(self, t: Tensor, scale: float) -> bool:
        """Whether ``t``'s calibrated range spans 16 of the 256 codes of the fixed ``scale`` (a soft cap's
        ``tanh(x / 30)`` spans two: its int8 result is a handful of values, 30/128 apart)."""
        lo, hi = self.ranges.get(t, (0.0, 0.0))
        return hi - lo >= 16 * scale

    def _moderate(self, t: Tensor) -> bool:
        """Whether the calibrated range of ``t`` stays below :data:`LARGEST`."""
        lo, hi = self.ranges[t]
        return max(-lo, hi) < LARGEST

    def run(self) -> None:
        """Rewrite the graph's ops in place."""
        graph = self.graph
        for t in graph.inputs:  # (quantized first: a transpose or reshape of the input then moves int8 values)
            if is_activation(t) and t in self.ranges and self._moderate(t):
                self._twin(t)
        for op in graph.ops:
            if not self._quantizable(op):
                self.ops.append(op)
                if any(is_activation(t) for t in op.inputs if t is not None):
                    self.float_ops.append(op.code)
                continue
            self._quantize(op)
        read_as_float = {t for op in self.ops for t in op.inputs if t is not None} | set(graph.outputs)
        ops: list[Op] = []
        for op in self.ops:
            ops.append(op)
            for q in op.outputs:
                t = self.results.get(q)
                if t is not None and t in read_as_float:  # an int8 result a float op (or the caller) reads
                    ops.append(Op("DEQUANTIZE", [q], [t]))
        graph.ops = self._integer_io(ops) if self.int8_io else ops
        graph.remove_dead()

    def _integer_io(self, ops: list[Op]) -> list[Op]:
        """Make the graph's float32 inputs and outputs int8 (their int8 twins, which take their names; a float op
        reading an input reads its DEQUANTIZE); returns the ops."""
        graph = self.graph
        head: list[Op] = []
        for k, t in enumerate(graph.inputs):
            if not is_activation(t) or t not in self.ranges or not self._moderate(t):
                continue
            q = self.int8.get(t)
            if q is None:
                q = Tensor(t.shape, t.signature, _I8, t.name, quant=params(*self.ranges[t]))
            ops = [op for op in ops if not (op.code == "QUANTIZE" and op.outputs == [q])]
            q.name, t.name = t.name, f"{t.name}_dequantized"
            graph.inputs[k] = q
            head.append(Op("DEQUANTIZE", [q], [t]))  # (dropped as dead where no float op reads the input)
        produced = {t: op for op in ops for t in op.outputs}
        for k, t in enumerate(graph.outputs):
            if not is_activation(t) or t in graph.inputs:
                continue
            op = produced.get(t)
            if op is not None and op.code == "DEQUANTIZE" and op.inputs[0] not in graph.outputs:
                q = op.inputs[0]
            elif t in self.ranges and self._moderate(t):
                q = Tensor(t.shape, t.signature, _I8, t.name, quant=params(*self.ranges[t]))
                ops.append(Op("QUANTIZE", [t], [q]))
            else:
                continue
            q.name, t.name = t.name, f"{t.name}_float"
            graph.outputs[k] = q
            graph.output_dtypes[k] = _I8
        return head + ops

    def _quantize(self, op: Op) -> None:
        rule = INT8_OPS[op.code]
        data = [i for i in _data_inputs(op) if i < len(op.inputs) and op.inputs[i] is not None]
        first = op.inputs[data[0]]
        if rule == "same":
            out_params = self._twin(first).quant
        elif rule == "own":
            out_params = params(*self.ranges[op.outputs[0]])
        else:
            out_params = _fixed(*rule)
        for i in data:
            t = op.inputs[i]
            if t.is_const:  # (an ADD's constant operand, a PADV2's pad value)
                p = out_params if op.code in ("PADV2", "CONCATENATION") else params(t.data.min(), t.data.max())
                op.inputs[i] = _quantized_const(t, p)
            else:
                op.inputs[i] = self._twin(t, out_params if op.code == "CONCATENATION" else None)
        if op.code in _WEIGHTS:
            self._weights(op, op.inputs[data[0]].quant.scale[0])
        for j, o in enumerate(op.outputs):
            q = Tensor(o.shape, o.signature, _I8, f"{o.name}_int8", quant=out_params)
            self.int8[o] = q
            self.results[q] = o
            op.outputs[j] = q
        self.ops.append(op)

    def _weights(self, op: Op, in_scale: float) -> None:
        """Per-channel int8 weights and int32 bias (at ``in_scale`` × each channel's weight scale) of a convolution
        or FULLY_CONNECTED."""
        wi, axis, bi = _WEIGHTS[op.code]
        w = op.inputs[wi]
        q, w_scale = quantize_per_channel(w.data, axis)
        # an all-zero channel (an embedding's padding row, tied to the head) takes the largest other channel's scale:
        # its scale 1 next to the others' ~1e-4 crashed XNNPACK's int8 FULLY_CONNECTED (a double free)
        empty = ~np.moveaxis(q, axis, 0).reshape(q.shape[axis], -1).any(axis=1)
        if empty.any() and not empty.all():
            w_scale = np.where(empty, w_scale[~empty].max(), w_scale).astype(np.float32)
        zeros = np.zeros(w_scale.size, np.int64)
        op.inputs[wi] = Tensor(w.shape, w.signature, _I8, f"{w.name}_int8", q, QuantParams(w_scale, zeros, axis))
        b = op.inputs[bi] if len(op.inputs) > bi else None
        if b is not None:
            b_scale = (in_scale * w_scale.astype(np.float64)).astype(np.float32)
            qb = np.clip(np.round(np.asarray(b.data, np.float64) / b_scale), -2**31, 2**31 - 1).astype(np.int32)
            op.inputs[bi] = Tensor(b.shape, b.signature, _I32, f"{b.name}_int32", qb, QuantParams(b_scale, zeros, 0))


def quantize_int8(graph: Graph, ranges: dict, notes: list[str], int8_io: bool = False) -> None:
    """Rewrite ``graph`` for int8 compute (see the module docstring); ``ranges``: each calibrated float32
    activation → ``(min, max)``; ``int8_io``: the float32 inputs and outputs become int8 too. Notes which ops
    stayed float32."""
    rw = _Rewriter(graph, ranges, int8_io)
    rw.run()
    n = sum(1 for op in graph.ops if op.outputs and np.dtype(op.outputs[0].dtype) == _I8 and op.code != "QUANTIZE")
    left = sorted(set(rw.float_ops))
    edges = ("float32 inputs and outputs are int8 (the artifact's call quantizes and dequantizes them with the "
             "file's parameters; run_raw takes and gives the int8 values)" if int8_io else
             "inputs and outputs stay float32 (QUANTIZE / DEQUANTIZE at the edges)")
    notes.append(f"int8 full-integer quantization: {n} ops compute on int8 (activations per-tensor asymmetric, "
                 f"weights per-channel symmetric, biases int32); {edges}"
                 + (f"; float32 ops between DEQUANTIZE and QUANTIZE: {', '.join(left)}" if left else ""))


__all__ = ["INT8_OPS", "LARGEST", "MAX_RESCALE", "is_activation", "params", "quantize_int8"]
