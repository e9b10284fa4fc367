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
