"""Fake quantization: round to a quantized grid and back, as quantization-aware training (``torch.ao``'s
``FakeQuantize``, ``torch.fake_quantize_per_tensor_affine``) and exported QAT models compute it.

Each op returns the fake-quantized values and the mask of the elements whose quantized value fell inside
``[quant_min, quant_max]`` (its backward passes the gradient there only: ``grad * mask``, torch's own formula).
The arithmetic is the CPU kernel's, with a float32 ``scale``: ``q = round_half_even(x * (1 / scale)) +
zero_point`` in float32 (float64 for a float64 input); ``out = (min(max(q, quant_min), quant_max) -
zero_point) * scale`` in float32 (per channel: in ``q``'s dtype), where the clamp ignores NaN as C's ``fmax`` /
``fmin`` do (a NaN input gives ``quant_min``'s value, an infinity the bound on its side; the per-channel kernel
casts ``q`` to int64 first, which takes both to ``quant_min``), and ``mask = quant_min <= q <= quant_max``.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.dtypes import scalar_type_name
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _fake_quantize(x, scale, zero_point, quant_min, quant_max, per_channel=False):
    """``(out, mask)`` of ``x`` on the grid ``scale``, ``zero_point`` (scalars, or arrays broadcasting
    against ``x``) between ``quant_min`` and ``quant_max`` (module docstring). ``per_channel``: as the
    per-channel kernel, ``q`` goes through int64 first, as it does on x86 (NaN, an infinity or a value past
    int64's range becomes its lowest value: below ``quant_min``), and the product is in ``q``'s dtype."""
    wide = jnp.float64 if x.dtype == jnp.float64 else jnp.float32
    scale = jnp.asarray(scale, jnp.float32)
    inv_scale = (jnp.float32(1) / scale).astype(wide)  # (a float32 reciprocal, as the kernel's ``1.0f / scale``)
    float_zero_point = jnp.issubdtype(jnp.asarray(zero_point).dtype, jnp.floating)
    zero_point = jnp.asarray(zero_point).astype(wide)
    if float_zero_point:  # (torch's float-qparams kernel adds it before the rounding, in float32 for float64 too)
        q = jnp.round(x.astype(jnp.float32) * inv_scale.astype(jnp.float32)
                      + zero_point.astype(jnp.float32)).astype(wide)
    else:
        q = jnp.round(x.astype(wide) * inv_scale) + zero_point
    if per_channel:
        q = jnp.where(jnp.abs(q) < wide(2.0 ** 63), q, -jnp.inf)  # (NaN too: the comparison is false)
    bounded = jnp.fmin(jnp.fmax(q, wide(quant_min)), wide(quant_max))
    product = wide if per_channel else jnp.float32  # (per tensor: a float32 product, for float64 too)
    out = ((bounded - zero_point).astype(product) * scale.astype(product)).astype(x.dtype)
    return out, (q >= quant_min) & (q <= quant_max)


@lowering(aten.fake_quantize_per_tensor_affine_cachemask.default)
def lower_fake_quantize_per_tensor_affine_cachemask(ctx, self, scale, zero_point, quant_min, quant_max):
    """fake_quantize_per_tensor_affine_cachemask(Tensor self, float scale, int zero_point, int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    The grid of one ``scale`` and ``zero_point`` (module docstring); ``torch.fake_quantize_per_tensor_affine``
    with Python numbers.
    """  # noqa: E501 (the first line is the exact schema)
    return _fake_quantize(self, scale, zero_point, quant_min, quant_max)


@lowering(aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default)
def lower__fake_quantize_per_tensor_affine_cachemask_tensor_qparams(ctx, self, scale, zero_point,
                                                                     fake_quant_enabled, quant_min, quant_max):
    """_fake_quantize_per_tensor_affine_cachemask_tensor_qparams(Tensor self, Tensor scale, Tensor zero_point, Tensor fake_quant_enabled, int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    The one-element ``scale`` / ``zero_point`` tensors an observer computed (``FakeQuantize``); while
    ``fake_quant_enabled[0]`` is below 1 the values pass as they are, with an all-true mask (as torch).
    """  # noqa: E501 (the first line is the exact schema)
    out, mask = _fake_quantize(self, jnp.reshape(scale, ()), jnp.reshape(zero_point, ()), quant_min, quant_max)
    on = jnp.reshape(fake_quant_enabled, ()) >= 1
    return jnp.where(on, out, self), jnp.where(on, mask, True)


@lowering(aten.fake_quantize_per_channel_affine_cachemask.default)
def lower_fake_quantize_per_channel_affine_cachemask(ctx, self, scale, zero_point, axis, quant_min, quant_max):
    """fake_quantize_per_channel_affine_cachemask(Tensor self, Tensor scale, Tensor zero_point, int axis, int quant_min, int quant_max) -> (Tensor output, Tensor mask)

    One grid per index along ``axis`` (``scale`` / ``zero_point`` of that dim's length): per-channel weights.
    """  # noqa: E501 (the first line is the exact schema)
    axis = axis % self.ndim
    shape = [1] * self.ndim
    shape[axis] = self.shape[axis]
    return _fake_quantize(self, jnp.reshape(scale, shape), jnp.reshape(zero_point, shape), quant_min, quant_max,
                          per_channel=True)


#: fbgemm's smallest scale (float16's smallest normal): a range narrower than ``quant_max - quant_min`` of these
#: is widened to it.
_SMALL_SCALE = jnp.float32(6.1e-5)


def _choose_qparams(lo, hi, quant_min: int, quant_max: int, symmetric: bool):
    """``(scale, zero_point)`` (float32, int32) of observed ranges ``[lo, hi]`` (float32 arrays), element by
    element, as the CPU's ``ChooseQuantizationParams`` computes them (fbgemm's, on x86 builds): the range widened
    to hold 0 (symmetric: to equal halves around it, with the zero point in the middle of the grid); ``scale`` the
    float32 of the range over the grid's steps, in float64, 0.1 where that is 0 or its reciprocal infinite, and
    at least ``6.1e-5`` (a range is stretched to match); the zero point, in float64 from the bound with the
    smaller error, clamped to the grid and rounded half to even; NaN gives a NaN scale and ``INT32_MIN``."""
    f32, f64 = jnp.float32, jnp.float64
    steps = quant_max - quant_min
    if symmetric:
        low, high = -(steps // 2 + 1), steps // 2
        both = (lo < 0) & (hi > 0)
        # (float32 quotients, rounded once from float64's: XLA multiplies by the reciprocal of a divisor that is
        # one number, which is one ulp off for most quotients)
        half = jnp.maximum(jnp.abs((lo.astype(f64) / low).astype(f32)),
                           jnp.abs((hi.astype(f64) / high).astype(f32))).astype(f64)
        lo, hi = jnp.where(both, (half * low).astype(f32), lo), jnp.where(both, (half * high).astype(f32), hi)
    lo, hi = jnp.minimum(lo, f32(0)), jnp.maximum(hi, f32(0))
    wide = (hi.astype(f64) - lo.astype(f64)) / f64(steps)
    wide = jnp.where((wide.astype(f32) == 0) | jnp.isinf(f32(1) / wide.astype(f32)), f64(0.1), wide)
    small = wide < _SMALL_SCALE.astype(f64)
    stretch = _SMALL_SCALE / wide.astype(f32)
    lo, hi = (jnp.where(small & (lo != 0) & (hi == 0), -_SMALL_SCALE * f32(steps),
                        jnp.where(small & (lo != 0) & (hi != 0), lo * stretch, lo)),
              jnp.where(small & (lo == 0), _SMALL_SCALE * f32(steps), jnp.where(small & (hi != 0), hi * stretch, hi)))
    scale = jnp.where(small, _SMALL_SCALE, wide.astype(f32))
    lo_steps, hi_steps = lo.astype(f64) / scale.astype(f64), hi.astype(f64) / scale.astype(f64)
    zero = jnp.where(abs(quant_min) + jnp.abs(lo_steps) < abs(quant_max) + jnp.abs(hi_steps),  # (the smaller error)
                     quant_min - lo_steps, quant_max - hi_steps)
    if symmetric:
        zero = jnp.where((lo < 0) & (hi > 0), f64(quant_min + quant_max) / 2, zero)
    nudged = jnp.where(zero < quant_min, quant_min, jnp.where(zero > quant_max, quant_max, jnp.rint(zero)))
    return scale, jnp.where(jnp.isnan(zero), jnp.iinfo(jnp.int32).min, nudged).astype(jnp.int32)


def _moving_average(running, current, averaging_const: float):
    """``running + c * (current - running)`` in float32, or ``current`` where ``running`` is infinite (no value
    observed yet), as the CPU observer updates its min and max: the product rounded on its own. (LLVM would fuse
    a product that only the sum uses into one multiply-add, rounded once, on CPUs with FMA; here a NaN test uses it
    too, which changes no value: a NaN product makes a NaN sum.)"""
    step = jnp.float32(averaging_const) * (current - running)
    return jnp.where(jnp.isinf(running), current, jnp.where(jnp.isnan(step), step, running + step))


def _grown(t, n: int, fill):
    """``t`` as the CPU's ``resize_(n)`` leaves an empty tensor: ``n`` elements of ``fill`` (``None``: zeros
    after the values it held, where torch leaves them uninitialized)."""
    if fill is not None:
        return jnp.full((n,), fill, t.dtype)
    flat = jnp.reshape(t, (-1,))[:n]
    return jnp.concatenate([flat, jnp.zeros((n - flat.shape[0],), t.dtype)])


@lowering(aten._fused_moving_avg_obs_fq_helper_functional.default)
def lower__fused_moving_avg_obs_fq_helper_functional(ctx, self, observer_on, fake_quant_on, running_min,
                                                     running_max, scale, zero_point, averaging_const, quant_min,
                                                     quant_max, ch_axis, per_row_fake_quant=False,
                                                     symmetric_quant=False):
    """_fused_moving_avg_obs_fq_helper_functional(Tensor self, Tensor observer_on, Tensor fake_quant_on, Tensor running_min, Tensor running_max, Tensor scale, Tensor zero_point, float averaging_const, int quant_min, int quant_max, int ch_axis, bool per_row_fake_quant=False, bool symmetric_quant=False) -> (Tensor output, Tensor mask, Tensor running_min_out, Tensor running_max_out, Tensor scale_out, Tensor zero_point_out)

    The fused observer and fake quantization of torch.ao's default QAT qconfigs (``FusedMovingAvgObsFakeQuantize``
    of ``get_default_qat_qconfig("x86" / "fbgemm" / "qnnpack")``): while ``observer_on[0]`` is nonzero, the
    running min / max move towards ``self``'s (per tensor, or per row of dim 0 for ``per_row_fake_quant``; the
    first observation takes them as they are); while ``fake_quant_on[0]`` is nonzero, ``scale`` / ``zero_point``
    are chosen from them (:func:`_choose_qparams`) and ``self`` is fake-quantized on that grid; else ``self`` passes
    as it is with an all-true mask. Per row, empty running values (a fresh observer) grow to one per row first;
    rows along another dim than 0 are refused (the CPU refuses them while observing).
    """  # noqa: E501 (the first line is the exact schema)
    if self.dtype != jnp.float32:
        raise RuntimeError(f"expected scalar type Float but found {scalar_type_name(self.dtype)}")
    observe = jnp.reshape(observer_on, (-1,))[0] != 0
    quantize = jnp.reshape(fake_quant_on, (-1,))[0] != 0
    if per_row_fake_quant:
        if ch_axis != 0:
            raise RuntimeError("Per-channel FakeQuant in fused_moving_avg_obs_fake_quant is only supported on "
                               "axis == 0")
        rows = self.shape[0]
        recorded = ctx.out_meta[2] if isinstance(ctx.out_meta, (list, tuple)) else None
        if running_min.size == 0 and recorded is not None and recorded.numel() == 0:
            raise UnsupportedOpError(str(aten._fused_moving_avg_obs_fq_helper_functional.default), ctx.target,
                                     ctx.location, hint=False,
                                     reason="a per-channel observer that has seen no value yet holds an empty running "
                                            "min / max, which its first forward grows to one per channel, and "
                                            "torch.export takes the empty shape for the written one; run the model "
                                            "once before converting it")
        if running_min.size == 0:
            running_min, running_max = _grown(running_min, rows, jnp.inf), _grown(running_max, rows, -jnp.inf)
            scale, zero_point = _grown(scale, rows, None), _grown(zero_point, rows, None)
        axes = tuple(range(1, self.ndim))
        low, high = jnp.min(self, axis=axes), jnp.max(self, axis=axes)
    else:
        low, high = jnp.reshape(jnp.min(self), running_min.shape), jnp.reshape(jnp.max(self), running_max.shape)
    running_min = jnp.where(observe, _moving_average(running_min, low, averaging_const), running_min)
    running_max = jnp.where(observe, _moving_average(running_max, high, averaging_const), running_max)
    new_scale, new_zero_point = _choose_qparams(jnp.reshape(running_min, (-1,)), jnp.reshape(running_max, (-1,)),
                                                quant_min, quant_max, symmetric_quant)
    if per_row_fake_quant:
        shape = (-1,) + (1,) * (self.ndim - 1)
        out, mask = _fake_quantize(self, jnp.reshape(new_scale, shape), jnp.reshape(new_zero_point, shape),
                                   quant_min, quant_max, per_channel=True)
        new_scale, new_zero_point = new_scale.astype(scale.dtype), new_zero_point.astype(zero_point.dtype)
    else:  # (the one scale and zero point go into the first element of the tensors holding them)
        out, mask = _fake_quantize(self, new_scale[0], new_zero_point[0], quant_min, quant_max)
        new_scale = jnp.reshape(scale, (-1,)).at[0].set(new_scale[0].astype(scale.dtype)).reshape(scale.shape)
        new_zero_point = jnp.reshape(zero_point, (-1,)).at[0].set(
            new_zero_point[0].astype(zero_point.dtype)).reshape(zero_point.shape)
    return (jnp.where(quantize, out, self), jnp.where(quantize, mask, True), running_min, running_max,
            jnp.where(quantize, new_scale, scale), jnp.where(quantize, new_zero_point, zero_point))
