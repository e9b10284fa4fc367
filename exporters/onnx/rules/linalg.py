"""dot_general → MatMul / MatMulInteger / Einsum; conv_general_dilated → Conv / ConvTranspose;
reduce_window max / sum → MaxPool / AveragePool."""

from __future__ import annotations

import itertools
import string
from typing import Any

import numpy as np
from jax.extend.core import primitives as lax
from onnx import TensorProto

from exporters.onnx.graph import OnnxGraph, Val, elem_type, is_static, onnx_dtype
from exporters.onnx.rules import Unsupported, out_aval, rule


def permuted(g: OnnxGraph, x: Val, perm: list[int]) -> str:
    """``x`` transposed by ``perm`` (folded now for constants of static shape; no node for the identity)."""
    if x.is_const and x.static:
        return g.const(np.transpose(x.full(), perm))
    t = g.tensor(x)
    return t if perm == list(range(x.rank)) else g.op("Transpose", [t], perm=perm)


#: Integer dtypes ONNX Runtime's MatMul and Einsum both take.
_DOT_INTS = (np.dtype(np.int32), np.dtype(np.int64))
_INT8 = (np.dtype(np.int8), np.dtype(np.uint8))


@rule(lax.dot_general_p)
def lower_dot_general(g: OnnxGraph, eqn: Any, lhs: Val, rhs: Val) -> Val:
    """dot_general → MatMul when the operands are (after a Transpose, free for weights)
    ``[batch…, M, K] × [batch…, K, N]`` or ``[…, K] × [K, N]``; Einsum otherwise.
    Integer operands ONNX Runtime cannot multiply: int8 / uint8 of a MatMul with an at most
    32-bit result → MatMulInteger (int32); others (and bool) are cast to int32 (int64 for a 64-bit
    result) first — exact, the result wraps to its dtype like XLA's. A result dtype other than
    the computed one adds a Cast."""
    aval = out_aval(eqn)
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lc, rc, lb, rb = [list(map(int, d)) for d in (lc, rc, lb, rb)]
    lf = [i for i in range(lhs.rank) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.rank) if i not in rc and i not in rb]
    matmul = len(lc) == 1 and len(rf) == 1 and ((not lb and lf) or (lb and len(lf) == 1))
    small = np.dtype(aval.dtype).itemsize <= 4
    integer = matmul and small and lhs.dtype in _INT8 and rhs.dtype in _INT8
    computed = np.dtype(np.int32) if integer else lhs.dtype
    if onnx_dtype(lhs.dtype).kind in "biu" and not integer and not (lhs.dtype in _DOT_INTS and rhs.dtype == lhs.dtype):
        computed = np.dtype(np.int32 if small else np.int64)
    if integer:
        out = g.op("MatMulInteger", [permuted(g, lhs, lb + lf + lc), permuted(g, rhs, rb + rc + rf)])
    elif matmul:
        a = g.cast(permuted(g, lhs, lb + lf + lc), lhs.dtype, computed)
        b = g.cast(permuted(g, rhs, rb + rc + rf), rhs.dtype, computed)
        out = g.op("MatMul", [a, b])
    else:
        letters = iter(string.ascii_letters)
        lsub, rsub = [""] * lhs.rank, [""] * rhs.rank
        for i, j in zip(lb, rb):
            lsub[i] = rsub[j] = next(letters)
        for i, j in zip(lc, rc):
            lsub[i] = rsub[j] = next(letters)
        for i in lf:
            lsub[i] = next(letters)
        for j in rf:
            rsub[j] = next(letters)
        osub = [lsub[i] for i in lb] + [lsub[i] for i in lf] + [rsub[j] for j in rf]
        eq = f"{''.join(lsub)},{''.join(rsub)}->{''.join(osub)}"
        out = g.op("Einsum", [g.cast(g.tensor(lhs), lhs.dtype, computed), g.cast(g.tensor(rhs), rhs.dtype, computed)],
                   equation=eq)
    out = g.cast(out, computed, aval.dtype)
    return g.val(out, aval.shape, aval.dtype)


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


