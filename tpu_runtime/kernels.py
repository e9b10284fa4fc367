"""Runtime kernels: eager ops the lowering table has no row for, built from rows it has.

The table holds core ATen (what ``torch.export`` produces). Eager mode also sees
the non-core ops of optimizers and of a few backward formulas. Each kernel here
is written in terms of the table's own lowerings (called directly, or through
``jax.vjp`` for a backward), so the table stays the single source of the math;
a row added to the table later takes precedence (the dispatcher looks there
first).

Kernels listed in :data:`DYNAMIC` take their python-float arguments as traced
inputs: AdamW changes ``value=`` of ``addcdiv_`` every step, and baking it into
the executable would recompile every step.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from converter.lowering import registry
from converter.lowering.context import LoweringContext
from converter.lowering.helpers import check_fits
from converter.lowering.ops.linalg import grouped_mm_meta, scaled_mm_meta, scaled_mm_v2_meta
from converter.lowering.ops.segment import padded_dense_to_jagged_meta
from tpu_runtime import optim_kernels

aten = torch.ops.aten


def _row(op: Any, ctx: Any, *args: Any, **kwargs: Any) -> Any:
    """Call the table's lowering of ``op`` with an output-less context (the caller conforms), inline (a
    composite row emits its body: ``jax.vjp`` of a ``jax.lax.composite`` has no rule)."""
    inline = LoweringContext(target=ctx.target, options={"composites": False}, where=ctx.location)
    return registry.apply(registry.lookup(op), inline, args, kwargs)


def _opmath(ctx: Any, *xs: Any) -> tuple:
    """``xs`` in the dtype torch computes in (float32 for float16/bfloat16) and the result dtype."""
    dt = ctx.out_dtype
    calc = jnp.float32 if dt in (jnp.float16, jnp.bfloat16) else dt
    return tuple(jnp.asarray(x).astype(calc) for x in xs), dt


def convolution_backward(ctx: Any, grad_output: Any, input: Any, weight: Any, bias_sizes: Any, stride: Any,
                         padding: Any, dilation: Any, transposed: bool, output_padding: Any, groups: int,
                         output_mask: Any) -> tuple:
    """convolution_backward(...) -> (Tensor, Tensor, Tensor): ``jax.vjp`` of the convolution lowering."""
    bias = jnp.zeros(tuple(bias_sizes), input.dtype) if bias_sizes is not None and output_mask[2] else None

    def forward(x: Any, w: Any, b: Any) -> Any:
        return _row(aten.convolution.default, ctx, x, w, b, stride, padding, dilation, transposed,
                    output_padding, groups)

    out, vjp = jax.vjp(forward, input, weight, bias)
    gi, gw, gb = vjp(grad_output.astype(out.dtype))
    return (gi if output_mask[0] else None, gw if output_mask[1] else None, gb if output_mask[2] else None)


def linear_backward(ctx: Any, input: Any, grad_output: Any, weight: Any, output_mask: Any) -> tuple:
    """linear_backward(Tensor self, Tensor grad_output, Tensor weight, bool[3] output_mask) -> (Tensor, Tensor, Tensor)

    ``jax.vjp`` of the table's ``linear`` row; ``None`` where ``output_mask`` leaves a gradient out."""
    bias = jnp.zeros((weight.shape[0],), input.dtype)
    out, vjp = jax.vjp(lambda x, w, b: _row(aten.linear.default, ctx, x, w, b), input, weight, bias)
    return tuple(g if wanted else None for g, wanted in zip(vjp(grad_output.astype(out.dtype)), output_mask))


