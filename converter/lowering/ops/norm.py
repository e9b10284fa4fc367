"""Normalization: layer/RMS/group norm (preserved composites), their native forms, batch norm.

What torch.export produces:

* ``nn.LayerNorm``/``F.layer_norm`` → ``layer_norm`` (preserved), ``nn.RMSNorm`` →
  ``rms_norm``, ``nn.GroupNorm`` → ``group_norm``; ``native_layer_norm`` /
  ``native_group_norm`` only appear when called directly.
* ``nn.BatchNorm*`` in eval → ``_native_batch_norm_legit_no_training``; in train →
  ``_native_batch_norm_legit_functional`` whose running-stat outputs become
  BUFFER_MUTATION outputs (the interpreter returns them as ``mutations``);
  ``num_batches_tracked += 1`` is a separate ``add``. ``momentum=None`` (cumulative
  average) fails inside torch.export itself (data-dependent ``1/num_batches_tracked``).
* ``nn.InstanceNorm*`` and ``BatchNorm(track_running_stats=False)`` →
  ``_native_batch_norm_legit.no_stats``.

Statistics are computed in float32 for float16/bfloat16 inputs (torch's CPU opmath),
variance is biased for normalization and unbiased for the running-variance update.

``layer_norm`` and ``rms_norm`` pick their implementation through ``kernels.dispatch``
(:func:`converter.lowering.helpers.kernel_choice`): the fused Pallas kernels on TPU/GPU,
the jnp bodies below on CPU and in exported artifacts; ``kernels="pallas"|"reference"``
forces either. Several normalized dims are flattened into the kernel's one row.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.helpers import centered_mean, kernel_choice, opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _moments(x, axes):
    """Mean (:func:`~converter.lowering.helpers.centered_mean`) and biased variance over ``axes``, two-pass."""
    mean = centered_mean(x, axes)
    var = jnp.mean(jnp.square(x - mean), axis=axes, keepdims=True)
    return mean, var


def _affine(y, weight, bias, shape):
    if weight is not None:
        y = y * weight.astype(y.dtype).reshape(shape)
    if bias is not None:
        y = y + bias.astype(y.dtype).reshape(shape)
    return y


def _pallas_norm(ctx, kernel: str, x, normalized_shape, params, eps):
    """Run the Pallas ``kernel`` when dispatch picks it; None → use the jnp body."""
    k = len(normalized_shape)
    trailing = tuple(x.shape[x.ndim - k:])
    static = all(isinstance(d, int) for d in x.shape)
    hidden = int(np.prod(trailing)) if static else None
    choice = kernel_choice(ctx, kernel, static=static, why_not_static="dynamic shape: reference body",
                           hidden=hidden, dtype=x.dtype)
    if choice.impl != "pallas":
        return None
    from kernels import layer_norm, rms_norm

    fn = {"layer_norm": layer_norm, "rms_norm": rms_norm}[kernel]
    flat = [None if p is None else p.astype(x.dtype).reshape(hidden) for p in params]
    with jax.enable_x64(False):  # the kernels index with int32, as Mosaic/Triton do
        y = fn(x.reshape(x.shape[:x.ndim - k] + (hidden,)), *flat, eps=float(eps), interpret=choice.interpret)
    return y.reshape(x.shape)


def _layer_norm(x, normalized_shape, weight, bias, eps):
    acc = opmath_dtype(x.dtype)
    axes = tuple(range(x.ndim - len(normalized_shape), x.ndim))
    xf = x.astype(acc)
    mean, var = _moments(xf, axes)
    rstd = jax.lax.rsqrt(var + jnp.asarray(eps, acc))
    y = _affine((xf - mean) * rstd, weight, bias, tuple(x.shape[x.ndim - len(normalized_shape):]))
    return y.astype(x.dtype), mean, rstd


@lowering(aten.layer_norm.default, composite=True)
def lower_layer_norm_default(ctx, input, normalized_shape, weight=None, bias=None, eps=1e-05, cudnn_enable=True):
    """layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enable=True) -> Tensor

    Composite ``aten.layer_norm``: ``reduce_sum`` mean and biased variance over the
    trailing ``normalized_shape`` dims, ``rsqrt``, then the elementwise affine — or the
    fused Pallas layer-norm kernel where ``kernels.dispatch`` picks it.
    """
    y = _pallas_norm(ctx, "layer_norm", input, normalized_shape, (weight, bias), eps)
    return y if y is not None else _layer_norm(input, normalized_shape, weight, bias, eps)[0]


@lowering(aten.native_layer_norm.default)
def lower_native_layer_norm_default(ctx, input, normalized_shape, weight, bias, eps):
    """native_layer_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight, Tensor? bias, float eps) -> (Tensor, Tensor, Tensor)

    As layer_norm; also returns the mean and ``rstd`` with the normalized dims kept as 1.
    """
    return _layer_norm(input, normalized_shape, weight, bias, eps)


@lowering(aten.rms_norm.default, composite=True)
def lower_rms_norm_default(ctx, input, normalized_shape, weight=None, eps=None):
    """rms_norm(Tensor input, SymInt[] normalized_shape, Tensor? weight=None, float? eps=None) -> Tensor

    Composite ``aten.rms_norm``: ``x * rsqrt(mean(x²) + eps)`` over the trailing dims in
    float32 for float16/bfloat16, cast back to the input dtype, then ``* weight`` like
    torch. ``eps=None`` is the machine epsilon of that computation type, as in torch.
    Where ``kernels.dispatch`` picks it, the fused Pallas RMS-norm kernel runs instead
    (it multiplies by the weight before the final cast: ≤ 1 ulp apart in bf16/fp16).
    """
    acc = opmath_dtype(input.dtype)
    if eps is None:
        eps = float(np.finfo(np.dtype(acc)).eps)
    y = _pallas_norm(ctx, "rms_norm", input, normalized_shape, (weight,), eps)
    if y is not None:
        return y
    axes = tuple(range(input.ndim - len(normalized_shape), input.ndim))
    xf = input.astype(acc)
    y = (xf * jax.lax.rsqrt(jnp.mean(jnp.square(xf), axis=axes, keepdims=True) + jnp.asarray(eps, acc)))
    y = y.astype(input.dtype)
    return y if weight is None else y * weight.astype(y.dtype)


def _group_norm(x, weight, bias, groups: int, eps):
    acc = opmath_dtype(x.dtype)
    n, c = x.shape[0], x.shape[1]
    xg = x.astype(acc).reshape((n, groups, (c // groups) * math.prod(x.shape[2:])))  # (no -1: N may be 0)
    mean, var = _moments(xg, (2,))
    rstd = jax.lax.rsqrt(var + jnp.asarray(eps, acc))
    y = ((xg - mean) * rstd).reshape(x.shape)
    y = _affine(y, weight, bias, (c,) + (1,) * (x.ndim - 2))
    return y.astype(x.dtype), mean[..., 0], rstd[..., 0]


@lowering(aten.group_norm.default, composite=True)
def lower_group_norm_default(ctx, input, num_groups, weight=None, bias=None, eps=1e-05, cudnn_enabled=True):
    """group_norm(Tensor input, int num_groups, Tensor? weight=None, Tensor? bias=None, float eps=1.0000000000000001e-05, bool cudnn_enabled=True) -> Tensor

    Composite ``aten.group_norm``: ``reshape`` to ``(N, G, -1)``, mean and biased
    variance, ``rsqrt``, ``reshape`` back, per-channel affine.
    """
    return _group_norm(input, weight, bias, num_groups, eps)[0]


@lowering(aten.native_group_norm.default)
def lower_native_group_norm_default(ctx, input, weight, bias, N, C, HxW, group, eps):
    """native_group_norm(Tensor input, Tensor? weight, Tensor? bias, SymInt N, SymInt C, SymInt HxW, int group, float eps) -> (Tensor, Tensor, Tensor)

    As group_norm; also returns the ``(N, group)`` mean and ``rstd``.
    """
    return _group_norm(input, weight, bias, group, eps)


def _bn_shape(x):
    return (x.shape[1],) + (1,) * (x.ndim - 2)


def _bn_batch(x, weight, bias, eps):
    """Normalize with batch statistics; returns (y, mean, biased var, invstd) in opmath."""
    acc = opmath_dtype(x.dtype)
    xf = x.astype(acc)
    axes = (0,) + tuple(range(2, x.ndim))
    mean, var = _moments(xf, axes)
    invstd = jax.lax.rsqrt(var + jnp.asarray(eps, acc))
    y = _affine((xf - mean) * invstd, weight, bias, _bn_shape(x))
    return y.astype(x.dtype), mean.reshape(-1), var.reshape(-1), invstd.reshape(-1)


def _bn_running(x, weight, bias, running_mean, running_var, eps):
    acc = opmath_dtype(x.dtype)
    shape = _bn_shape(x)
    invstd = jax.lax.rsqrt(running_var.astype(acc) + jnp.asarray(eps, acc))
    y = (x.astype(acc) - running_mean.astype(acc).reshape(shape)) * invstd.reshape(shape)
    return _affine(y, weight, bias, shape).astype(x.dtype)


def _empty(x):
    return jnp.zeros((0,), opmath_dtype(x.dtype))


def _eval_saved(ctx, x, running_mean, running_var, eps):
    """The two saved-statistics outputs of eval-mode batch norm: empty, as torch's CPU kernel
    gives them; where the recorded output expects ``(C,)`` (torch's kernels for other devices:
    a graph traced from tpu tensors), the running mean and ``rsqrt(running_var + eps)``."""
    meta = ctx.out_meta
    saved = meta[1] if isinstance(meta, (list, tuple)) and len(meta) > 2 else None
    if isinstance(saved, torch.Tensor) and tuple(saved.shape) != (0,):
        acc = opmath_dtype(x.dtype)
        return running_mean.astype(acc), jax.lax.rsqrt(running_var.astype(acc) + jnp.asarray(eps, acc))
    return _empty(x), _empty(x)


@lowering(aten._native_batch_norm_legit_no_training.default)
def lower__native_batch_norm_legit_no_training_default(ctx, input, weight, bias, running_mean, running_var, momentum,
                                                        eps):
    """_native_batch_norm_legit_no_training(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Eval-mode batch norm: ``(x - running_mean) * rsqrt(running_var + eps)`` then the
    per-channel affine; the two saved-statistics outputs are empty, as in torch on CPU (or
    the running mean and invstd where the graph expects them: :func:`_eval_saved`).
    """
    return (_bn_running(input, weight, bias, running_mean, running_var, eps),
            *_eval_saved(ctx, input, running_mean, running_var, eps))


@lowering(aten._native_batch_norm_legit_functional.default)
def lower__native_batch_norm_legit_functional_default(ctx, input, weight, bias, running_mean, running_var, training,
                                                       momentum, eps):
    """_native_batch_norm_legit_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)

    Train-mode batch norm: normalizes with the batch mean and biased variance over all
    dims but 1 and returns the updated running statistics
    ``(1 - momentum) * running + momentum * batch`` (unbiased variance, ``n/(n-1)``),
    which torch.export turns into buffer mutations. With ``training=False`` it is the
    eval form and the running statistics pass through unchanged.
    """
    if not training:
        y = _bn_running(input, weight, bias, running_mean, running_var, eps)
        return (y, *_eval_saved(ctx, input, running_mean, running_var, eps), running_mean, running_var)
    y, mean, var, invstd = _bn_batch(input, weight, bias, eps)
    n = jnp.asarray(input.size // input.shape[1], var.dtype)  # works for symbolic dims too
    unbiased = var * (n / (n - 1))
    rm_dtype, rv_dtype = running_mean.dtype, running_var.dtype
    new_mean = momentum * mean + (1 - momentum) * running_mean.astype(mean.dtype)
    new_var = momentum * unbiased + (1 - momentum) * running_var.astype(var.dtype)
    return y, mean, invstd, new_mean.astype(rm_dtype), new_var.astype(rv_dtype)


@lowering(aten._native_batch_norm_legit.no_stats)
def lower__native_batch_norm_legit_no_stats(ctx, input, weight, bias, training, momentum, eps):
    """_native_batch_norm_legit.no_stats(Tensor input, Tensor? weight, Tensor? bias, bool training, float momentum, float eps) -> (Tensor, Tensor, Tensor)

    Batch norm without running statistics (InstanceNorm, ``track_running_stats=False``):
    batch mean and biased variance; returns (y, mean, invstd).
    """
    y, mean, _, invstd = _bn_batch(input, weight, bias, eps)
    return y, mean, invstd


@lowering(aten._batch_norm_with_update_functional.default)
def lower__batch_norm_with_update_functional_default(ctx, input, weight, bias, running_mean, running_var, momentum,
                                                      eps):
    """_batch_norm_with_update_functional(Tensor input, Tensor? weight, Tensor? bias, Tensor running_mean, Tensor running_var, float momentum, float eps) -> (Tensor, Tensor, Tensor, Tensor, Tensor running_mean_out, Tensor running_var_out)

    Train-mode batch norm as ``_native_batch_norm_legit_functional``; the fourth output is the
    empty ``uint8`` reserve buffer (cuDNN's workspace on CUDA, empty on CPU).
    """
    y, mean, invstd, new_mean, new_var = lower__native_batch_norm_legit_functional_default(
        ctx, input, weight, bias, running_mean, running_var, True, momentum, eps)
    return y, mean, invstd, jnp.zeros((0,), jnp.uint8), new_mean, new_var