@rule(lax.conv_general_dilated_p)
def lower_conv(g: OnnxGraph, eqn: Any, x: Val, w: Val) -> Val:
    """conv_general_dilated → Conv (strides, pads, dilations, group) in NC… layout (a negative pad: a Slice of the
    input first), with Transposes for other dimension numbers; lhs dilation (a transposed convolution) →
    ConvTranspose with the kernel flipped and regrouped at export time (constant kernels)."""
    aval = out_aval(eqn)
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = [list(map(int, s)) for s in (dn.lhs_spec, dn.rhs_spec, dn.out_spec)]
    if int(p.get("batch_group_count", 1)) != 1:
        raise Unsupported("conv_general_dilated with batch_group_count > 1")
    groups = int(p["feature_group_count"])
    strides = [int(s) for s in p["window_strides"]]
    pads = [(int(lo), int(hi)) for lo, hi in p["padding"]]
    lhs_dil = [int(d) for d in (p.get("lhs_dilation") or [1] * len(strides))]
    rhs_dil = [int(d) for d in (p.get("rhs_dilation") or [1] * len(strides))]
    xt = permuted(g, x, lhs_spec)
    if all(d == 1 for d in lhs_dil):
        crop = [i for i, (lo, hi) in enumerate(pads) if lo < 0 or hi < 0]
        if crop:  # a negative pad crops the input (a stride-1 transposed convolution padded past its kernel)
            xt = g.op("Slice", [xt, g.i64([max(-pads[i][0], 0) for i in crop]),
                                g.i64([pads[i][1] if pads[i][1] < 0 else 2 ** 62 for i in crop]),
                                g.i64([2 + i for i in crop])])
            pads = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
        wt = permuted(g, w, rhs_spec)
        out = g.op("Conv", [xt, wt], strides=strides, dilations=rhs_dil, group=groups,
                   pads=[lo for lo, _ in pads] + [hi for _, hi in pads])
    else:
        if not w.is_const or any(s != 1 for s in strides):
            raise Unsupported("a transposed convolution (lhs_dilation) needs a constant kernel and unit strides")
        k = np.transpose(w.full(), rhs_spec)  # (O, I/g, *k)
        ksz = k.shape[2:]
        k = np.flip(k, axis=tuple(range(2, k.ndim)))
        o, ig = k.shape[:2]
        k = k.reshape((groups, o // groups, ig) + ksz).swapaxes(1, 2).reshape((groups * ig, o // groups) + ksz)
        tpads, out_pad = [], []
        for (lo, hi), kk, d in zip(pads, ksz, rhs_dil):
            full = d * (kk - 1)
            tlo, thi = full - lo, full - hi
            if tlo < 0:
                raise Unsupported("a transposed convolution with more padding than the kernel reaches")
            tpads.append((tlo, max(thi, 0)))
            out_pad.append(max(-thi, 0))
        out = g.op("ConvTranspose", [xt, g.const(np.ascontiguousarray(k))], strides=lhs_dil, dilations=rhs_dil,
                   group=groups, pads=[lo for lo, _ in tpads] + [hi for _, hi in tpads],
                   output_padding=out_pad if any(out_pad) else None)
    inv = _inverse(out_spec)
    if inv != list(range(len(inv))):
        out = g.op("Transpose", [out], perm=inv)
    return g.val(g.cast(out, x.dtype, aval.dtype), aval.shape, aval.dtype)


def _pool_params(eqn: Any, rank: int) -> tuple[list, list, list, list]:
    p = eqn.params
    window = [int(d) for d in p["window_dimensions"]]
    strides = [int(s) for s in p["window_strides"]]
    padding = [(int(lo), int(hi)) for lo, hi in p["padding"]]
    base = [int(d) for d in (p.get("base_dilation") or [1] * rank)]
    wdil = [int(d) for d in (p.get("window_dilation") or [1] * rank)]
    if rank < 3 or window[:2] != [1, 1] or strides[:2] != [1, 1] or padding[:2] != [(0, 0), (0, 0)] \
            or wdil[:2] != [1, 1] or any(b != 1 for b in base):
        raise Unsupported(f"{eqn.primitive.name} over window {window} / strides {strides} is not an NC… pool "
                          "(ONNX pools the trailing spatial dims of NCHW-style tensors)")
    if any(v < 0 for pad in padding for v in pad):
        raise Unsupported(f"{eqn.primitive.name} with negative padding")
    pads = [lo for lo, _ in padding[2:]] + [hi for _, hi in padding[2:]]
    return window[2:], strides[2:], pads, wdil[2:]


@rule(lax.reduce_window_max_p)
def lower_reduce_window_max(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """reduce_window_max over the spatial dims of an NC… tensor → MaxPool (padding ignored, like -inf; a pad
    as large as the kernel: a Pad first, :func:`_pads_past_kernel`).
    ONNX Runtime's MaxPool takes floats, int8 and uint8: bool pools as uint8, other integers of up
    to 32 bits as float64 (exact), 64-bit integers (not exact in float64) as a variadic Max of one
    strided Slice per window offset of the input (padded with the dtype's minimum)."""
    aval = out_aval(eqn)
    kernel, strides, pads, dil = _pool_params(eqn, x.rank)
    t = g.tensor(x)
    if x.dtype.itemsize == 8 and onnx_dtype(x.dtype).kind in "iu":
        return g.val(_window_max(g, t, x, aval, kernel, strides, pads, dil), aval.shape, aval.dtype)
    pooled = np.dtype(np.uint8) if onnx_dtype(x.dtype).kind == "b" else \
        np.dtype(np.float64) if onnx_dtype(x.dtype).kind in "iu" and x.dtype not in _INT8 else x.dtype
    if pooled != x.dtype:  # a plain Cast: g.cast would narrow float64 to float32
        t = g.op("Cast", [t], to=TensorProto.DOUBLE if onnx_dtype(pooled).kind == "f" else TensorProto.UINT8)
    low = -np.inf if onnx_dtype(pooled).kind == "f" else np.iinfo(pooled).min
    t, pads = _pads_past_kernel(g, t, kernel, pads, np.asarray(low, pooled), narrow=pooled == x.dtype)
    out = g.op("MaxPool", [t], kernel_shape=kernel, strides=strides, pads=pads, dilations=dil)
    if pooled != x.dtype:
        out = g.op("Cast", [out], to=elem_type(x.dtype))
    return g.val(out, aval.shape, aval.dtype)


def _pads_past_kernel(g: OnnxGraph, t: str, kernel: list, pads: list, fill: np.ndarray,
                      narrow: bool = True) -> tuple[str, list]:
    """``(t, pads)`` for a pool whose pad reaches its kernel's size (a dilated window in ceil mode): ONNX Runtime's
    pools refuse such pads ("Pad should be smaller than kernel"), so ``t`` is padded with ``fill`` first and the
    pool takes none. Other pads are returned as they are. ``narrow``: ``fill`` is stored as the graph stores a
    value of its dtype (False: exactly that dtype, for a value cast to float64 here)."""
    n = len(kernel)
    if all(p < k for p, k in zip(pads, kernel + kernel)):
        return t, pads
    return g.op("Pad", [t, g.i64([0, 0] + pads[:n] + [0, 0] + pads[n:]), g.const(fill, narrow=narrow)]), [0] * (2 * n)


def _window_max(g: OnnxGraph, t: str, x: Val, aval: Any, kernel: list, strides: list, pads: list,
                dil: list) -> str:
    """Max pooling of any dtype ONNX's Max takes: a Max of ``prod(kernel)`` strided Slices."""
    n = len(kernel)
    out_sizes = list(aval.shape[2:])
    if not all(is_static(d) for d in out_sizes):
        raise Unsupported(f"max pooling of {x.dtype.name} with dynamic spatial dims")
    if any(pads):
        t = g.op("Pad", [t, g.i64([0, 0] + pads[:n] + [0, 0] + pads[n:]),
                         g.const(np.asarray(np.iinfo(x.dtype).min, x.dtype))])
    axes = g.i64(list(range(2, 2 + n)))
    parts = []
    for offset in itertools.product(*[range(k) for k in kernel]):
        starts = [o * d for o, d in zip(offset, dil)]
        ends = [s + (int(m) - 1) * st + 1 for s, m, st in zip(starts, out_sizes, strides)]
        parts.append(g.op("Slice", [t, g.i64(starts), g.i64(ends), axes, g.i64(strides)]))
    return parts[0] if len(parts) == 1 else g.op("Max", parts)


@rule(lax.reduce_window_sum_p)
def lower_reduce_window_sum(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """reduce_window_sum over the spatial dims of an NC… tensor → AveragePool(count_include_pad=1)
    times the window size."""
    aval = out_aval(eqn)
    if onnx_dtype(x.dtype).kind != "f":
        raise Unsupported(f"reduce_window_sum of {x.dtype.name}")
    kernel, strides, pads, dil = _pool_params(eqn, x.rank)
    t, pads = _pads_past_kernel(g, g.tensor(x), kernel, pads, np.asarray(0, x.dtype))
    out = g.op("AveragePool", [t], kernel_shape=kernel, strides=strides, pads=pads, dilations=dil,
               count_include_pad=1)
    out = g.op("Mul", [out, g.const(np.asarray(float(np.prod(kernel)), aval.dtype))])
    return g.val(out, aval.shape, aval.dtype)
