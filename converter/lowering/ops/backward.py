"""Backward ops: what AOTAutograd's backward graphs (``torch.compile(backend="tpu")``) and
the eager device's autograd call for convolutions, pooling, normalization and embeddings.

Where a forward lowering exists, the gradient is ``jax.vjp`` of that lowering, so the
forward table stays the single source of the math (convolution, average pooling,
adaptive average pooling, nearest upsampling). Max pooling scatters the gradient to
the saved argmax indices. Layer and group norm use the closed-form gradient with the
*saved* mean and rstd, as torch's kernels do, instead of recomputing the statistics.
Outputs whose ``output_mask`` entry is false are returned as ``None`` (torch's
undefined tensor). float16/bfloat16 are accumulated in float32 (torch's CPU opmath).

torch.export keeps these ops only when they are called directly; its default
decompositions rewrite ``native_layer_norm_backward``, ``native_group_norm_backward``
and ``embedding_dense_backward`` into elementwise ops and reductions, whereas
AOTAutograd graphs compiled without those decompositions and the eager device keep them.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.lowering.context import LoweringContext
from converter.lowering.helpers import masked_vjp, opmath_dtype
from converter.lowering.ops.conv import lower_convolution_default
from converter.lowering.ops.pool import (lower__adaptive_avg_pool2d_default, lower_avg_pool2d_default,
                                         lower_avg_pool3d_default)
from converter.lowering.ops.upsample import (bicubic_resize, bilinear_resize,
                                             lower__upsample_bicubic2d_aa_default,
                                             lower__upsample_bilinear2d_aa_default,
                                             lower_upsample_nearest2d_default, nearest_resize)
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _forward_ctx(ctx) -> LoweringContext:
    """A context for calling a forward lowering inside a backward one (no node: the
    forward's output dtype is its input's, not the backward op's recorded dtype)."""
    return LoweringContext(target=ctx.target, options=ctx.options, rng=ctx.rng)


@lowering(aten.convolution_backward.default)
def lower_convolution_backward_default(ctx, grad_output, input, weight, bias_sizes, stride, padding, dilation,
                                       transposed, output_padding, groups, output_mask):
    """convolution_backward(Tensor grad_output, Tensor input, Tensor weight, SymInt[]? bias_sizes, SymInt[] stride, SymInt[] padding, SymInt[] dilation, bool transposed, SymInt[] output_padding, SymInt groups, bool[3] output_mask) -> (Tensor, Tensor, Tensor)

    ``jax.vjp`` of the ``convolution`` lowering with respect to the inputs selected by
    ``output_mask`` (XLA emits the transposed ``conv_general_dilated`` ops); the bias
    gradient is ``reduce_sum`` of ``grad_output`` over every dim but 1.
    """
    sub = _forward_ctx(ctx)

    def conv(x, w):
        return lower_convolution_default(sub, x, w, None, stride, padding, dilation, transposed, output_padding,
                                         groups)

    gi, gw = masked_vjp(conv, [input, weight], output_mask[:2], grad_output)
    gb = None
    if output_mask[2]:
        acc = opmath_dtype(grad_output.dtype)
        axes = (0,) + tuple(range(2, grad_output.ndim))
        gb = jnp.sum(grad_output.astype(acc), axis=axes).astype(grad_output.dtype)
    return gi, gw, gb


# ----------------------------------------------------------------------------- pooling
def _scatter_to_indices(grad_output, self, indices, n: int):
    """Add each gradient to the input position its (flattened spatial) index names."""
    lead = self.ndim - n
    acc = opmath_dtype(self.dtype)
    spatial = math.prod(self.shape[lead:])
    g = grad_output.astype(acc).reshape((-1, math.prod(grad_output.shape[lead:])))
    idx = indices.reshape(g.shape)

    def one(gi, ii):
        return jnp.zeros((spatial,), acc).at[ii].add(gi, mode="drop")

    return jax.vmap(one)(g, idx).reshape(self.shape).astype(self.dtype)


@lowering(aten.max_pool2d_with_indices_backward.default)
def lower_max_pool2d_with_indices_backward_default(ctx, grad_output, self, kernel_size, stride, padding, dilation,
                                                   ceil_mode, indices):
    """max_pool2d_with_indices_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, int[2] dilation, bool ceil_mode, Tensor indices) -> Tensor

    A batched ``scatter``-add of ``grad_output`` into the flattened spatial dims of a
    zero input at the saved argmax ``indices`` (windows that share a maximum add up,
    as in torch).
    """
    return _scatter_to_indices(grad_output, self, indices, 2)


@lowering(aten.max_pool3d_with_indices_backward.default)
def lower_max_pool3d_with_indices_backward_default(ctx, grad_output, self, kernel_size, stride, padding, dilation,
                                                   ceil_mode, indices):
    """max_pool3d_with_indices_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, int[3] dilation, bool ceil_mode, Tensor indices) -> Tensor

    As max_pool2d_with_indices_backward over three spatial dims.
    """
    return _scatter_to_indices(grad_output, self, indices, 3)


@lowering(aten.adaptive_max_pool2d_backward.default)
def lower_adaptive_max_pool2d_backward_default(ctx, grad_output, self, indices):
    """adaptive_max_pool2d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor

    ``scatter``-add of ``grad_output`` at the saved flattened-spatial argmax ``indices``,
    as for max_pool2d_with_indices_backward.
    """
    return _scatter_to_indices(grad_output, self, indices, 2)


@lowering(aten.adaptive_max_pool3d_backward.default)
def lower_adaptive_max_pool3d_backward_default(ctx, grad_output, self, indices):
    """adaptive_max_pool3d_backward(Tensor grad_output, Tensor self, Tensor indices) -> Tensor

    As adaptive_max_pool2d_backward over three spatial dims.
    """
    return _scatter_to_indices(grad_output, self, indices, 3)


def _avg_pool_backward(ctx, forward, grad_output, self, *args):
    sub = _forward_ctx(ctx)

    def pool(x):
        # The pooling lowering builds its reduce_window init with jnp.asarray, a tracer under
        # jit, so JAX emits a generic reduce_window, which has no transpose rule. Evaluating
        # constants eagerly makes it the differentiable reduce_window_sum (and folds the divisor).
        with jax.ensure_compile_time_eval():
            return forward(sub, x, *args)

    return masked_vjp(pool, [self], [True], grad_output)[0]


@lowering(aten.avg_pool2d_backward.default)
def lower_avg_pool2d_backward_default(ctx, grad_output, self, kernel_size, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override):
    """avg_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] stride, int[2] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor

    ``jax.vjp`` of the avg_pool2d lowering: the transpose of its ``pad`` +
    ``reduce_window``-add, scaled by torch's divisors.
    """
    return _avg_pool_backward(ctx, lower_avg_pool2d_default, grad_output, self, kernel_size, stride, padding,
                              ceil_mode, count_include_pad, divisor_override)


@lowering(aten.avg_pool3d_backward.default)
def lower_avg_pool3d_backward_default(ctx, grad_output, self, kernel_size, stride, padding, ceil_mode,
                                      count_include_pad, divisor_override):
    """avg_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] stride, int[3] padding, bool ceil_mode, bool count_include_pad, int? divisor_override) -> Tensor

    ``jax.vjp`` of the avg_pool3d lowering.
    """
    return _avg_pool_backward(ctx, lower_avg_pool3d_default, grad_output, self, kernel_size, stride, padding,
                              ceil_mode, count_include_pad, divisor_override)


def _adaptive_avg_backward(ctx, grad_output, self, n: int):
    size = list(grad_output.shape[grad_output.ndim - n:])
    return _avg_pool_backward(ctx, lower__adaptive_avg_pool2d_default, grad_output, self, size)


@lowering(aten._adaptive_avg_pool2d_backward.default)
def lower__adaptive_avg_pool2d_backward_default(ctx, grad_output, self):
    """_adaptive_avg_pool2d_backward(Tensor grad_output, Tensor self) -> Tensor

    ``jax.vjp`` of the _adaptive_avg_pool2d lowering at ``self``, the output size read
    from ``grad_output``'s trailing dims.
    """
    return _adaptive_avg_backward(ctx, grad_output, self, 2)


@lowering(aten._adaptive_avg_pool3d_backward.default)
def lower__adaptive_avg_pool3d_backward_default(ctx, grad_output, self):
    """_adaptive_avg_pool3d_backward(Tensor grad_output, Tensor self) -> Tensor

    As _adaptive_avg_pool2d_backward over three spatial dims.
    """
    return _adaptive_avg_backward(ctx, grad_output, self, 3)


@lowering(aten.upsample_nearest2d_backward.default)
def lower_upsample_nearest2d_backward_default(ctx, grad_output, output_size, input_size, scales_h=None,
                                              scales_w=None):
    """upsample_nearest2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[2] input_size, float? scales_h=None, float? scales_w=None) -> Tensor

    ``jax.vjp`` of the upsample_nearest2d lowering at a zero input of ``input_size``:
    the transposed ``gather`` is a ``scatter``-add of each output pixel to its source.
    """
    sub = _forward_ctx(ctx)
    dtype = grad_output.dtype

    def up(x):
        return lower_upsample_nearest2d_default(sub, x, output_size, scales_h, scales_w)

    acc = opmath_dtype(dtype)
    g = masked_vjp(up, [jnp.zeros(tuple(input_size), acc)], [True], grad_output.astype(acc))[0]
    return g.astype(dtype)


def _resize_backward(ctx, grad_output, input_size, resize):
    """``jax.vjp`` of ``resize`` (a forward resize lowering) at a zero input of ``input_size``."""
    dtype = grad_output.dtype
    acc = opmath_dtype(dtype)
    return masked_vjp(resize, [jnp.zeros(tuple(input_size), acc)], [True], grad_output.astype(acc))[0].astype(dtype)


@lowering(aten.upsample_bilinear2d_backward.default)
def lower_upsample_bilinear2d_backward_default(ctx, grad_output, output_size, input_size, align_corners,
                                               scales_h=None, scales_w=None):
    """upsample_bilinear2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    ``jax.vjp`` of the bilinear resize at a zero input of ``input_size``: each output
    pixel's gradient is ``scatter``-added to its four sources with the forward's weights.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: bilinear_resize(
        sub, x, list(output_size), [scales_h, scales_w], align_corners))


@lowering(aten._upsample_bilinear2d_aa_backward.default)
def lower__upsample_bilinear2d_aa_backward_default(ctx, grad_output, output_size, input_size, align_corners,
                                                   scales_h=None, scales_w=None):
    """_upsample_bilinear2d_aa_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    ``jax.vjp`` of the antialiased resize (``F.interpolate(..., antialias=True)``): the
    transposed weight matrices applied to the gradient.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: lower__upsample_bilinear2d_aa_default(
        sub, x, list(output_size), align_corners, scales_h, scales_w))


