"""ATen composites → ONNX operators of the same meaning (Gelu, LayerNormalization, Softmax, …).

A rule gets the composite's attributes (named after the ATen schema arguments,
``operands`` listing the tensor operands) and returns ``None`` to decline, in which
case the composite's decomposition is lowered instead — so a rule only handles the
cases its operator matches exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from exporters.onnx.graph import OnnxGraph, Val, is_static, onnx_dtype
from exporters.onnx.rules import composite, out_aval


def named(attrs: dict, vals: tuple) -> dict[str, Val]:
    """Map the composite's tensor operands to their schema names."""
    names = [n for n in str(attrs.get("operands", "")).split(",") if n]
    return dict(zip(names, vals))


def _float_like(eqn: Any, x: Val | None) -> bool:
    return x is not None and onnx_dtype(x.dtype).kind == "f" and np.dtype(out_aval(eqn).dtype) == x.dtype


@composite("aten.gelu")
def lower_gelu(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """gelu(Tensor self, *, str approximate='none') → Gelu(approximate) (opset 20)."""
    if not _float_like(eqn, x):
        return None
    approx = "tanh" if attrs.get("approximate", "none") == "tanh" else "none"
    return g.val(g.op("Gelu", [g.tensor(x, expand=False)], approximate=approx), x.shape, x.dtype, x.base)


@composite("aten.hardswish")
def lower_hardswish(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """hardswish(Tensor self) → HardSwish."""
    if not _float_like(eqn, x):
        return None
    return g.val(g.op("HardSwish", [g.tensor(x, expand=False)]), x.shape, x.dtype, x.base)


def _softmax(g: OnnxGraph, eqn: Any, attrs: dict, x: Val, op: str) -> Val | None:
    if not _float_like(eqn, x) or x.rank == 0:
        return None
    axis = int(attrs.get("dim", -1)) % x.rank
    return g.val(g.op(op, [g.tensor(x)], axis=axis), x.shape, x.dtype)


@composite("aten._softmax", "aten.softmax")
def lower_softmax(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """_softmax(Tensor self, int dim, bool half_to_float) → Softmax(axis)."""
    return _softmax(g, eqn, attrs, x, "Softmax")


@composite("aten._log_softmax", "aten.log_softmax")
def lower_log_softmax(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """_log_softmax(Tensor self, int dim, bool half_to_float) → LogSoftmax(axis)."""
    return _softmax(g, eqn, attrs, x, "LogSoftmax")


@composite("aten.layer_norm")
def lower_layer_norm(g: OnnxGraph, eqn: Any, attrs: dict, *vals: Val) -> Val | None:
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps,
    bool cudnn_enable) → LayerNormalization(axis=-len(normalized_shape), epsilon) (ones for a
    missing weight)."""
    ops = named(attrs, vals)
    x, w, b = ops.get("input"), ops.get("weight"), ops.get("bias")
    if not _float_like(eqn, x):
        return None
    k = len(np.atleast_1d(attrs.get("normalized_shape", [])))
    norm_shape = x.shape[x.rank - k:]
    if w is None:
        if not all(is_static(d) for d in norm_shape):
            return None
        w = Val(norm_shape, x.dtype, const=np.ones([int(d) for d in norm_shape], x.dtype))
    inputs = [g.tensor(x), g.tensor(w)] + ([g.tensor(b)] if b is not None else [])
    out = g.op("LayerNormalization", inputs, axis=-k, epsilon=float(attrs.get("eps", 1e-5)))
    return g.val(out, x.shape, x.dtype)


@composite("aten.embedding")
def lower_embedding(g: OnnxGraph, eqn: Any, attrs: dict, *vals: Val) -> Val | None:
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx, bool scale_grad_by_freq,
    bool sparse) → Gather(weight, indices, axis=0)."""
    ops = named(attrs, vals)
    w, idx = ops.get("weight"), ops.get("indices")
    if w is None or idx is None or w.rank != 2 or onnx_dtype(idx.dtype).kind not in "iu":
        return None
    aval = out_aval(eqn)
    it = g.cast(g.tensor(idx), idx.dtype, np.int64)
    return g.val(g.op("Gather", [g.tensor(w), it], axis=0), aval.shape, aval.dtype)


def _pads(attrs: dict, rank: int) -> list[int] | None:
    """ONNX ``pads`` (all begins, then all ends) from a torch ``padding`` list (last dim first)."""
    padding = [int(v) for v in np.atleast_1d(attrs.get("padding", []))]
    lo, hi = [0] * rank, [0] * rank
    for i in range(len(padding) // 2):
        lo[rank - 1 - i], hi[rank - 1 - i] = padding[2 * i], padding[2 * i + 1]
    return None if any(v < 0 for v in lo + hi) else lo + hi


def _edge_pad(g: OnnxGraph, eqn: Any, attrs: dict, x: Val, mode: str) -> Val | None:
    pads = _pads(attrs, x.rank)
    if pads is None:
        return None
    aval = out_aval(eqn)
    return g.val(g.op("Pad", [g.tensor(x), g.i64(pads)], mode=mode), aval.shape, aval.dtype)


@composite("aten.reflection_pad1d", "aten.reflection_pad2d", "aten.reflection_pad3d")
def lower_reflection_pad(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """reflection_pad2d(Tensor self, SymInt[4] padding) (and 1d/3d) → Pad(mode=reflect)."""
    return _edge_pad(g, eqn, attrs, x, "reflect")


@composite("aten.replication_pad1d", "aten.replication_pad2d", "aten.replication_pad3d")
def lower_replication_pad(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """replication_pad2d(Tensor self, SymInt[4] padding) (and 1d/3d) → Pad(mode=edge)."""
    return _edge_pad(g, eqn, attrs, x, "edge")


def _resize(g: OnnxGraph, eqn: Any, attrs: dict, x: Val, **options: Any) -> Val | None:
    aval = out_aval(eqn)
    if x.rank != 4 or onnx_dtype(x.dtype).kind != "f" or not all(is_static(d) for d in aval.shape[2:]) \
            or not all(is_static(d) for d in x.shape[2:]):
        return None
    scales = attrs.get("scale_factors")
    if scales is not None and len(np.atleast_1d(scales)) == 2:
        # torch steps by 1/scale_factor when given; ONNX by the given scales: the same.
        sc = np.asarray([1.0, 1.0] + [float(s) for s in np.atleast_1d(scales)], np.float32)
        out = g.op("Resize", [g.tensor(x), "", g.const(sc)], **options)
    else:
        sizes = g.op("Concat", [g.op("Shape", [g.tensor(x)], start=0, end=2),
                                g.i64([int(d) for d in aval.shape[2:]])], axis=0)
        out = g.op("Resize", [g.tensor(x), "", "", sizes], **options)
    return g.val(out, aval.shape, aval.dtype)


@composite("aten.upsample_nearest2d")
def lower_upsample_nearest2d(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """upsample_nearest2d.vec(Tensor input, SymInt[]? output_size, float[]? scale_factors)
    → Resize(nearest, asymmetric, floor): src = floor(dst / scale), like torch."""
    return _resize(g, eqn, attrs, x, mode="nearest", coordinate_transformation_mode="asymmetric",
                   nearest_mode="floor")


@composite("aten.upsample_bilinear2d")
def lower_upsample_bilinear2d(g: OnnxGraph, eqn: Any, attrs: dict, x: Val) -> Val | None:
    """upsample_bilinear2d.vec(Tensor input, SymInt[]? output_size, bool align_corners,
    float[]? scale_factors) → Resize(linear, pytorch_half_pixel or align_corners)."""
    ac = bool(attrs.get("align_corners", False))
    return _resize(g, eqn, attrs, x, mode="linear",
                   coordinate_transformation_mode="align_corners" if ac else "pytorch_half_pixel")
