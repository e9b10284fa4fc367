"""Fused RNN cells: the ops PyTorch's ``nn.LSTM`` / ``nn.GRU`` call on an accelerator, and their backwards.

On a device other than the CPU (CUDA, XPU, PrivateUse1: the eager ``tpu`` device),
ATen's RNN loop runs the two gate projections with ``linear`` and hands them to
``_thnn_fused_lstm_cell`` / ``_thnn_fused_gru_cell``; autograd then calls
``_thnn_fused_lstm_cell_backward_impl`` / ``_thnn_fused_gru_cell_backward`` with the
*workspace* the forward saved. The workspace layouts are CUDA's (aten/src/ATen/native/
cuda/RNN.cu), so the two halves stay interchangeable with PyTorch's:

* LSTM: ``[i, f, g, o]`` activated gates (sigmoid, sigmoid, tanh, sigmoid), ``[B, 4H]``;
* GRU: ``[r, z, n, hx, hn]`` (reset, update, new gate, previous hidden, hidden
  projection of the new gate incl. its bias), ``[B, 5H]``.

The backwards are torch's closed forms over the saved gates (no recomputation of
the projections). float16/bfloat16 compute in float32 and round once (CUDA's
accscalar_t). torch.export decomposes ``nn.LSTM``/``nn.GRU`` into ``linear`` and
pointwise ops instead, so these rows serve the eager device and AOTAutograd graphs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _calc(*xs):
    """``xs`` (``None`` kept) in the opmath dtype of the first one; and that first dtype."""
    dt = next(x.dtype for x in xs if x is not None)
    calc = opmath_dtype(dt)
    return [None if x is None else jnp.asarray(x).astype(calc) for x in xs], dt


def _biased(gates, bias):
    return gates if bias is None else gates + bias


@lowering(aten._thnn_fused_lstm_cell.default)
def lower__thnn_fused_lstm_cell_default(ctx, input_gates, hidden_gates, cx, input_bias=None, hidden_bias=None):
    """_thnn_fused_lstm_cell(Tensor input_gates, Tensor hidden_gates, Tensor cx, Tensor? input_bias=None, Tensor? hidden_bias=None) -> (Tensor, Tensor, Tensor)

    ``i, f, g, o = split(ig + hg (+ biases), 4)``, activated sigmoid/sigmoid/tanh/sigmoid;
    ``cy = f*cx + i*g``, ``hy = o*tanh(cy)``. Returns ``(hy, cy, workspace)``, the
    workspace being the activated gates ``[i, f, g, o]``. Emits ``logistic``, ``tanh``,
    ``mul``, ``add``, ``concatenate``.
    """  # noqa: E501 (the first line is the exact schema)
    (ig, hg, c, bi, bh), dt = _calc(input_gates, hidden_gates, cx, input_bias, hidden_bias)
    i, f, g, o = jnp.split(_biased(ig, bi) + _biased(hg, bh), 4, axis=1)
    i, f, g, o = jax.nn.sigmoid(i), jax.nn.sigmoid(f), jnp.tanh(g), jax.nn.sigmoid(o)
    cy = f * c + i * g
    hy = o * jnp.tanh(cy)
    return hy.astype(dt), cy.astype(dt), jnp.concatenate([i, f, g, o], axis=1).astype(dt)


@lowering(aten._thnn_fused_lstm_cell_backward_impl.default)
def lower__thnn_fused_lstm_cell_backward_impl_default(ctx, grad_hy, grad_cy, cx, cy, workspace, has_bias):
    """_thnn_fused_lstm_cell_backward_impl(Tensor? grad_hy, Tensor? grad_cy, Tensor cx, Tensor cy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor)

    With the saved gates ``[i, f, g, o]``: ``dc = grad_hy*o*(1 - tanh(cy)^2) + grad_cy``;
    gate gradients (pre-activation) ``di = dc*g*i(1-i)``, ``df = dc*cx*f(1-f)``,
    ``dg = dc*i*(1-g^2)``, ``do = grad_hy*tanh(cy)*o(1-o)``. Returns
    ``(grad_gates [B, 4H], grad_cx = dc*f, grad_bias = sum_B grad_gates or None)``;
    a missing ``grad_hy``/``grad_cy`` counts as zeros (torch's undefined gradient).
    """  # noqa: E501 (the first line is the exact schema)
    (gh, gc, c, cyy, ws), dt = _calc(grad_hy, grad_cy, cx, cy, workspace)
    i, f, g, o = jnp.split(ws, 4, axis=1)
    tc = jnp.tanh(cyy)
    gh = jnp.zeros_like(c) if gh is None else gh
    dc = gh * o * (1 - tc * tc) + (0 if gc is None else gc)
    gates = jnp.concatenate([dc * g * (1 - i) * i, dc * c * (1 - f) * f, dc * i * (1 - g * g),
                             gh * tc * (1 - o) * o], axis=1)
    grad_bias = gates.sum(axis=0).astype(dt) if has_bias else None
    return gates.astype(dt), (dc * f).astype(dt), grad_bias


@lowering(aten._thnn_fused_gru_cell.default)
def lower__thnn_fused_gru_cell_default(ctx, input_gates, hidden_gates, hx, input_bias=None, hidden_bias=None):
    """_thnn_fused_gru_cell(Tensor input_gates, Tensor hidden_gates, Tensor hx, Tensor? input_bias=None, Tensor? hidden_bias=None) -> (Tensor, Tensor)

    ``r, z = sigmoid(ig_rz + hg_rz)``, ``n = tanh(ig_n + r*hg_n)`` (biases added to
    their projections first), ``hy = n + z*(hx - n)``. Returns ``(hy, workspace)``
    with the workspace ``[r, z, n, hx, hg_n]``.
    """  # noqa: E501 (the first line is the exact schema)
    (ig, hg, h, bi, bh), dt = _calc(input_gates, hidden_gates, hx, input_bias, hidden_bias)
    ir, iz, i_n = jnp.split(_biased(ig, bi), 3, axis=1)
    hr, hz, h_n = jnp.split(_biased(hg, bh), 3, axis=1)
    r, z = jax.nn.sigmoid(ir + hr), jax.nn.sigmoid(iz + hz)
    n = jnp.tanh(i_n + r * h_n)
    hy = n + z * (h - n)
    return hy.astype(dt), jnp.concatenate([r, z, n, h, h_n], axis=1).astype(dt)


@lowering(aten._thnn_fused_gru_cell_backward.default)
def lower__thnn_fused_gru_cell_backward_default(ctx, grad_hy, workspace, has_bias):
    """_thnn_fused_gru_cell_backward(Tensor grad_hy, Tensor workspace, bool has_bias) -> (Tensor, Tensor, Tensor, Tensor, Tensor)

    With the saved ``[r, z, n, hx, hn]``: ``dz = g*(hx - n)*z(1-z)``,
    ``dn = g*(1-z)*(1-n^2)``, ``dr = dn*hn*r(1-r)``. Returns ``(grad_input_gates =
    [dr, dz, dn], grad_hidden_gates = [dr, dz, dn*r], grad_hx = g*z, grad_input_bias,
    grad_hidden_bias)``, the biases' gradients being the gates' sums over the batch
    (``None`` without bias).
    """  # noqa: E501 (the first line is the exact schema)
    (g, ws), dt = _calc(grad_hy, workspace)
    r, z, n, h, hn = jnp.split(ws, 5, axis=1)
    dz = g * (h - n) * (1 - z) * z
    dn = g * (1 - z) * (1 - n * n)
    dr = dn * hn * (1 - r) * r
    gi = jnp.concatenate([dr, dz, dn], axis=1)
    gh = jnp.concatenate([dr, dz, dn * r], axis=1)
    bias = (gi.sum(axis=0).astype(dt), gh.sum(axis=0).astype(dt)) if has_bias else (None, None)
    return gi.astype(dt), gh.astype(dt), (g * z).astype(dt), *bias
