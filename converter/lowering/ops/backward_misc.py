"""Backward rows of shrink activations, replication padding, ``cdist``, the multi-class and multi-label margin losses and weight norm.

Eager training on the tpu device runs autograd's backward ops through this table
(``torch.export`` graphs of inference never contain them). Each follows torch's
own derivative: the shrink masks, the transpose of the edge padding (a ``jax.vjp``
of the forward row at a zero input), and ``cdist``'s closed-form p-norm gradient
with torch's conventions at zero distances.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from converter.lowering.helpers import difference, masked_vjp, opmath_dtype
from converter.lowering.ops.pad import lower_replication_pad2d_default
from converter.lowering.registry import lowering

aten = torch.ops.aten


@lowering(aten.softshrink_backward.default)
def lower_softshrink_backward_default(ctx, grad_output, self, lambd):
    """softshrink_backward(Tensor grad_output, Tensor self, Scalar lambd) -> Tensor

    ``grad`` where ``|x| > lambd``, else 0 (a ``select``).
    """
    return jnp.where((self > lambd) | (self < -lambd), grad_output, jnp.zeros((), grad_output.dtype))


@lowering(aten.hardshrink_backward.default)
def lower_hardshrink_backward_default(ctx, grad_out, self, lambd):
    """hardshrink_backward(Tensor grad_out, Tensor self, Scalar lambd) -> Tensor

    ``grad`` outside ``[-lambd, lambd]``, else 0 (a ``select``).
    """
    inside = (self >= -lambd) & (self <= lambd)
    return jnp.where(inside, jnp.zeros((), grad_out.dtype), grad_out)


@lowering(aten.replication_pad1d_backward.default, aten.replication_pad2d_backward.default,
          aten.replication_pad3d_backward.default)
def lower_replication_pad2d_backward_default(ctx, grad_output, self, padding):
    """replication_pad2d_backward(Tensor grad_output, Tensor self, SymInt[4] padding) -> Tensor

    Also the 1d and 3d overloads. ``jax.vjp`` of the replication-pad row: each padded
    element's gradient is ``scatter``-added to the edge element it copies.
    """
    dtype = grad_output.dtype
    acc = opmath_dtype(dtype)

    def pad(x):
        return lower_replication_pad2d_default(ctx, x, padding)

    g = masked_vjp(pad, [jnp.zeros(self.shape, acc)], [True], grad_output.astype(acc))[0]
    return g.astype(dtype)


@lowering(aten._cdist_backward.default)
def lower__cdist_backward_default(ctx, grad, x1, x2, p, cdist):
    """_cdist_backward(Tensor grad, Tensor x1, Tensor x2, float p, Tensor cdist) -> Tensor

    The gradient with respect to ``x1`` of ``cdist = ||x1_i - x2_j||_p``: summed over ``j``,
    ``grad * sign(d) * |d|^(p-1) / cdist^(p-1)`` (``d / cdist`` for p=2, ``sign(d)`` for p=1,
    ``sign(d)`` at the maximising coordinate for p=inf, 0 for p=0), 0 where the distance
    is 0 (and, for p < 1, where ``d`` is 0), as torch's kernel does.
    """
    dtype = grad.dtype
    acc = opmath_dtype(dtype)
    d = difference(x1.astype(acc)[..., :, None, :], x2.astype(acc)[..., None, :, :])
    dist = cdist.astype(acc)[..., None]
    g = grad.astype(acc)[..., None]
    zero = jnp.zeros((), acc)
    if p == 0:
        return jnp.zeros(x1.shape, dtype)
    if p == 1:
        term = jnp.sign(d)
    elif p == 2:
        term = jnp.where(dist == 0, zero, d / jnp.where(dist == 0, 1, dist))
    elif math.isinf(p):
        term = jnp.sign(d) * (jnp.abs(d) == dist)
    else:
        safe = jnp.where(dist == 0, 1, dist)
        powd = jnp.where(d == 0, zero, jnp.abs(d) ** (p - 1)) if p < 1 else jnp.abs(d) ** (p - 1)
        term = jnp.where(dist == 0, zero, jnp.sign(d) * powd / safe ** (p - 1))
    return jnp.sum(g * term, axis=-2).astype(dtype)


def _multi_margin(x, target, p, margin, weight, reduction):
    """torch's multi_margin_loss: per sample ``Σ_{j≠y} max(0, margin - x_y + x_j)^p / C``,
    times ``weight[y]``; then none/mean/sum."""
    x2 = x.reshape(-1, x.shape[-1] if x.ndim else 1)  # a 0-d input is one sample of one class
    t = target.reshape(-1).astype(jnp.int32)
    c = x2.shape[1]
    xy = jnp.take_along_axis(x2, t[:, None], axis=1)
    z = jnp.maximum(margin - xy + x2, 0)
    z = jnp.where(jnp.arange(c)[None, :] == t[:, None], 0, z)
    if p == 2:
        z = z * z
    if weight is not None:
        z = z * jnp.take(weight, t)[:, None]
    per = jnp.sum(z, axis=1) / c
    if reduction == 1:
        return jnp.mean(per)
    if reduction == 2:
        return jnp.sum(per)
    return per if x.ndim == 2 else per[0]


@lowering(aten.multi_margin_loss_backward.default)
def lower_multi_margin_loss_backward_default(ctx, grad_output, self, target, p, margin, weight=None, reduction=1):
    """multi_margin_loss_backward(Tensor grad_output, Tensor self, Tensor target, Scalar p, Scalar margin, Tensor? weight=None, int reduction=1) -> Tensor

    ``jax.vjp`` of the loss (hinge terms ``max(0, margin - x_y + x_j)^p`` over the wrong
    classes, averaged over classes, class-weighted) with respect to ``self``.
    """
    dtype = self.dtype
    acc = opmath_dtype(dtype)
    w = None if weight is None else weight.astype(acc)

    def loss(x):  # in the gradient's shape: one sample's unreduced loss is (1,) in torch's meta, () on CPU
        return _multi_margin(x, target, p, margin, w, reduction).reshape(grad_output.shape)

    g = masked_vjp(loss, [self.astype(acc)], [True], grad_output.astype(acc))[0]
    return g.astype(dtype)


@lowering(aten._weight_norm_interface_backward.default)
def lower__weight_norm_interface_backward_default(ctx, grad_w, saved_v, saved_g, saved_norms, dim):
    """_weight_norm_interface_backward(Tensor grad_w, Tensor saved_v, Tensor saved_g, Tensor saved_norms, int dim) -> (Tensor, Tensor)

    Of ``w = v · g / ‖v‖`` (the norm over every dim but ``dim``, kept as size 1, as
    ``saved_norms``): ``grad_g = Σ(grad_w · v) / ‖v‖`` and
    ``grad_v = (g / ‖v‖) · (grad_w - v · grad_g / ‖v‖)``, as torch's kernel.
    """
    acc = opmath_dtype(saved_v.dtype)
    gw, v, g, n = (t.astype(acc) for t in (grad_w, saved_v, saved_g, saved_norms))
    axes = tuple(a for a in range(v.ndim) if a != dim % max(v.ndim, 1))
    grad_g = jnp.sum(gw * v, axis=axes, keepdims=True) / n
    grad_v = (g / n) * (gw - v * (grad_g / n))
    return grad_v.astype(saved_v.dtype), grad_g.astype(saved_g.dtype)


def _multilabel_margin(x, target, reduction, out_shape):
    """``(loss, is_target)`` of the multi-label margin loss in ``x``'s dtype: per sample
    ``Σ_j Σ_i max(0, 1 - x[y_j] + x[i]) / C`` over the target classes ``y_j`` (``target`` up to
    its first -1) and the classes ``i`` that are not targets; reduced (0 none, 1 mean, 2 sum)."""
    c = x.shape[-1] if x.ndim else 1
    x2, t = x.reshape(-1, c), target.reshape(-1, c)
    valid = jnp.cumsum((t < 0).astype(jnp.int32), axis=1) == 0  # targets before the first -1
    y = jnp.where(valid, t, 0)
    is_target = jnp.any((y[:, :, None] == jnp.arange(c)) & valid[:, :, None], axis=1)
    xy = jnp.take_along_axis(x2, y, axis=1)
    hinge = jnp.maximum(0, 1 - xy[:, :, None] + x2[:, None, :])
    hinge = jnp.where(valid[:, :, None] & ~is_target[:, None, :], hinge, 0)
    per = jnp.sum(hinge, axis=(1, 2)) / c
    loss = jnp.mean(per) if reduction == 1 else jnp.sum(per) if reduction == 2 else per.reshape(out_shape)
    return loss, is_target.reshape(target.shape).astype(x.dtype)


@lowering(aten.multilabel_margin_loss_forward.default)
def lower_multilabel_margin_loss_forward_default(ctx, self, target, reduction):
    """multilabel_margin_loss_forward(Tensor self, Tensor target, int reduction) -> (Tensor output, Tensor is_target)

    The loss of :func:`_multilabel_margin` in opmath. A row because torch's decomposition
    counts the positions after a target list's -1 as targets of class 0 (it gave 3.59
    for a sample with no targets, whose loss is 0).
    """
    acc = opmath_dtype(self.dtype)
    out_shape = ctx.out_shape  # reduction none of one sample: () on torch's CPU, (1,) in its meta kernel
    if out_shape is None:
        out_shape = self.shape[:-1] if self.ndim == 2 else ()
    loss, is_target = _multilabel_margin(self.astype(acc), target, reduction, out_shape)
    return loss.astype(self.dtype), is_target.astype(self.dtype)


@lowering(aten.multilabel_margin_loss_backward.default)
def lower_multilabel_margin_loss_backward_default(ctx, grad_output, self, target, reduction, is_target):
    """multilabel_margin_loss_backward(Tensor grad_output, Tensor self, Tensor target, int reduction, Tensor is_target) -> Tensor

    ``jax.vjp`` of :func:`_multilabel_margin`'s loss with respect to ``self``.
    """
    dtype = self.dtype
    acc = opmath_dtype(dtype)

    def loss(x):
        return _multilabel_margin(x, target, reduction, grad_output.shape)[0]

    return masked_vjp(loss, [self.astype(acc)], [True], grad_output.astype(acc))[0].astype(dtype)
