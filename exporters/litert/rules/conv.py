"""Convolutions and pooling: conv_general_dilated → CONV_2D / DEPTHWISE_CONV_2D (constant kernels, or ones
computed at run time) / TRANSPOSE_CONV (grouped: one per group + CONCATENATION) / CONV_3D / CONV_3D_TRANSPOSE,
reduce_window_{max,sum,min} → MAX_POOL_2D / AVERAGE_POOL_2D (3-D windows: separable strided slices).

Inputs are requested in NHWC (``perm`` puts batch, spatial, feature) and outputs
are NHWC values, so consecutive layers need no TRANSPOSE. 1-D convolutions and
pools run as 2-D ones with a height of 1. Weights are transposed to the TFLite
layouts at conversion time; every conv gets a bias tensor (zeros when the model
has none) so the fusion pass can fold a following bias add / BatchNorm into it.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
from ai_edge_litert import schema_py_generated as schema
from jax.extend.core import primitives as prims

from exporters.litert.emitter import Emitter, Val, is_static, tfl_dtype
from exporters.litert.rules import Unsupported, out_aval, rule
from exporters.litert.rules.reduce import monoid
from exporters.litert.rules.shape import i32

SAME, VALID = schema.Padding.SAME, schema.Padding.VALID


def same_padding(size: Any, k: int, s: int, d: int = 1) -> tuple[int, int] | None:
    """TFLite's SAME padding (lo, hi) for one spatial dim, ``None`` if the size is dynamic."""
    eff = (k - 1) * d + 1
    if not is_static(size):
        return ((eff - 1) // 2, eff - 1 - (eff - 1) // 2) if s == 1 else None
    out = -(-int(size) // s)
    total = max((out - 1) * s + eff - int(size), 0)
    return total // 2, total - total // 2


def choose_padding(sizes: Sequence, ks: Sequence, ss: Sequence, ds: Sequence,
                   pads: Sequence) -> tuple[int, list | None]:
    """(TFLite padding enum, explicit [(lo, hi)] to PAD first or ``None``)."""
    pads = [tuple(int(v) for v in p) for p in pads]
    if all(p == (0, 0) for p in pads):
        return VALID, None
    if all(same_padding(n, k, s, d) == p for n, k, s, d, p in zip(sizes, ks, ss, ds, pads)):
        return SAME, None
    return VALID, pads


def _nhwc(em: Emitter, x: Val, batch: int, feature: int, spatial: list[int], pad_value: float = 0.0,
          pads: list | None = None) -> tuple[Any, list]:
    """The NHWC (4-D) tensor of ``x`` and its dims, with explicit padding applied (a negative pad crops:
    :func:`_cut_negative_pads`)."""
    perm = tuple([batch] + spatial + [feature])
    t = em.tensor_of(x, perm, expand=True)
    dims = [x.shape[i] for i in perm]
    if len(spatial) == 1:
        dims = [dims[0], 1, dims[1], dims[2]]
        t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, x.dtype)
        pads = None if pads is None else [(0, 0)] + list(pads)
    t, dims, pads = _cut_negative_pads(em, t, dims, pads, x.dtype)
    if pads is not None:
        dims = [dims[0], dims[1] + sum(pads[0]), dims[2] + sum(pads[1]), dims[3]]
        table = em.const(i32([[0, 0], list(pads[0]), list(pads[1]), [0, 0]]))
        if pad_value == 0:
            t = em.emit("PAD", [t, table], dims, x.dtype)
        else:
            t = em.emit("PADV2", [t, table, em.const(np.asarray([pad_value], x.dtype))], dims, x.dtype)
    return t, dims


def _cut_negative_pads(em: Emitter, t: Any, dims: list, pads: list | None,
                       dtype: Any) -> tuple[Any, list, list | None]:
    """``(t, dims, pads)`` with the negative ``(lo, hi)`` pads of a channels-last ``t``'s spatial dims (``dims[1:-1]``)
    applied as a SLICE (a stride-1 transposed convolution padded past its kernel crops: TFLite's PAD takes no
    negative pad), and the pads left to apply (``None``: none)."""
    if pads is None or all(v >= 0 for q in pads for v in q):
        return t, dims, pads
    t, dims = _cut(em, t, dims, [(max(-lo, 0), max(-hi, 0)) for lo, hi in pads], dtype)
    pads = [(max(lo, 0), max(hi, 0)) for lo, hi in pads]
    return t, dims, None if all(q == (0, 0) for q in pads) else pads


def _cut(em: Emitter, t: Any, dims: list, cut: Sequence, dtype: Any) -> tuple[Any, list]:
    """``(t, dims)`` with ``cut``'s ``(lo, hi)`` elements sliced off each spatial dim of a channels-last ``t``
    (``dims``: N, spatial…, C; a dynamic batch is kept whole)."""
    if not any(c for pair in cut for c in pair):
        return t, dims
    size = [dims[0]] + [n - sum(c) for n, c in zip(dims[1:-1], cut)] + [dims[-1]]
    begin = i32([0] + [c[0] for c in cut] + [0])
    if not all(is_static(n) for n in size[1:]):  # a dynamic spatial dim: its end counted from the end (-hi)
        end = i32([0] + [-c[1] for c in cut] + [0])
        whole = 1 | (1 << (len(size) - 1)) | sum(1 << (i + 1) for i, c in enumerate(cut) if not c[1])
        return em.emit("STRIDED_SLICE", [t, em.const(begin), em.const(end), em.const(i32([1] * len(size)))], size,
                       dtype, endMask=whole), size
    sz = i32([-1 if not is_static(size[0]) else size[0]] + size[1:])
    return em.emit("SLICE", [t, em.const(begin), em.const(sz)], size, dtype), size


def _result(em: Emitter, t: Any, aval: Any, batch: int, feature: int, spatial: list[int]) -> Val:
    """Wrap an NHWC result tensor as a value of logical shape ``aval.shape``."""
    perm = tuple([batch] + spatial + [feature])
    if len(spatial) == 1:
        dims = [aval.shape[i] for i in perm]
        t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, aval.dtype)
    return Val(aval.shape, aval.dtype, tensor=t, perm=perm)


