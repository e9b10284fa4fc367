"""dot_general → MatMul / Einsum; conv_general_dilated → Conv / ConvTranspose;
reduce_window max / sum → MaxPool / AveragePool."""

from __future__ import annotations

import string
from typing import Any

import numpy as np
from jax.extend.core import primitives as lax

from exporters.onnx.graph import OnnxGraph, Val
from exporters.onnx.rules import Unsupported, out_aval, rule


def permuted(g: OnnxGraph, x: Val, perm: list[int]) -> str:
    """``x`` transposed by ``perm`` (folded now for constants; no node for the identity)."""
    if x.is_const:
        return g.const(np.transpose(x.full(), perm))
    t = g.tensor(x)
    return t if perm == list(range(x.rank)) else g.op("Transpose", [t], perm=perm)


@rule(lax.dot_general_p)
def lower_dot_general(g: OnnxGraph, eqn: Any, lhs: Val, rhs: Val) -> Val:
    """dot_general → MatMul when the operands are (after a Transpose, free for weights)
    ``[batch…, M, K] × [batch…, K, N]`` or ``[…, K] × [K, N]``; Einsum otherwise.
    A different ``preferred_element_type`` adds a Cast."""
    aval = out_aval(eqn)
    (lc, rc), (lb, rb) = eqn.params["dimension_numbers"]
    lc, rc, lb, rb = [list(map(int, d)) for d in (lc, rc, lb, rb)]
    lf = [i for i in range(lhs.rank) if i not in lc and i not in lb]
    rf = [i for i in range(rhs.rank) if i not in rc and i not in rb]
    if len(lc) == 1 and len(rf) == 1 and ((not lb and lf) or (lb and len(lf) == 1)):
        a = permuted(g, lhs, lb + lf + lc)
        b = permuted(g, rhs, rb + rc + rf)
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
        out = g.op("Einsum", [g.tensor(lhs), g.tensor(rhs)], equation=eq)
    out = g.cast(out, lhs.dtype, aval.dtype)
    return g.val(out, aval.shape, aval.dtype)


def _inverse(perm: list[int]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


@rule(lax.conv_general_dilated_p)
def lower_conv(g: OnnxGraph, eqn: Any, x: Val, w: Val) -> Val:
    """conv_general_dilated → Conv (strides, pads, dilations, group) in NC… layout, with
    Transposes for other dimension numbers; lhs dilation (a transposed convolution) →
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
        if any(v < 0 for pad in pads for v in pad):
            raise Unsupported("conv_general_dilated with negative padding")
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
    """reduce_window_max over the spatial dims of an NC… tensor → MaxPool (padding ignored, like -inf)."""
    aval = out_aval(eqn)
    kernel, strides, pads, dil = _pool_params(eqn, x.rank)
    out = g.op("MaxPool", [g.tensor(x)], kernel_shape=kernel, strides=strides, pads=pads, dilations=dil)
    return g.val(out, aval.shape, aval.dtype)


@rule(lax.reduce_window_sum_p)
def lower_reduce_window_sum(g: OnnxGraph, eqn: Any, x: Val) -> Val:
    """reduce_window_sum over the spatial dims of an NC… tensor → AveragePool(count_include_pad=1)
    times the window size."""
    aval = out_aval(eqn)
    if x.dtype.kind != "f":
        raise Unsupported(f"reduce_window_sum of {x.dtype.name}")
    kernel, strides, pads, dil = _pool_params(eqn, x.rank)
    out = g.op("AveragePool", [g.tensor(x)], kernel_shape=kernel, strides=strides, pads=pads, dilations=dil,
               count_include_pad=1)
    out = g.op("Mul", [out, g.const(np.asarray(float(np.prod(kernel)), aval.dtype))])
    return g.val(out, aval.shape, aval.dtype)
