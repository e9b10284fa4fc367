"""Convolutions: ``aten.convolution`` (1d/2d/3d, grouped, dilated, transposed).

torch.export leaves every ``nn.Conv*``/``nn.ConvTranspose*``/``F.conv*`` as
``convolution.default``; unbatched inputs arrive unsqueezed, ``padding="same"`` with an
even kernel arrives as ``constant_pad_nd`` + convolution, and non-zero padding modes
(reflect, replicate, circular) arrive as indexing before a zero-padded convolution.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten

_HIGHEST = jax.lax.Precision.HIGHEST
_SPATIAL = "DHW"


def _expand(v, n: int) -> list:
    """Broadcast a length-1 stride/padding/dilation list to ``n`` spatial dims."""
    v = list(v) if isinstance(v, (list, tuple)) else [v]
    return v * n if len(v) == 1 else v


def _dimension_numbers(n: int) -> tuple[str, str, str]:
    """PyTorch's layouts: NC<spatial> activations, OI<spatial> kernels."""
    sp = _SPATIAL[-n:]
    return "NC" + sp, "OI" + sp, "NC" + sp


def _transposed_weight(weight, groups: int):
    """(Cin, Cout/g, *k) → (Cout, Cin/g, *k) with the spatial dims flipped."""
    cin, cout_g = weight.shape[0], weight.shape[1]
    k = weight.shape[2:]
    w = weight.reshape((groups, cin // groups, cout_g) + tuple(k))
    w = jnp.swapaxes(w, 1, 2).reshape((groups * cout_g, cin // groups) + tuple(k))
    return jnp.flip(w, axis=tuple(range(2, w.ndim)))


@lowering(aten.convolution.default)
def lower_convolution_default(ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                              groups):
    """convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups) -> Tensor

    Emits ``conv_general_dilated`` (NC<spatial> / OI<spatial>, ``feature_group_count=groups``,
    precision HIGHEST, float16/bfloat16 accumulated in float32) plus a broadcast ``add`` of
    the bias. A transposed convolution becomes the equivalent input-dilated convolution:
    ``lhs_dilation=stride``, the kernel flipped and its in/out channels swapped per group,
    padding ``dilation*(k-1) - padding`` before and that plus ``output_padding`` after.
    """
    n = input.ndim - 2
    if n not in (1, 2, 3):
        raise UnsupportedOpError(str(aten.convolution.default), ctx.target, ctx.location,
                                 reason=f"only 1d/2d/3d convolutions are supported, got a {input.ndim}-d input")
    stride, padding, dilation = _expand(stride, n), _expand(padding, n), _expand(dilation, n)
    dtype = ctx.out_dtype or input.dtype
    acc = opmath_dtype(dtype)
    x, w = input.astype(dtype), weight.astype(dtype)
    dn = _dimension_numbers(n)
    if transposed:
        output_padding = _expand(output_padding, n)
        k = weight.shape[2:]
        pads = [(d * (kk - 1) - p, d * (kk - 1) - p + op)
                for kk, p, d, op in zip(k, padding, dilation, output_padding)]
        y = jax.lax.conv_general_dilated(x, _transposed_weight(w, groups), window_strides=(1,) * n, padding=pads,
                                         lhs_dilation=stride, rhs_dilation=dilation, dimension_numbers=dn,
                                         feature_group_count=groups, precision=_HIGHEST, preferred_element_type=acc)
    else:
        y = jax.lax.conv_general_dilated(x, w, window_strides=stride, padding=[(p, p) for p in padding],
                                         rhs_dilation=dilation, dimension_numbers=dn, feature_group_count=groups,
                                         precision=_HIGHEST, preferred_element_type=acc)
    if bias is not None:
        y = y + bias.astype(acc).reshape((1, -1) + (1,) * n)
    return y.astype(dtype)


@lowering(aten._convolution.default)
def lower__convolution_default(ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                               groups, benchmark, deterministic, cudnn_enabled, allow_tf32):
    """_convolution(Tensor input, Tensor weight, Tensor? bias, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool benchmark, bool deterministic, bool cudnn_enabled, bool allow_tf32) -> Tensor

    The older spelling TorchScript-era code and ``torch._convolution`` callers use: ``convolution``,
    its backend flags (cuDNN, TF32, benchmarking) meaning nothing here.
    """  # noqa: E501 (the first line is the exact schema)
    return lower_convolution_default(ctx, input, weight, bias, stride, padding, dilation, transposed, output_padding,
                                     groups)