@rule(prims.conv_general_dilated_p)
def lower_conv(em: Emitter, eqn: Any, x: Val, w: Val) -> Val:
    """conv_general_dilated (1-D/2-D) → CONV_2D, DEPTHWISE_CONV_2D, TRANSPOSE_CONV or grouped CONV_2Ds."""
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = list(dn.lhs_spec), list(dn.rhs_spec), list(dn.out_spec)
    nsp = len(lhs_spec) - 2
    if nsp not in (1, 2, 3):
        raise Unsupported(f"{nsp}-D convolution")
    if p["batch_group_count"] != 1:
        raise Unsupported("convolution with batch_group_count > 1")
    if not w.is_const and (nsp == 3 or any(d != 1 for d in p["lhs_dilation"])):
        raise Unsupported("a 3-D or transposed convolution with non-constant weights")
    if nsp == 3:
        return _conv3d(em, eqn, x, w)
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    groups = int(p["feature_group_count"])
    strides, rdil, ldil = list(p["window_strides"]), list(p["rhs_dilation"]), list(p["lhs_dilation"])
    pads = list(p["padding"])
    in_sizes = [x.shape[d] for d in lhs_spec[2:]]
    if w.is_const:  # kernel as (O, I, *spatial)
        k = np.transpose(w.full(), [rhs_spec[0], rhs_spec[1]] + rhs_spec[2:]).astype(dtype)
        kshape = k.shape
    else:
        k, kshape = None, tuple(w.shape[d] for d in [rhs_spec[0], rhs_spec[1]] + rhs_spec[2:])
        if not all(is_static(d) for d in kshape):
            raise Unsupported("convolution with non-constant weights of a dynamic shape")
        kshape = tuple(int(d) for d in kshape)
    if nsp == 1:  # promote 1-D to 2-D
        k = None if k is None else k[:, :, None, :]
        kshape = kshape[:2] + (1,) + kshape[2:]
        strides, rdil, ldil, pads, in_sizes = [1] + strides, [1] + rdil, [1] + ldil, [(0, 0)] + pads, [1] + in_sizes
    cout, cin_g, kh, kw = kshape
    batch, feature, spatial = lhs_spec[0], lhs_spec[1], lhs_spec[2:]
    if any(d != 1 for d in ldil):
        return _transpose_conv(em, eqn, x, k, strides, ldil, rdil, pads, groups, lhs_spec, out_spec)
    padding, explicit = choose_padding(in_sizes, [kh, kw], strides, rdil, pads)
    t, _ = _nhwc(em, x, batch, feature, spatial, 0.0, explicit[-nsp:] if explicit and nsp == 1 else explicit)
    out_dims = [aval.shape[out_spec[0]]] + ([1] if nsp == 1 else []) + \
        [aval.shape[d] for d in out_spec[2:]] + [aval.shape[out_spec[1]]]
    common = dict(padding=padding, strideH=strides[0], strideW=strides[1],
                  dilationHFactor=rdil[0], dilationWFactor=rdil[1])
    cin = cin_g * groups
    if k is None and groups != 1 and not (groups == cin and cin_g == 1):
        raise Unsupported("a grouped convolution with non-constant weights")
    if groups == 1:
        filt = em.const(k.transpose(0, 2, 3, 1)) if k is not None else _runtime_filter(em, w, rhs_spec, kshape, False)
        out = em.emit("CONV_2D", [t, filt, em.const(np.zeros(cout, dtype))], out_dims, dtype, **common)
    elif groups == cin and cin_g == 1:
        filt = em.const(k.transpose(1, 2, 3, 0)) if k is not None else _runtime_filter(em, w, rhs_spec, kshape, True)
        out = em.emit("DEPTHWISE_CONV_2D", [t, filt, em.const(np.zeros(cout, dtype))],
                      out_dims, dtype, depthMultiplier=cout // cin, **common)
    else:
        parts = [em.tensor(out_dims[:3] + [cin_g], dtype, "group") for _ in range(groups)]
        em.op("SPLIT", [em.const(np.asarray(3, np.int32)), t], parts, numSplits=groups)
        og = cout // groups
        outs = [em.emit("CONV_2D", [part, em.const(k[g * og:(g + 1) * og].transpose(0, 2, 3, 1)),
                                    em.const(np.zeros(og, dtype))], out_dims[:3] + [og], dtype, **common)
                for g, part in enumerate(parts)]
        out = em.emit("CONCATENATION", outs, out_dims, dtype, axis=3)
        em.note("grouped convolutions are split into one CONV_2D per group")
    return _result(em, out, aval, out_spec[0], out_spec[1], out_spec[2:])


def _runtime_filter(em: Emitter, w: Val, rhs_spec: list, kshape: tuple, depthwise: bool) -> Any:
    """The filter tensor of weights computed at run time (a kernel a network predicts): OHWI for CONV_2D, 1HWO
    for DEPTHWISE_CONV_2D, in the weight value's layout TRANSPOSEd at run time (``kshape``: O, I, H, W, a 1-D
    kernel's H being 1)."""
    o, i, sp = rhs_spec[0], rhs_spec[1], rhs_spec[2:]
    perm = (i, *sp, o) if depthwise else (o, *sp, i)
    t = em.tensor_of(w, perm, expand=True)
    cout, cin_g, kh, kw = kshape
    dims = [1, kh, kw, cout] if depthwise else [cout, kh, kw, cin_g]
    if len(sp) == 1:  # (the 1-D kernel gains its unit height)
        t = em.emit("RESHAPE", [t, em.shape_operand(dims)], dims, w.dtype)
    return t


def _transpose_conv(em: Emitter, eqn: Any, x: Val, k: np.ndarray, strides: list, ldil: list, rdil: list,
                    pads: list, groups: int, lhs_spec: list, out_spec: list) -> Val:
    """A fractionally strided conv (lhs_dilation > 1) → TRANSPOSE_CONV + crop/pad.

    Kernel dilation is applied to the weights (zeros between taps); groups split the
    input with SPLIT and run one TRANSPOSE_CONV per group, joined by CONCATENATION.
    """
    if any(s != 1 for s in strides):
        raise Unsupported("transposed convolution with window strides (a strided conv of a dilated input)")
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    nsp = len(lhs_spec) - 2
    if any(d != 1 for d in rdil):
        dil = np.zeros(k.shape[:2] + tuple((n - 1) * d + 1 for n, d in zip(k.shape[2:], rdil)), k.dtype)
        dil[:, :, ::rdil[0], ::rdil[1]] = k
        k = dil
    cout, cin_g, kh, kw = k.shape
    t, dims = _nhwc(em, x, lhs_spec[0], lhs_spec[1], lhs_spec[2:])
    full = [dims[0], (dims[1] - 1) * ldil[0] + kh, (dims[2] - 1) * ldil[1] + kw, cout]
    weights = np.ascontiguousarray(k[:, :, ::-1, ::-1].transpose(0, 2, 3, 1))
    opts = dict(padding=VALID, strideH=ldil[0], strideW=ldil[1])
    if groups == 1:
        out = em.emit("TRANSPOSE_CONV", [em.shape_tensor(full), em.const(weights), t,
                                         em.const(np.zeros(cout, dtype))], full, dtype, **opts)
    else:
        og = cout // groups
        parts = [em.tensor(dims[:3] + [cin_g], dtype, "group") for _ in range(groups)]
        em.op("SPLIT", [em.const(np.asarray(3, np.int32)), t], parts, numSplits=groups)
        part_dims = full[:3] + [og]
        outs = [em.emit("TRANSPOSE_CONV", [em.shape_tensor(part_dims), em.const(weights[g * og:(g + 1) * og]), part,
                                           em.const(np.zeros(og, dtype))], part_dims, dtype, **opts)
                for g, part in enumerate(parts)]
        out = em.emit("CONCATENATION", outs, full, dtype, axis=3)
        em.note("grouped transposed convolutions are split into one TRANSPOSE_CONV per group")
    out = _crop(em, out, full, [kh, kw], pads, dtype)
    return _result(em, out, aval, out_spec[0], out_spec[1], out_spec[2:] if nsp == 2 else out_spec[2:])


def _crop(em: Emitter, out: Any, full: list, ks: Sequence, pads: Sequence, dtype: Any) -> Any:
    """Cut the VALID transposed-conv result ``out`` (``full``: N, spatial…, C) to the conv's
    padding: ``k - 1 - pad`` off each side (a PAD first where that is negative)."""
    crop = [(k - 1 - lo, k - 1 - hi) for k, (lo, hi) in zip(ks, pads)]
    if any(c < 0 for pair in crop for c in pair):
        grow = [[0, 0]] + [[max(-a, 0), max(-b, 0)] for a, b in crop] + [[0, 0]]
        full = [full[0]] + [n + sum(g) for n, g in zip(full[1:-1], grow[1:-1])] + [full[-1]]
        out = em.emit("PAD", [out, em.const(i32(grow))], full, dtype)
        crop = [(max(a, 0), max(b, 0)) for a, b in crop]
    return _cut(em, out, full, crop, dtype)[0]


def _transpose_conv3d(em: Emitter, eqn: Any, x: Val, k: np.ndarray, ldil: list, rdil: list, pads: list,
                      groups: int, lhs_spec: list, out_spec: list) -> Val:
    """A fractionally strided 3-D conv → CONV_3D_TRANSPOSE (filter [d, h, w, out, in]) + crop/pad,
    one per group; kernel dilation is applied to the weights."""
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    if any(d != 1 for d in rdil):
        dil = np.zeros(k.shape[:2] + tuple((n - 1) * d + 1 for n, d in zip(k.shape[2:], rdil)), k.dtype)
        dil[:, :, ::rdil[0], ::rdil[1], ::rdil[2]] = k
        k = dil
    cout, cin_g = k.shape[:2]
    perm = tuple([lhs_spec[0]] + lhs_spec[2:] + [lhs_spec[1]])
    t = em.tensor_of(x, perm, expand=True)
    dims = [x.shape[i] for i in perm]
    og = cout // groups
    full = [dims[0]] + [(n - 1) * s + kk for n, s, kk in zip(dims[1:4], ldil, k.shape[2:])] + [cout]
    weights = np.ascontiguousarray(k[:, :, ::-1, ::-1, ::-1].transpose(2, 3, 4, 0, 1))  # (d, h, w, O, I/g)
    opts = dict(padding=VALID, strideD=ldil[0], strideH=ldil[1], strideW=ldil[2])
    parts = [t]
    if groups > 1:
        parts = [em.tensor(dims[:4] + [cin_g], dtype, "group") for _ in range(groups)]
        em.op("SPLIT", [em.const(np.asarray(4, np.int32)), t], parts, numSplits=groups)
        em.note("grouped 3-D transposed convolutions are split into one CONV_3D_TRANSPOSE per group")
    outs = [em.emit("CONV_3D_TRANSPOSE", [em.shape_tensor(full[:4] + [og]), em.const(weights[..., g * og:(g + 1) * og, :]),
                                          part, em.const(np.zeros(og, dtype))], full[:4] + [og], dtype,
                    "Conv3DOptions", **opts) for g, part in enumerate(parts)]
    out = outs[0] if groups == 1 else em.emit("CONCATENATION", outs, full, dtype, axis=4)
    out = _crop(em, out, full, k.shape[2:], pads, dtype)
    out_perm = tuple([out_spec[0]] + out_spec[2:] + [out_spec[1]])
    return Val(aval.shape, aval.dtype, tensor=out, perm=out_perm)


def _conv3d(em: Emitter, eqn: Any, x: Val, w: Val) -> Val:
    """3-D conv_general_dilated → CONV_3D on NDHWC activations, filter [d, h, w, in, out] (DHWIO);
    explicit padding becomes a PAD first (a negative pad a SLICE: :func:`_cut_negative_pads`); groups split the
    input (one CONV_3D per group)."""
    p = eqn.params
    dn = p["dimension_numbers"]
    lhs_spec, rhs_spec, out_spec = list(dn.lhs_spec), list(dn.rhs_spec), list(dn.out_spec)
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    groups = int(p["feature_group_count"])
    strides, rdil, pads = list(p["window_strides"]), list(p["rhs_dilation"]), list(p["padding"])
    k = np.transpose(w.full(), [rhs_spec[0], rhs_spec[1]] + rhs_spec[2:]).astype(dtype)  # (O, I/g, d, h, w)
    if any(d != 1 for d in p["lhs_dilation"]):
        if any(s != 1 for s in strides):
            raise Unsupported("transposed convolution with window strides (a strided conv of a dilated input)")
        return _transpose_conv3d(em, eqn, x, k, list(p["lhs_dilation"]), rdil, pads, groups, lhs_spec, out_spec)
    cout, cin_g = k.shape[:2]
    perm = tuple([lhs_spec[0]] + lhs_spec[2:] + [lhs_spec[1]])
    t = em.tensor_of(x, perm, expand=True)
    dims = [x.shape[i] for i in perm]
    padding, explicit = choose_padding(dims[1:4], k.shape[2:], strides, rdil, pads)
    t, dims, explicit = _cut_negative_pads(em, t, dims, explicit, x.dtype)
    if explicit is not None:
        dims = [dims[0]] + [n + lo + hi for n, (lo, hi) in zip(dims[1:4], explicit)] + [dims[4]]
        t = em.emit("PAD", [t, em.const(i32([[0, 0]] + [list(q) for q in explicit] + [[0, 0]]))], dims, x.dtype)
    out_perm = tuple([out_spec[0]] + out_spec[2:] + [out_spec[1]])
    out_dims = [aval.shape[i] for i in out_perm]
    opts = dict(padding=padding, strideD=strides[0], strideH=strides[1], strideW=strides[2],
                dilationDFactor=rdil[0], dilationHFactor=rdil[1], dilationWFactor=rdil[2])
    og = cout // groups
    filt = k.transpose(2, 3, 4, 1, 0)  # (d, h, w, I/g, O)
    if groups == 1:
        out = em.emit("CONV_3D", [t, em.const(filt), em.const(np.zeros(cout, dtype))], out_dims, dtype,
                      "Conv3DOptions", **opts)
    else:
        parts = [em.tensor(dims[:4] + [cin_g], dtype, "group") for _ in range(groups)]
        em.op("SPLIT", [em.const(np.asarray(4, np.int32)), t], parts, numSplits=groups)
        outs = [em.emit("CONV_3D", [part, em.const(filt[..., g * og:(g + 1) * og]), em.const(np.zeros(og, dtype))],
                        out_dims[:4] + [og], dtype, "Conv3DOptions", **opts) for g, part in enumerate(parts)]
        out = em.emit("CONCATENATION", outs, out_dims, dtype, axis=4)
        em.note("grouped 3-D convolutions are split into one CONV_3D per group")
    return Val(aval.shape, aval.dtype, tensor=out, perm=out_perm)


def _pool_layout(x: Val, window: Sequence, strides: Sequence, pads: Sequence) -> tuple[int, int, list[int]]:
    """(batch, channel, spatial dims) of a window reduction, or raise Unsupported."""
    active = [i for i in range(x.rank) if window[i] != 1 or strides[i] != 1 or tuple(pads[i]) != (0, 0)]
    if x.rank not in (3, 4) or len(active) > x.rank - 2:
        raise Unsupported(f"window reduction over dims {active} of a rank-{x.rank} value")
    spatial = list(range(2, x.rank)) if all(a >= 2 for a in active) else active
    rest = [i for i in range(x.rank) if i not in spatial]
    if len(rest) != 2 or len(spatial) != x.rank - 2:
        raise Unsupported("window reduction layout")
    return rest[0], rest[1], spatial


def _separable(em: Emitter, eqn: Any, x: Val, combine: str, fill: float) -> Val:
    """A window reduction no TFLite pooling builtin takes (three spatial dims: a 3-D pooling; a dilated window),
    one reduced dim at a time (max and sum over a box are separable): PADV2 with ``fill``, then per window offset
    a STRIDED_SLICE with the window stride, starting ``dilation`` elements after the last, combined with
    ``combine`` (MAXIMUM / ADD: 3 + 3 + 3 slices for a 3×3×3 window), in the value's layout. The reduced dims must
    be static; the others (a dynamic batch) are taken whole by each slice (its end mask)."""
    p = eqn.params
    window, strides, pads = list(p["window_dimensions"]), list(p["window_strides"]), list(p["padding"])
    dilations = [int(v) for v in (p.get("window_dilation") or [1] * len(window))]
    aval = out_aval(eqn)
    dtype, perm, rank = np.dtype(aval.dtype), x.perm, x.rank
    dims = [x.shape[i] for i in perm]
    reduced = [d for d in range(rank) if (window[d], strides[d], tuple(pads[d])) != (1, 1, (0, 0))]
    if not all(is_static(x.shape[d]) for d in reduced):
        raise Unsupported(f"window reduction over a dynamic dim of shape {list(x.shape)} (window {window})")
    t = em.tensor_of(x, perm, expand=True)
    for d in reduced:
        k, s, (lo, hi), dil = int(window[d]), int(strides[d]), (int(pads[d][0]), int(pads[d][1])), dilations[d]
        ax = perm.index(d)
        dims[ax] = int(dims[ax])
        if lo or hi:
            table = [[0, 0] for _ in range(rank)]
            table[ax] = [lo, hi]
            dims[ax] += lo + hi
            t = em.emit("PADV2", [t, em.const(i32(table)), em.const(np.asarray([fill], dtype))], list(dims), dtype)
        out_dims = list(dims)
        out_dims[ax] = (dims[ax] - dil * (k - 1) - 1) // s + 1
        step = [1] * rank
        step[ax] = s
        acc = None
        whole = sum(1 << i for i in range(rank) if i != ax)  # every other dim taken whole, static or not
        for off in range(0, k * dil, dil):
            begin, end = [0] * rank, [0] * rank
            begin[ax], end[ax] = off, off + (out_dims[ax] - 1) * s + 1
            part = em.emit("STRIDED_SLICE", [t, em.const(i32(begin)), em.const(i32(end)), em.const(i32(step))],
                           out_dims, dtype, endMask=whole)
            acc = part if acc is None else em.emit(combine, [acc, part], out_dims, dtype)
        t, dims = acc, out_dims
    return Val(aval.shape, aval.dtype, tensor=t, perm=perm)


def _pool(em: Emitter, eqn: Any, x: Val, code: str, fill: float | None = None) -> Val:
    p = eqn.params
    window, strides, pads = list(p["window_dimensions"]), list(p["window_strides"]), list(p["padding"])
    if any(d != 1 for d in p["base_dilation"]):
        raise Unsupported("window reduction with base dilation")
    aval = out_aval(eqn)
    dtype = np.dtype(aval.dtype)
    if tfl_dtype(dtype).kind != "f":
        raise Unsupported(f"pooling on {dtype.name}")
    layout = None  # (a dilated window: TFLite's pools take no dilation)
    if all(d == 1 for d in p["window_dilation"]):
        try:
            layout = _pool_layout(x, window, strides, pads)
        except Unsupported:
            if x.rank < 5:
                raise
    if layout is None:
        if code == "MAX_POOL_2D":
            low = float(np.finfo(dtype).min)
            return _separable(em, eqn, x, "MAXIMUM", low if fill is None else max(fill, low))
        return _separable(em, eqn, x, "ADD", 0.0)
    batch, feature, spatial = layout
    ks, ss, ps = [window[d] for d in spatial], [strides[d] for d in spatial], [pads[d] for d in spatial]
    sizes = [x.shape[d] for d in spatial]
    if len(spatial) == 1:
        ks, ss, ps, sizes = [1] + ks, [1] + ss, [(0, 0)] + ps, [1] + sizes
    if code == "MAX_POOL_2D":
        padding, explicit = choose_padding(sizes, ks, ss, [1, 1], ps)
        if fill is not None and fill > float(np.finfo(dtype).min):
            padding, explicit = VALID, [tuple(q) for q in ps]  # SAME would ignore the fill value
        fill = float(np.finfo(dtype).min) if fill is None else max(fill, float(np.finfo(dtype).min))
    else:  # sum: count padded zeros, so never SAME (TFLite's SAME average excludes padding)
        explicit = None if all(tuple(q) == (0, 0) for q in ps) else [tuple(q) for q in ps]
        padding, fill = VALID, 0.0
    t, dims = _nhwc(em, x, batch, feature, spatial, fill, explicit[-len(spatial):] if explicit and
                    len(spatial) == 1 else explicit)
    out_dims = [aval.shape[batch]] + ([1] if len(spatial) == 1 else []) + \
        [aval.shape[d] for d in spatial] + [aval.shape[feature]]
    out = em.emit(code, [t], out_dims, dtype, padding=padding, strideH=ss[0], strideW=ss[1],
                  filterHeight=ks[0], filterWidth=ks[1])
    if code == "AVERAGE_POOL_2D":
        out = em.emit("MUL", [out, em.const(np.asarray(ks[0] * ks[1], dtype))], out_dims, dtype)
    return _result(em, out, aval, batch, feature, spatial)


@rule(prims.reduce_window_max_p)
def lower_reduce_window_max(em: Emitter, eqn: Any, x: Val) -> Val:
    """reduce_window_max → MAX_POOL_2D (SAME when the padding matches, else PADV2 with -max)."""
    return _pool(em, eqn, x, "MAX_POOL_2D")


@rule(prims.reduce_window_sum_p)
def lower_reduce_window_sum(em: Emitter, eqn: Any, x: Val) -> Val:
    """reduce_window_sum → AVERAGE_POOL_2D × window size (the model's division then folds away)."""
    return _pool(em, eqn, x, "AVERAGE_POOL_2D")


@rule(prims.reduce_window_p)
def lower_reduce_window(em: Emitter, eqn: Any, *vals: Val) -> Val:
    """reduce_window with a one-op body (``lax.reduce_window`` with an array init): max → MAX_POOL_2D
    (padding filled with the init), add with init 0 → AVERAGE_POOL_2D × window size."""
    if len(vals) != 2 or not vals[1].is_const:
        raise Unsupported("variadic reduce_window or a non-constant init value")
    x, init = vals
    prim, value = monoid(eqn), init.scalar()
    if prim is prims.max_p and tfl_dtype(x.dtype).kind == "f":
        y = _pool(em, eqn, x, "MAX_POOL_2D", float(value))
        if value > float(np.finfo(x.dtype).min):
            t = y.tensor
            y = Val(y.shape, y.dtype, tensor=em.emit_like("MAXIMUM", [t, em.const(np.asarray(value, x.dtype))], t),
                    perm=y.perm)
        return y
    if prim is prims.add_p and value == 0:
        return _pool(em, eqn, x, "AVERAGE_POOL_2D")
    raise Unsupported("reduce_window with a reducer other than max or add-from-zero")


@rule(prims.reduce_window_min_p)
def lower_reduce_window_min(em: Emitter, eqn: Any, x: Val) -> Val:
    """reduce_window_min → -MAX_POOL_2D(-x)."""
    neg = Val(x.shape, x.dtype, tensor=em.emit_like("NEG", [em.tensor_of(x, x.perm)], em.tensor_of(x, x.perm)),
              perm=x.perm, base=x.base)
    y = _pool(em, eqn, neg, "MAX_POOL_2D")
    out = em.emit_like("NEG", [y.tensor], y.tensor)
    return Val(y.shape, y.dtype, tensor=out, perm=y.perm)
