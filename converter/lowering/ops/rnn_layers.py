"""Whole recurrent layers: ``lstm`` / ``gru`` / ``rnn_tanh`` / ``rnn_relu`` (kept whole by capture).

torch.export would decompose ``nn.LSTM``/``nn.GRU``/``nn.RNN`` into one traced Python
loop per layer, which costs more than the rest of a small model's conversion; the
capture keeps the op (``converter.capture.PRESERVED_OPS``) and these rows emit the
same computation straight into JAX:

* per layer and direction, one input projection for the whole sequence (the
  composite ``aten.linear``: LiteRT FULLY_CONNECTED with fused bias);
* per time step, the hidden projection (``aten.linear`` again) plus the step's
  slice of the input projection, then the cell's gates.

Sequences keep the caller's layout: with ``batch_first`` the time axis stays axis 1
(steps are sliced and concatenated there), so no transpose is emitted for it; a
reverse direction walks the steps backwards instead of flipping the sequence. The
time loop is unrolled up to :data:`MAX_UNROLLED_STEPS` steps and a ``lax.scan`` beyond (a loop in the
exported file), also for a dynamic sequence length (the capture gives these ops shape rules that do not
loop over time: ``converter.capture.recurrent_shape_rules``); the batch may be dynamic too.
In train mode, ``dropout`` drops the outputs of every layer but the last, as
PyTorch's CPU kernel does (the ``native_dropout`` row).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from converter.lowering import registry
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _row(ctx: Any, op: Any, *args: Any) -> Any:
    """``op``'s row of the table on ``args`` (emitted as a composite where the target keeps one)."""
    return registry.apply(registry.lookup(op, ctx.target), ctx, args, {})


def _linear(ctx: Any, x: Any, w: Any, b: Any) -> Any:
    """``x @ w.T + b`` as the ``aten.linear`` row (LiteRT: FULLY_CONNECTED)."""
    return _row(ctx, aten.linear.default, x, w, b)


def _lstm_cell(ctx, xp, state, w):
    h, c = state
    i, f, g, o = jnp.split(_linear(ctx, h, w["hh"], w["b_hh"]) + xp, 4, axis=-1)
    c = jax.nn.sigmoid(f) * c + jax.nn.sigmoid(i) * jnp.tanh(g)
    h = jax.nn.sigmoid(o) * jnp.tanh(c)
    if w["hr"] is not None:
        h = _linear(ctx, h, w["hr"], None)
    return h, (h, c)


def _gru_cell(ctx, xp, state, w):
    (h,) = state
    ir, iz, i_n = jnp.split(xp, 3, axis=-1)
    hr, hz, h_n = jnp.split(_linear(ctx, h, w["hh"], w["b_hh"]), 3, axis=-1)
    r, z = jax.nn.sigmoid(hr + ir), jax.nn.sigmoid(hz + iz)
    n = jnp.tanh(i_n + h_n * r)
    h = (h - n) * z + n
    return h, (h,)


def _simple_cell(act: Callable) -> Callable:
    def cell(ctx, xp, state, w):
        h = act(_linear(ctx, state[0], w["hh"], w["b_hh"]) + xp)
        return h, (h,)
    return cell


def _weights(params: list, index: int, has_biases: bool, proj: bool) -> dict:
    """Layer-direction ``index``'s ``{ih, hh, b_ih, b_hh, hr}`` from torch's flat parameter list.

    Each group is ``w_ih, w_hh`` (``, b_ih, b_hh`` with biases) (``, w_hr`` with projections).
    """
    per = (4 if has_biases else 2) + (1 if proj else 0)
    group = params[index * per:(index + 1) * per]
    b_ih, b_hh = (group[2], group[3]) if has_biases else (None, None)
    return {"ih": group[0], "hh": group[1], "b_ih": b_ih, "b_hh": b_hh, "hr": group[-1] if proj else None}


#: The longest sequence whose time loop is unrolled; a longer one is a ``lax.scan`` (the exporters' loop:
#: one copy of the step in the file, not one per step; 500 steps of a 2-layer LSTM took 35 s to export
#: unrolled).
MAX_UNROLLED_STEPS = 64


def _time_loop(ctx, cell, xp, state, w, axis: int, reverse: bool):
    """The cell over the steps of ``xp`` (time on ``axis``); returns the outputs (time on ``axis``) and the
    final state."""
    steps = xp.shape[axis]
    if isinstance(steps, int) and steps <= MAX_UNROLLED_STEPS:  # (a dynamic length: a loop)
        return _unrolled(ctx, cell, xp, state, w, axis, reverse)

    def step(state, x_t):
        out, state = cell(ctx, jnp.expand_dims(x_t, axis), state, w)
        return state, jnp.squeeze(out, axis)

    state, outs = jax.lax.scan(step, state, jnp.moveaxis(xp, axis, 0), reverse=reverse)
    return jnp.moveaxis(outs, 0, axis), state