def matmul(ctx: Any, self: Any, other: Any) -> Any:
    """matmul(Tensor self, Tensor other) -> Tensor

    Built from the table's rows, as torch's composite: a vector operand is a one-row (``self``) or one-column
    (``other``) matrix whose dimension the result drops; a batch (or matrix) times a matrix is one ``mm`` row over
    the flattened batch; otherwise a ``bmm`` row over the broadcast batch dimensions."""
    drop_row, drop_col = self.ndim == 1, other.ndim == 1
    a = self[None] if drop_row else self
    b = other[:, None] if drop_col else other
    m, n = a.shape[-2], b.shape[-1]
    if b.ndim == 2:  # (explicit sizes: a -1 cannot stand beside an empty dimension)
        rows = math.prod(a.shape[:-1])
        out = _row(aten.mm.default, ctx, a.reshape(rows, a.shape[-1]), b).reshape(a.shape[:-1] + (n,))
    else:
        batch = tuple(jnp.broadcast_shapes(a.shape[:-2], b.shape[:-2]))
        a = jnp.broadcast_to(a, batch + a.shape[-2:]).reshape((math.prod(batch),) + a.shape[-2:])
        b = jnp.broadcast_to(b, batch + b.shape[-2:]).reshape((math.prod(batch),) + b.shape[-2:])
        out = _row(aten.bmm.default, ctx, a, b).reshape(batch + (m, n))
    dropped = (-2,) * drop_row + (-1,) * drop_col
    return jnp.squeeze(out, tuple(out.ndim + d for d in dropped)) if dropped else out


def matmul_backward(ctx: Any, grad: Any, self: Any, other: Any, mask: Any) -> tuple:
    """matmul_backward(Tensor grad, Tensor self, Tensor other, bool[2] mask) -> (Tensor, Tensor)

    ``jax.vjp`` of :func:`matmul` (broadcast batch dimensions summed back); ``None`` where ``mask`` leaves a
    gradient out."""
    out, vjp = jax.vjp(lambda a, b: matmul(ctx, a, b), self, other)
    return tuple(g if wanted else None for g, wanted in zip(vjp(grad.astype(out.dtype)), mask))


def _dense_like(t: Any, wanted: bool) -> Any:
    """A dense meta tensor of ``t``'s shape and dtype, or ``None`` (a gradient left out)."""
    return t.new_empty(t.shape) if wanted else None