@lowering(aten._upsample_bicubic2d_aa_backward.default)
def lower__upsample_bicubic2d_aa_backward_default(ctx, grad_output, output_size, input_size, align_corners,
                                                  scales_h=None, scales_w=None):
    """_upsample_bicubic2d_aa_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    ``jax.vjp`` of the antialiased bicubic resize: the transposed weight matrices applied to the gradient.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: lower__upsample_bicubic2d_aa_default(
        sub, x, list(output_size), align_corners, scales_h, scales_w))


@lowering(aten.upsample_bicubic2d_backward.default)
def lower_upsample_bicubic2d_backward_default(ctx, grad_output, output_size, input_size, align_corners,
                                              scales_h=None, scales_w=None):
    """upsample_bicubic2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, bool align_corners, float? scales_h=None, float? scales_w=None) -> Tensor

    ``jax.vjp`` of the bicubic resize: each output pixel's gradient is ``scatter``-added to
    its 4x4 (border-clamped) sources with the forward's cubic weights.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: bicubic_resize(
        sub, x, list(output_size), [scales_h, scales_w], align_corners))


@lowering(aten.upsample_linear1d_backward.default)
def lower_upsample_linear1d_backward_default(ctx, grad_output, output_size, input_size, align_corners, scales=None):
    """upsample_linear1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, bool align_corners, float? scales=None) -> Tensor

    As upsample_bilinear2d_backward over one spatial dim.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: bilinear_resize(
        sub, x, list(output_size), [scales], align_corners))


@lowering(aten.upsample_trilinear3d_backward.default)
def lower_upsample_trilinear3d_backward_default(ctx, grad_output, output_size, input_size, align_corners,
                                                scales_d=None, scales_h=None, scales_w=None):
    """upsample_trilinear3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, bool align_corners, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor

    As upsample_bilinear2d_backward over three spatial dims.
    """
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: bilinear_resize(
        sub, x, list(output_size), [scales_d, scales_h, scales_w], align_corners))


def _nearest_backward(ctx, grad_output, output_size, input_size, scales, exact):
    sub = _forward_ctx(ctx)
    return _resize_backward(ctx, grad_output, input_size, lambda x: nearest_resize(
        sub, x, list(output_size), scales, exact))


@lowering(aten.upsample_nearest1d_backward.default)
def lower_upsample_nearest1d_backward_default(ctx, grad_output, output_size, input_size, scales=None):
    """upsample_nearest1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, float? scales=None) -> Tensor

    ``jax.vjp`` of the nearest resize: a ``scatter``-add of each output element to its source.
    """
    return _nearest_backward(ctx, grad_output, output_size, input_size, [scales], False)


@lowering(aten.upsample_nearest3d_backward.default)
def lower_upsample_nearest3d_backward_default(ctx, grad_output, output_size, input_size, scales_d=None,
                                              scales_h=None, scales_w=None):
    """upsample_nearest3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor

    As upsample_nearest1d_backward over three spatial dims.
    """
    return _nearest_backward(ctx, grad_output, output_size, input_size, [scales_d, scales_h, scales_w], False)


@lowering(aten._upsample_nearest_exact1d_backward.default)
def lower__upsample_nearest_exact1d_backward_default(ctx, grad_output, output_size, input_size, scales=None):
    """_upsample_nearest_exact1d_backward(Tensor grad_output, SymInt[1] output_size, SymInt[3] input_size, float? scales=None) -> Tensor

    As upsample_nearest1d_backward with ``nearest-exact`` sources ``floor((j + 0.5) * scale)``.
    """
    return _nearest_backward(ctx, grad_output, output_size, input_size, [scales], True)


@lowering(aten._upsample_nearest_exact2d_backward.default)
def lower__upsample_nearest_exact2d_backward_default(ctx, grad_output, output_size, input_size, scales_h=None,
                                                     scales_w=None):
    """_upsample_nearest_exact2d_backward(Tensor grad_output, SymInt[2] output_size, SymInt[4] input_size, float? scales_h=None, float? scales_w=None) -> Tensor

    As _upsample_nearest_exact1d_backward over two spatial dims.
    """
    return _nearest_backward(ctx, grad_output, output_size, input_size, [scales_h, scales_w], True)


@lowering(aten._upsample_nearest_exact3d_backward.default)
def lower__upsample_nearest_exact3d_backward_default(ctx, grad_output, output_size, input_size, scales_d=None,
                                                     scales_h=None, scales_w=None):
    """_upsample_nearest_exact3d_backward(Tensor grad_output, SymInt[3] output_size, SymInt[5] input_size, float? scales_d=None, float? scales_h=None, float? scales_w=None) -> Tensor

    As _upsample_nearest_exact1d_backward over three spatial dims.
    """
    return _nearest_backward(ctx, grad_output, output_size, input_size, [scales_d, scales_h, scales_w], True)


# ----------------------------------------------------------------------------- normalization
def _norm_input_grad(dy, xhat, rstd, weight_b, axes):
    """``rstd * (g - mean(g) - xhat * mean(g * xhat))`` over ``axes`` with ``g = dy * weight``."""
    g = dy if weight_b is None else dy * weight_b
    mean_g = jnp.mean(g, axis=axes, keepdims=True)
    mean_gx = jnp.mean(g * xhat, axis=axes, keepdims=True)
    return rstd * (g - mean_g - xhat * mean_gx)


@lowering(aten.native_layer_norm_backward.default)
def lower_native_layer_norm_backward_default(ctx, grad_out, input, normalized_shape, mean, rstd, weight, bias,
                                             output_mask):
    """native_layer_norm_backward(Tensor grad_out, Tensor input, SymInt[] normalized_shape, Tensor mean, Tensor rstd, Tensor? weight, Tensor? bias, bool[3] output_mask) -> (Tensor, Tensor, Tensor)

    Closed form with the saved ``mean``/``rstd`` (torch's kernel, not a recomputation):
    ``xhat = (x - mean) * rstd``, ``g = dy * weight``,
    ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))`` over the normalized dims,
    ``dweight = sum(dy * xhat)`` and ``dbias = sum(dy)`` over the leading dims
    (``reduce_sum``/elementwise ops, float32 for float16/bfloat16).
    """
    acc = opmath_dtype(input.dtype)
    k = len(normalized_shape)
    axes = tuple(range(input.ndim - k, input.ndim))
    lead = tuple(range(input.ndim - k))
    dy, x = grad_out.astype(acc), input.astype(acc)
    xhat = (x - mean.astype(acc)) * rstd.astype(acc)
    dx = dw = db = None
    if output_mask[0]:
        w = None if weight is None else weight.astype(acc)
        dx = _norm_input_grad(dy, xhat, rstd.astype(acc), w, axes).astype(input.dtype)
    if output_mask[1]:
        dw = jnp.sum(dy * xhat, axis=lead).astype(input.dtype if weight is None else weight.dtype)
    if output_mask[2]:
        db = jnp.sum(dy, axis=lead).astype(input.dtype if bias is None else bias.dtype)
    return dx, dw, db


@lowering(aten.native_group_norm_backward.default)
def lower_native_group_norm_backward_default(ctx, grad_out, input, mean, rstd, weight, N, C, HxW, group,
                                             output_mask):
    """native_group_norm_backward(Tensor grad_out, Tensor input, Tensor mean, Tensor rstd, Tensor? weight, SymInt N, SymInt C, SymInt HxW, int group, bool[3] output_mask) -> (Tensor, Tensor, Tensor)

    Closed form with the saved ``(N, group)`` ``mean``/``rstd``: the input is viewed as
    ``(N, group, C/group, HxW)`` and ``dx = rstd * (g - mean(g) - xhat * mean(g * xhat))``
    per group with ``g = dy * weight``; ``dweight = sum(dy * xhat)``, ``dbias = sum(dy)``
    over N and the spatial dims.
    """
    acc = opmath_dtype(input.dtype)
    n, c = input.shape[0], input.shape[1]
    shape = (n, group, c // group, math.prod(input.shape[2:]))  # (no -1: N may be 0)
    dy, x = grad_out.astype(acc).reshape(shape), input.astype(acc).reshape(shape)
    m = mean.astype(acc).reshape((n, group, 1, 1))
    r = rstd.astype(acc).reshape((n, group, 1, 1))
    xhat = (x - m) * r
    dx = dw = db = None
    if output_mask[0]:
        w = None if weight is None else weight.astype(acc).reshape((1, group, c // group, 1))
        dx = _norm_input_grad(dy, xhat, r, w, (2, 3)).reshape(input.shape).astype(input.dtype)
    wdtype = input.dtype if weight is None else weight.dtype
    if output_mask[1]:
        dw = jnp.sum(dy * xhat, axis=(0, 3)).reshape((c,)).astype(wdtype)
    if output_mask[2]:
        db = jnp.sum(dy, axis=(0, 3)).reshape((c,)).astype(wdtype)
    return dx, dw, db


# ----------------------------------------------------------------------------- embedding
@lowering(aten.embedding_dense_backward.default)
def lower_embedding_dense_backward_default(ctx, grad_output, indices, num_weights, padding_idx, scale_grad_by_freq):
    """embedding_dense_backward(Tensor grad_output, Tensor indices, SymInt num_weights, SymInt padding_idx, bool scale_grad_by_freq) -> Tensor

    A ``scatter``-add (segment sum) of the ``grad_output`` rows into ``num_weights``
    rows at ``indices``; rows whose index equals ``padding_idx`` contribute nothing,
    and with ``scale_grad_by_freq`` each row is first divided by how often its index
    occurs in the batch (a second ``scatter``-add of ones, then a ``gather``).
    """
    acc = opmath_dtype(grad_output.dtype)
    d = grad_output.shape[-1]
    g = grad_output.astype(acc).reshape((-1, d))
    idx = indices.reshape(-1)
    if scale_grad_by_freq:
        counts = jnp.zeros((num_weights,), acc).at[idx].add(1, mode="drop")
        g = g / counts[idx][:, None]
    g = jnp.where((idx == padding_idx)[:, None], jnp.zeros((), acc), g)
    out = jnp.zeros((num_weights, d), acc).at[idx].add(g, mode="drop")
    return out.astype(grad_output.dtype)
