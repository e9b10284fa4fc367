"""Fractional max pooling (``nn.FractionalMaxPool2d``/``3d``) and its backward.

The pseudo-random pooling regions come from the op's ``random_samples`` input (one sample in
[0, 1) per plane and spatial dimension; ``F.fractional_max_pool*d`` draws them from the device
generator, so compare with CPU by passing ``_random_samples``). As torch's CPU kernel: along a
dimension of size ``n`` pooled to ``o`` windows of ``k``, with ``α = (n − k) / (o − 1)`` in the
input dtype, window ``i < o − 1`` starts at ``⌊(i + u) α⌋ − ⌊u α⌋`` and the last at ``n − k``;
2-D samples are ordered (width, height), 3-D ones (time, height, width). Each window's value is
its first maximum, or its last NaN; indices are flat over the spatial dimensions.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
import torch

from converter.lowering.ops.backward import _scatter_to_indices
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _starts(u, size: int, out: int, k: int):
    """Window starts ``(N, C, out)`` along one dimension for samples ``u`` ``(N, C)``."""
    last = jnp.full(u.shape + (1,), size - k, jnp.int64)
    if out == 1:
        return last
    alpha = jnp.asarray(size - k, u.dtype) / jnp.asarray(out - 1, u.dtype)
    i = jnp.arange(out - 1, dtype=u.dtype)
    first = jnp.floor((i + u[..., None]) * alpha) - jnp.floor(u[..., None] * alpha)
    return jnp.concatenate([first.astype(jnp.int64), last], axis=-1)


def _fractional_max_pool(self, kernel_size, output_size, random_samples, nd: int):
    batched = self.ndim == nd + 2
    x = self if batched else self[None]
    n, c, spatial = x.shape[0], x.shape[1], x.shape[2:]
    u = random_samples.astype(x.dtype)
    order = (1, 0) if nd == 2 else (0, 1, 2)  # the sample of each spatial dimension
    pos = [_starts(u[..., order[d]], spatial[d], output_size[d], kernel_size[d])[..., None]
           + jnp.arange(kernel_size[d]) for d in range(nd)]  # (N, C, o_d, k_d)
    v = x
    flat = jnp.zeros((n, c) + (1,) * (2 * nd), jnp.int64)
    for d in range(nd):
        o, k = output_size[d], kernel_size[d]
        idx = pos[d].reshape((n, c) + (1,) * d + (o * k,) + (1,) * (nd - d - 1))
        shape = v.shape[:2 + d] + (o * k,) + v.shape[3 + d:]
        v = jnp.take_along_axis(v, jnp.broadcast_to(idx, shape), axis=2 + d)
        place = [1] * (2 * nd)
        place[2 * d], place[2 * d + 1] = o, k
        flat = flat + pos[d].reshape((n, c) + tuple(place)) * math.prod(spatial[d + 1:])
    window = (n, c) + sum(((output_size[d], kernel_size[d]) for d in range(nd)), ())
    perm = (0, 1) + tuple(2 + 2 * d for d in range(nd)) + tuple(3 + 2 * d for d in range(nd))
    lead = (n, c) + tuple(output_size)
    v = jnp.transpose(v.reshape(window), perm).reshape(lead + (-1,))
    flat = jnp.transpose(jnp.broadcast_to(flat, window), perm).reshape(lead + (-1,))
    nan = jnp.isnan(v)
    last_nan = v.shape[-1] - 1 - jnp.argmax(nan[..., ::-1], axis=-1)
    first_max = jnp.argmax(jnp.where(nan, -jnp.inf, v), axis=-1)
    pick = jnp.where(jnp.any(nan, axis=-1), last_nan, first_max)[..., None]
    values = jnp.take_along_axis(v, pick, axis=-1)[..., 0]
    indices = jnp.take_along_axis(flat, pick, axis=-1)[..., 0]
    return (values, indices) if batched else (values[0], indices[0])


@lowering(aten.fractional_max_pool2d.default)
def lower_fractional_max_pool2d_default(ctx, self, kernel_size, output_size, random_samples):
    """fractional_max_pool2d(Tensor self, int[2] kernel_size, int[2] output_size, Tensor random_samples) -> (Tensor, Tensor)

    Two ``gather`` steps build every window, then the first maximum (last NaN) and its flat
    index over height × width (module docstring).
    """
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 2)


@lowering(aten.fractional_max_pool3d.default)
def lower_fractional_max_pool3d_default(ctx, self, kernel_size, output_size, random_samples):
    """fractional_max_pool3d(Tensor self, int[3] kernel_size, int[3] output_size, Tensor random_samples) -> (Tensor, Tensor)

    As fractional_max_pool2d over time, height and width.
    """
    return _fractional_max_pool(self, kernel_size, output_size, random_samples, 3)


@lowering(aten.fractional_max_pool2d_backward.default)
def lower_fractional_max_pool2d_backward_default(ctx, grad_output, self, kernel_size, output_size, indices):
    """fractional_max_pool2d_backward(Tensor grad_output, Tensor self, int[2] kernel_size, int[2] output_size, Tensor indices) -> Tensor

    ``scatter``-add of ``grad_output`` at the saved flat indices (shared maxima add up).
    """
    return _scatter_to_indices(grad_output, self, indices, 2)


@lowering(aten.fractional_max_pool3d_backward.default)
def lower_fractional_max_pool3d_backward_default(ctx, grad_output, self, kernel_size, output_size, indices):
    """fractional_max_pool3d_backward(Tensor grad_output, Tensor self, int[3] kernel_size, int[3] output_size, Tensor indices) -> Tensor

    As fractional_max_pool2d_backward over three spatial dimensions.
    """
    return _scatter_to_indices(grad_output, self, indices, 3)