def addcmul(ctx: Any, self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor

    ``self + value * tensor1 * tensor2`` in opmath, rounded once; an integer result takes ``value`` as torch converts
    it (:func:`check_fits`: ``value=-1`` multiplies a ``uint8`` product by 255, 300 is refused; a float truncates).
    """
    (s, a, b), dt = _opmath(ctx, self, tensor1, tensor2)
    return (s + jnp.asarray(check_fits(value, s.dtype), s.dtype) * a * b).astype(dt)


def addcdiv(ctx: Any, self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    """addcdiv(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor

    ``self + value * (tensor1 / tensor2)`` in opmath, rounded once (floating only, as torch).
    """
    (s, a, b), dt = _opmath(ctx, self, tensor1, tensor2)
    return (s + jnp.asarray(value, s.dtype) * (a / b)).astype(dt)


def lerp_scalar(ctx: Any, self: Any, end: Any, weight: Any) -> Any:
    """lerp.Scalar(Tensor self, Tensor end, Scalar weight) -> Tensor

    torch's two-sided formula (exact at both ends): ``self + w * (end - self)`` for
    ``|w| < 0.5``, else ``end - (end - self) * (1 - w)``.
    """
    (s, e), dt = _opmath(ctx, self, end)
    w = jnp.asarray(weight, s.dtype)
    diff = e - s
    return jnp.where(jnp.abs(w) < 0.5, s + w * diff, e - diff * (1 - w)).astype(dt)


def _random_from(ctx: Any, self: Any, from_: int = 0, to: int | None = None, *, generator: Any = None) -> Any:
    """random.from(Tensor self, int from, int? to, *, Generator? generator=None) -> Tensor

    Integers uniform on [from, to); without ``to``, on [from, the dtype's top] as torch's CPU: ``2^digits`` for a
    floating dtype (every integer below it is exact: 2^24 for float32, 2^11 for float16), the largest value of an
    integer dtype, ``True`` for bool."""
    if to is None:
        dt = self.dtype
        top = 2 ** (jnp.finfo(dt).nmant + 1) if jnp.issubdtype(dt, jnp.floating) else 1 if dt == jnp.bool_ \
            else int(jnp.iinfo(dt).max)
        to = min(top + 1, int(jnp.iinfo(jnp.int64).max))
    return jax.random.randint(ctx.next_key(), self.shape, from_, to, dtype=jnp.int64).astype(self.dtype)


def _random_to(ctx: Any, self: Any, to: int, *, generator: Any = None) -> Any:
    """random.to(Tensor self, int to, *, Generator? generator=None) -> Tensor"""
    return _random_from(ctx, self, 0, to)


def _random(ctx: Any, self: Any, *, generator: Any = None) -> Any:
    """random(Tensor self, *, Generator? generator=None) -> Tensor: ``random_()``, on [0, the dtype's top] (see
    :func:`_random_from`)."""
    return _random_from(ctx, self, 0, None)


def glu_jvp(ctx: Any, glu: Any, x: Any, dx: Any, dim: int) -> Any:
    """glu_jvp(Tensor glu, Tensor x, Tensor dx, int dim) -> Tensor: the forward-mode derivative of
    ``glu = a * sigmoid(b)`` (``a``, ``b`` the halves of ``x`` along ``dim``): ``da * sigmoid(b) +
    glu * (1 - sigmoid(b)) * db``."""
    (x, dx, glu), dt = _opmath(ctx, x, dx, glu)
    _, b = jnp.split(x, 2, axis=dim)
    da, db = jnp.split(dx, 2, axis=dim)
    sig = jax.nn.sigmoid(b)
    return (da * sig + glu * (1 - sig) * db).astype(dt)


#: Runtime kernels by op (used only when the lowering table has no row for the op).
KERNELS: dict[Any, Callable] = {
    aten.convolution_backward.default: convolution_backward,
    aten.linear_backward.default: linear_backward,
    aten.matmul.default: matmul,
    aten.matmul_backward.default: matmul_backward,
    aten.glu_jvp.default: glu_jvp,
    aten.addcmul.default: addcmul,
    aten.addcdiv.default: addcdiv,
    aten.lerp.Scalar: lerp_scalar,
    getattr(aten.random, "from"): _random_from,
    aten.random.to: _random_to,
    aten.random.default: _random,
}


def _fused_lstm_cell_meta(input_gates: Any, hidden_gates: Any, cx: Any, input_bias: Any = None,
                          hidden_bias: Any = None) -> tuple:
    return torch.empty_like(cx), torch.empty_like(cx), torch.empty_like(input_gates)


def _fused_gru_cell_meta(input_gates: Any, hidden_gates: Any, hx: Any, input_bias: Any = None,
                         hidden_bias: Any = None) -> tuple:
    b, h = hx.shape
    return torch.empty_like(hx), hx.new_empty((b, 5 * h))


def _fused_gru_cell_backward_meta(grad_hy: Any, workspace: Any, has_bias: bool) -> tuple:
    b, h = grad_hy.shape
    gates = grad_hy.new_empty((b, 3 * h))
    bias = (grad_hy.new_empty((3 * h,)), grad_hy.new_empty((3 * h,))) if has_bias else (None, None)
    return gates, torch.empty_like(gates), torch.empty_like(grad_hy), *bias


def _ctc_loss_meta(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
                   zero_infinity: bool = False) -> tuple:
    steps, batch = log_probs.shape[0], log_probs.shape[1]
    states = 2 * max(target_lengths, default=0) + 1
    return log_probs.new_empty((batch,)), log_probs.new_empty((batch, steps, states))


def _multilabel_margin_meta(self: torch.Tensor, target: torch.Tensor, reduction: int) -> tuple:
    """As torch's CPU kernel (its meta kernel makes one sample's unreduced loss ``(1,)``, CPU ``()``)."""
    shape = (self.shape[0],) if reduction == 0 and self.dim() == 2 else ()
    return self.new_empty(shape), self.new_empty(target.shape)


def _histogram_meta(self: Any, bins: Any = 100, *, range: Any = None, weight: Any = None,
                    density: bool = False) -> tuple:
    """histogram.bin_ct / .bins_tensor: ``(hist, bin_edges)`` in ``self``'s dtype."""
    edges = bins + 1 if isinstance(bins, int) else bins.shape[0]
    return self.new_empty((edges - 1,)), self.new_empty((edges,))


def _histogramdd_meta(self: Any, bins: Any, *, range: Any = None, weight: Any = None, density: bool = False) -> Any:
    """_histogramdd_from_bin_cts / _from_bin_tensors: the histogram, one dimension per coordinate."""
    return self.new_empty(tuple(b if isinstance(b, int) else b.shape[0] - 1 for b in bins))


def _histogramdd_edges_meta(self: Any, bins: Any, *, range: Any = None, weight: Any = None,
                            density: bool = False) -> list:
    """_histogramdd_bin_edges: one edge tensor per coordinate."""
    return [self.new_empty((b + 1,)) for b in bins]


def _arange_meta(start: Any, end: Any, step: Any = 1, **kwargs: Any) -> torch.Tensor:
    """arange.start_step on meta: torch's meta kernel, except for an integer dtype whose float step truncates to 0
    (``arange(0, 5, 0.5, dtype=int32)``), which it refuses where the CPU makes ``ceil((end - start) / step)``
    elements (all ``start``)."""
    dtype = kwargs.get("dtype")
    if dtype is not None and not dtype.is_floating_point and not dtype.is_complex and isinstance(step, float) \
            and step and int(step) == 0:
        return torch.empty(max(math.ceil((end - start) / step), 0), dtype=dtype, device="meta")
    return aten.arange.start_step(start, end, step, **{**kwargs, "device": "meta"})


def _pow_scalar_meta(self: Any, exponent: Any) -> torch.Tensor:
    """pow.Tensor_Scalar on meta: torch's meta kernel, except a bool tensor to a bool power (``mask ** True``), which
    the CPU's kernel keeps bool (its type promotion) where the meta kernel answers int64."""
    out = aten.pow.Tensor_Scalar(self, exponent)
    return out.to(torch.bool) if self.dtype == torch.bool and type(exponent) is bool else out


def _nearest_meta(op: Any, input: Any, *args: Any) -> torch.Tensor:
    """upsample_nearest{1,2,3}d / _upsample_nearest_exact{1,2,3}d on meta: torch's meta kernel, except an empty
    input, whose check hands ``torch._check`` an int and raises a TypeError. The CPU resizes an empty batch (to
    an empty output: its spatial size comes from a batch of one here) and refuses empty channels or spatial dims
    with a RuntimeError."""
    if input.numel():
        return op(input, *args)
    if not math.prod(input.shape[1:]):
        raise RuntimeError(f"Non-empty {input.dim()}D data tensor expected but got a tensor with sizes "
                           f"{list(input.shape)}")
    return input.new_empty(input.shape[:2] + op(input.new_empty((1, *input.shape[1:])), *args).shape[2:])


def _fused_observer_meta(self: Any, observer_on: Any, fake_quant_on: Any, running_min: Any, running_max: Any,
                         scale: Any, zero_point: Any, averaging_const: float, quant_min: int, quant_max: int,
                         ch_axis: int, per_row_fake_quant: bool = False, symmetric_quant: bool = False) -> tuple:
    """_fused_moving_avg_obs_fq_helper_functional's results on meta, shaped as by torch's meta kernel, except that a
    per-row observer's empty running values (a fresh ``FusedMovingAvgObsFakeQuantize`` of weights) come out one
    per row, as the CPU kernel resizes them."""
    grown = per_row_fake_quant and running_min.numel() == 0
    values = (running_min, running_max, scale, zero_point)
    return (torch.empty_like(self), torch.empty_like(self, dtype=torch.bool),
            *(t.new_empty(self.shape[:1]) if grown else torch.empty_like(t) for t in values))


#: Output shapes of ops (table rows or kernels) whose meta kernel in torch is missing or fails
#: (torch's ``_thnn_fused_lstm_cell`` meta kernel cannot take ``None`` biases).
META_FUNCTIONS: dict[Any, Callable] = {
    aten.glu_jvp.default: lambda glu, x, dx, dim: torch.empty_like(glu),
    # (torch's meta kernel of linear_backward makes the bias gradient whatever the mask; matmul_backward has none)
    aten.linear_backward.default: lambda input, grad, weight, mask: (
        _dense_like(input, mask[0]), _dense_like(weight, mask[1]), _dense_like(weight.new_empty(weight.shape[0]), mask[2])),
    aten.matmul_backward.default: lambda grad, a, b, mask: (_dense_like(a, mask[0]), _dense_like(b, mask[1])),
    aten.arange.start_step: _arange_meta,
    aten.pow.Tensor_Scalar: _pow_scalar_meta,
    # the gradient of the loss input has its shape (torch has no meta kernel for this backward)
    aten.multi_margin_loss_backward.default: lambda grad_output, self, *args, **kwargs: torch.empty_like(self),
    aten.multilabel_margin_loss_backward.default: lambda grad_output, self, *args, **kwargs: torch.empty_like(self),
    aten.multilabel_margin_loss_forward.default: _multilabel_margin_meta,
    aten._ctc_loss.default: _ctc_loss_meta,
    aten._ctc_loss_backward.default: lambda grad, log_probs, *args, **kwargs: torch.empty_like(log_probs),
    aten._thnn_fused_lstm_cell.default: _fused_lstm_cell_meta,
    aten._thnn_fused_gru_cell.default: _fused_gru_cell_meta,
    aten._thnn_fused_gru_cell_backward.default: _fused_gru_cell_backward_meta,
    aten.geqrf.default: lambda self: (torch.empty_like(self), self.new_empty(self.shape[:-2] + (min(self.shape[-2:]),))),
    aten._grouped_mm.default: grouped_mm_meta,
    aten._scaled_mm.default: scaled_mm_meta,
    aten._scaled_mm_v2.default: scaled_mm_v2_meta,
    aten._padded_dense_to_jagged_forward.default: padded_dense_to_jagged_meta,
    aten.fractional_max_pool3d_backward.default: lambda grad_output, self, *args: torch.empty_like(self),
    aten._standard_gamma_grad.default: lambda self, output: torch.empty_like(self),
    aten._sample_dirichlet.default: lambda self, generator=None: torch.empty_like(self),
    aten._dirichlet_grad.default: lambda x, alpha, total: x.new_empty(torch.broadcast_shapes(x.shape, alpha.shape,
                                                                                             total.shape)),
    aten.binomial.default: lambda count, prob, generator=None: count.new_empty(torch.broadcast_shapes(count.shape,
                                                                                                      prob.shape)),
    # (torch's floor-division meta is a decomposition whose result is dense: the CPU's kernel lays it out as its
    # inputs, as truncating division's meta does)
    aten.div.Tensor_mode: lambda self, other, *, rounding_mode: aten.div.Tensor_mode(
        self, other, rounding_mode="trunc" if rounding_mode == "floor" else rounding_mode),
    aten.floor_divide.default: lambda self, other: aten.div.Tensor_mode(self, other, rounding_mode="trunc"),
    aten.histogram.bin_ct: _histogram_meta,
    aten.histogram.bins_tensor: _histogram_meta,
    aten._histogramdd_from_bin_cts.default: _histogramdd_meta,
    aten._histogramdd_from_bin_tensors.default: _histogramdd_meta,
    aten._histogramdd_bin_edges.default: _histogramdd_edges_meta,
    # fake quantization (QAT): the values in the input's shape and dtype and a bool mask (torch has no meta kernels)
    **{op: lambda self, *args, **kwargs: (torch.empty_like(self), torch.empty_like(self, dtype=torch.bool))
       for op in (aten.fake_quantize_per_tensor_affine_cachemask.default,
                  aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,
                  aten.fake_quantize_per_channel_affine_cachemask.default)},
    aten._fused_moving_avg_obs_fq_helper_functional.default: _fused_observer_meta,
    **{op: functools.partial(_nearest_meta, op) for op in (
        getattr(getattr(aten, f"{name}{n}d"), overload) for name in ("upsample_nearest", "_upsample_nearest_exact")
        for n in (1, 2, 3) for overload in ("default", "vec"))},
}

KERNELS.update(optim_kernels.KERNELS)
KERNELS.update(optim_kernels.AMP_KERNELS)
META_FUNCTIONS.update(optim_kernels.META_FUNCTIONS)

#: Kernels whose python-float arguments are traced inputs rather than key parts.
DYNAMIC = frozenset({aten.addcmul.default, aten.addcdiv.default, aten.lerp.Scalar, *optim_kernels.KERNELS})