def _unrolled(ctx, cell, xp, state, w, axis: int, reverse: bool):
    steps = xp.shape[axis]
    outs: list = [None] * steps
    for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
        x_t = jax.lax.slice_in_dim(xp, t, t + 1, axis=axis)
        out, state = cell(ctx, x_t, state, w)
        outs[t] = out
    return jnp.concatenate(outs, axis=axis), state


def _layers(ctx, cell, input, states, params, has_biases, num_layers, dropout, train, bidirectional,
            batch_first, proj=False):
    """Run ``num_layers`` (× 2 directions) of ``cell``; returns the output and each state's finals."""
    axis = 1 if batch_first else 0
    directions = 2 if bidirectional else 1
    finals: list[list] = [[] for _ in states]
    x = input
    for layer in range(num_layers):
        outs = []
        for d in range(directions):
            k = layer * directions + d
            w = _weights(params, k, has_biases, proj)
            xp = _linear(ctx, x, w["ih"], w["b_ih"])
            state = tuple(jnp.moveaxis(jax.lax.slice_in_dim(s, k, k + 1, axis=0), 0, axis) for s in states)
            out, state = _time_loop(ctx, cell, xp, state, w, axis, reverse=d == 1)
            outs.append(out)
            for final, s in zip(finals, state):
                final.append(jnp.squeeze(s, axis))
        x = outs[0] if directions == 1 else jnp.concatenate(outs, axis=-1)
        if train and dropout > 0 and layer < num_layers - 1:
            x = _row(ctx, aten.native_dropout.default, x, dropout, True)[0]
    return x, [jnp.stack(f, 0) for f in finals]


@lowering(aten.lstm.input)
def lower_lstm_input(ctx, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """lstm.input(Tensor input, Tensor[] hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor, Tensor)

    ``nn.LSTM`` (with ``proj_size`` when ``h0`` is narrower than ``c0``). Gates
    ``i, f, g, o`` of ``x W_ihᵀ + b_ih + h W_hhᵀ + b_hh``; ``c' = σ(f) c + σ(i) tanh(g)``,
    ``h' = σ(o) tanh(c')`` (then ``h' W_hrᵀ``). Returns ``(output, h_n, c_n)``.
    """  # noqa: E501 (the first line is the exact schema)
    h0, c0 = hx
    out, (h_n, c_n) = _layers(ctx, _lstm_cell, input, (h0, c0), params, has_biases, num_layers, dropout, train,
                              bidirectional, batch_first, proj=h0.shape[-1] != c0.shape[-1])
    return out, h_n, c_n


@lowering(aten.gru.input)
def lower_gru_input(ctx, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
    """gru.input(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)

    ``nn.GRU``: ``r, z = σ(x_r + h_r), σ(x_z + h_z)``, ``n = tanh(x_n + r h_n)`` (each
    projection with its bias), ``h' = (h - n) z + n``. Returns ``(output, h_n)``.
    """  # noqa: E501 (the first line is the exact schema)
    out, (h_n,) = _layers(ctx, _gru_cell, input, (hx,), params, has_biases, num_layers, dropout, train,
                          bidirectional, batch_first)
    return out, h_n


def _simple_rnn(name: str, act: Callable, doc: str) -> Callable:
    """The lowering of ``nn.RNN`` with the nonlinearity ``act`` (``rnn_tanh`` / ``rnn_relu``)."""

    def lower(ctx, input, hx, params, has_biases, num_layers, dropout, train, bidirectional, batch_first):
        out, (h_n,) = _layers(ctx, _simple_cell(act), input, (hx,), params, has_biases, num_layers, dropout,
                              train, bidirectional, batch_first)
        return out, h_n

    lower.__name__ = lower.__qualname__ = name
    lower.__doc__ = doc
    return lower


_SIMPLE_SCHEMA = ("(Tensor input, Tensor hx, Tensor[] params, bool has_biases, int num_layers, float dropout, "
                  "bool train, bool bidirectional, bool batch_first) -> (Tensor, Tensor)")
lower_rnn_tanh_input = lowering(aten.rnn_tanh.input)(_simple_rnn(
    "lower_rnn_tanh_input", jnp.tanh, f"""rnn_tanh.input{_SIMPLE_SCHEMA}

    ``nn.RNN(nonlinearity="tanh")``: ``h' = tanh(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)``.
    Returns ``(output, h_n)``.
    """))
lower_rnn_relu_input = lowering(aten.rnn_relu.input)(_simple_rnn(
    "lower_rnn_relu_input", jax.nn.relu, f"""rnn_relu.input{_SIMPLE_SCHEMA}

    ``nn.RNN(nonlinearity="relu")``: ``h' = relu(x W_ihᵀ + b_ih + h W_hhᵀ + b_hh)``.
    Returns ``(output, h_n)``.
    """))
