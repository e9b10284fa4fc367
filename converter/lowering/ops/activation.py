"""Activations: relu, hardtanh (ReLU6), leaky_relu, elu, sigmoid, tanh, and the
preserved high-level ones (gelu, silu, hardswish, hardsigmoid, mish, softmax,
log_softmax) emitted as ``jax.lax.composite(name="aten.<op>")`` so LiteRT can map
them to its builtins (GELU, LOGISTIC·MUL, HARD_SWISH, SOFTMAX, LOG_SOFTMAX).

float16/bfloat16 compute in float32 and round once, as torch's CPU kernels do.
softplus, selu, celu, logsigmoid, threshold, hardshrink… decompose to the ops here
and in ``unary``/``compare``.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.ops.elementwise import opmath, out_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _float_act(ctx, x, fn):
    """Apply ``fn`` in the opmath of the (floating) result dtype and round to it."""
    dt = out_dtype(ctx, x, floating=True)
    return fn(x.astype(opmath(dt))).astype(dt)


@lowering(aten.relu.default)
def lower_relu_default(ctx, self):
    """relu(Tensor self) -> Tensor

    Emits ``max(x, 0)`` (NaN stays NaN, as in torch); integer tensors keep their dtype.
    """
    return jnp.maximum(self, jnp.zeros((), self.dtype))


@lowering(aten.hardtanh.default)
def lower_hardtanh_default(ctx, self, min_val=-1, max_val=1):
    """hardtanh(Tensor self, Scalar min_val=-1, Scalar max_val=1) -> Tensor

    ``min(max(x, min_val), max_val)``; ``relu6`` decomposes to hardtanh(x, 0, 6).
    Emits ``max``/``min`` (LiteRT: RELU6 / RELU_N1_TO_1 patterns).
    """
    lo, hi = jnp.asarray(min_val, self.dtype), jnp.asarray(max_val, self.dtype)
    return jnp.minimum(jnp.maximum(self, lo), hi)


@lowering(aten.leaky_relu.default)
def lower_leaky_relu_default(ctx, self, negative_slope=0.01):
    """leaky_relu(Tensor self, Scalar negative_slope=0.01) -> Tensor

    ``x > 0 ? x : x * negative_slope`` (``select``).
    """
    return _float_act(ctx, self, lambda x: jnp.where(x > 0, x, x * jnp.asarray(negative_slope, x.dtype)))


@lowering(aten.elu.default)
def lower_elu_default(ctx, self, alpha=1, scale=1, input_scale=1):
    """elu(Tensor self, Scalar alpha=1, Scalar scale=1, Scalar input_scale=1) -> Tensor

    ``x > 0 ? scale * x : scale * alpha * expm1(x * input_scale)``; ``selu``
    decomposes to elu with its constants.
    """
    def f(x):
        neg = jnp.asarray(alpha * scale, x.dtype) * jnp.expm1(x * jnp.asarray(input_scale, x.dtype))
        return jnp.where(x > 0, x * jnp.asarray(scale, x.dtype), neg)

    return _float_act(ctx, self, f)


@lowering(aten.sigmoid.default)
def lower_sigmoid_default(ctx, self):
    """sigmoid(Tensor self) -> Tensor

    Emits ``logistic``; integer inputs give float32.
    """
    return _float_act(ctx, self, jax.nn.sigmoid)


@lowering(aten.tanh.default)
def lower_tanh_default(ctx, self):
    """tanh(Tensor self) -> Tensor

    Emits ``tanh``; integer inputs give float32.
    """
    return _float_act(ctx, self, jnp.tanh)


@lowering(aten.gelu.default, composite=True)
def lower_gelu_default(ctx, self, *, approximate="none"):
    """gelu(Tensor self, *, str approximate="none") -> Tensor

    Composite ``aten.gelu`` (LiteRT: GELU with ``approximate``). Body:
    ``"none"``: ``x/2 * (1 + erf(x/√2))``; ``"tanh"``:
    ``x/2 * (1 + tanh(√(2/π) * (x + 0.044715 x³)))``.
    """
    if approximate == "none":
        def f(x):
            return 0.5 * x * (1 + jax.lax.erf(x * (1 / math.sqrt(2))))
    elif approximate == "tanh":
        def f(x):
            return 0.5 * x * (1 + jnp.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))
    else:
        raise UnsupportedOpError(str(aten.gelu.default), ctx.target, ctx.location,
                                 reason=f"approximate must be 'none' or 'tanh', got {approximate!r}")
    return _float_act(ctx, self, f)


@lowering(aten.silu.default, composite=True)
def lower_silu_default(ctx, self):
    """silu(Tensor self) -> Tensor

    Composite ``aten.silu``; body ``x * logistic(x)``.
    """
    return _float_act(ctx, self, lambda x: x * jax.nn.sigmoid(x))


def _relu6(x):
    return jnp.minimum(jnp.maximum(x, 0), 6)


@lowering(aten.hardswish.default, composite=True)
def lower_hardswish_default(ctx, self):
    """hardswish(Tensor self) -> Tensor

    Composite ``aten.hardswish`` (LiteRT: HARD_SWISH); body ``x * relu6(x + 3) / 6``.
    """
    return _float_act(ctx, self, lambda x: x * _relu6(x + 3) / 6)


@lowering(aten.hardsigmoid.default, composite=True)
def lower_hardsigmoid_default(ctx, self):
    """hardsigmoid(Tensor self) -> Tensor

    Composite ``aten.hardsigmoid``; body ``relu6(x + 3) / 6``.
    """
    return _float_act(ctx, self, lambda x: _relu6(x + 3) / 6)


@lowering(aten.mish.default, composite=True)
def lower_mish_default(ctx, self):
    """mish(Tensor self) -> Tensor

    Composite ``aten.mish``; body ``x * tanh(softplus(x))`` with the overflow-safe
    ``softplus(x) = logaddexp(x, 0)`` (torch uses ``log1p(exp(x))``: same values).
    """
    return _float_act(ctx, self, lambda x: x * jnp.tanh(jax.nn.softplus(x)))


def _softmax(x, d, log: bool):
    """(log-)softmax over dim ``d`` of ``x``, max-subtracted; a 0-d input is one element."""
    if x.ndim == 0:
        return _softmax(x.reshape(1), 0, log).reshape(())
    d = norm_dim(d, x.ndim)
    if x.shape[d] == 0:
        return x
    m = jax.lax.stop_gradient(jnp.max(x, axis=d, keepdims=True))
    # An all -inf slice gives NaN, as in torch (its max is -inf too).
    z = x - m
    if log:
        return z - jnp.log(jnp.sum(jnp.exp(z), axis=d, keepdims=True))
    e = jnp.exp(z)
    return e / jnp.sum(e, axis=d, keepdims=True)


def _softmax_dtype(ctx, x, dtype):
    dt = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else x.dtype)
    return dt


@lowering(aten._softmax.default, composite=True)
def lower__softmax_default(ctx, self, dim, half_to_float):  # noqa: A002 (schema names)
    """_softmax(Tensor self, int dim, bool half_to_float) -> Tensor

    Composite ``aten._softmax`` (LiteRT: SOFTMAX); body ``exp(x - max) / sum``
    in float32 for half inputs; ``half_to_float`` returns float32.
    """
    dt = _softmax_dtype(ctx, self, torch.float32 if half_to_float else None)
    return _softmax(self.astype(opmath(self.dtype)), dim, log=False).astype(dt)


@lowering(aten._log_softmax.default, composite=True)
def lower__log_softmax_default(ctx, self, dim, half_to_float):  # noqa: A002 (schema names)
    """_log_softmax(Tensor self, int dim, bool half_to_float) -> Tensor

    Composite ``aten._log_softmax`` (LiteRT: LOG_SOFTMAX); body
    ``(x - max) - log(sum(exp(x - max)))``; ``half_to_float`` returns float32.
    """
    dt = _softmax_dtype(ctx, self, torch.float32 if half_to_float else None)
    return _softmax(self.astype(opmath(self.dtype)), dim, log=True).astype(dt)


@lowering(aten.softmax.int, composite=True)
def lower_softmax_int(ctx, self, dim, dtype=None):  # noqa: A002 (schema names)
    """softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor

    Composite ``aten.softmax`` (LiteRT: SOFTMAX); the input is cast to ``dtype``
    first when given, as torch does.
    """
    dt = _softmax_dtype(ctx, self, dtype)
    x = self.astype(dt)
    return _softmax(x.astype(opmath(dt)), dim, log=False).astype(dt)


@lowering(aten.log_softmax.int, composite=True)
def lower_log_softmax_int(ctx, self, dim, dtype=None):  # noqa: A002 (schema names)
    """log_softmax.int(Tensor self, int dim, ScalarType? dtype=None) -> Tensor

    Composite ``aten.log_softmax`` (LiteRT: LOG_SOFTMAX); the input is cast to
    ``dtype`` first when given.
    """
    dt = _softmax_dtype(ctx, self, dtype)
    x = self.astype(dt)
    return _softmax(x.astype(opmath(dt)), dim, log=True).astype(dt)
