"""Gamma-family samplers and their reparameterized gradients: ``_standard_gamma`` (Gamma, Chi2,
StudentT), ``_sample_dirichlet`` (Dirichlet, Beta, LKJCholesky), ``binomial``, with
``_standard_gamma_grad`` and ``_dirichlet_grad`` for ``rsample`` backward.

Sampling draws from JAX's PRNG (values differ from torch's for a seed, as every random op's
do: see :mod:`.random`). The gradients are deterministic functions of a sample and its
parameters: ``_standard_gamma_grad(alpha, x) = -(∂F/∂alpha) / f`` for the Gamma CDF ``F`` and
density ``f`` at ``x`` is ``lax.random_gamma_grad``; ``_dirichlet_grad(x, alpha, total)`` is
the same quantity for ``Beta(alpha, total - alpha)`` divided by ``1 - x``, computed exactly here
(``∂I_x/∂alpha`` of the regularized incomplete beta by a central difference in float64), where
torch evaluates a rational approximation (they agree to about 1e-4 relative).
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.lowering.ops.random import _check_generator, _sample_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten
_TINY = {jnp.dtype(jnp.float32): jnp.finfo(jnp.float32).tiny, jnp.dtype(jnp.float64): jnp.finfo(jnp.float64).tiny}


def _compute(ctx, x):
    dtype = ctx.out_dtype or x.dtype
    return dtype, x.astype(_sample_dtype(dtype))


@lowering(aten._standard_gamma.default)
def lower__standard_gamma_default(ctx, self, generator=None):
    """_standard_gamma(Tensor self, Generator? generator=None) -> Tensor

    ``jax.random.gamma(key, self)``: a ``Gamma(self, 1)`` sample per element (zero stays zero),
    at least the dtype's smallest normal number, as torch clamps it.
    """
    _check_generator(ctx, generator)
    dtype, alpha = _compute(ctx, self)
    sample = jax.random.gamma(ctx.next_key(), alpha, alpha.shape, alpha.dtype)
    return jnp.maximum(sample, _TINY[jnp.dtype(alpha.dtype)]).astype(dtype)


@lowering(aten._standard_gamma_grad.default)
def lower__standard_gamma_grad_default(ctx, self, output):
    """_standard_gamma_grad(Tensor self, Tensor output) -> Tensor

    ``d output / d self`` of a ``Gamma(self, 1)`` sample ``output`` (implicit reparameterization):
    ``lax.random_gamma_grad(self, output)``.
    """
    dtype, alpha = _compute(ctx, self)
    return jax.lax.random_gamma_grad(alpha, output.astype(alpha.dtype)).astype(dtype)


@lowering(aten._sample_dirichlet.default)
def lower__sample_dirichlet_default(ctx, self, generator=None):
    """_sample_dirichlet(Tensor self, Generator? generator=None) -> Tensor

    A Dirichlet sample over the last dim of the concentrations ``self``: Gamma samples normalized
    to sum 1 (each at least the dtype's smallest normal number, as torch clamps them).
    """
    _check_generator(ctx, generator)
    dtype, alpha = _compute(ctx, self)
    tiny = _TINY[jnp.dtype(alpha.dtype)]
    gammas = jnp.maximum(jax.random.gamma(ctx.next_key(), alpha, alpha.shape, alpha.dtype), tiny)
    return jnp.maximum(gammas / jnp.sum(gammas, axis=-1, keepdims=True), tiny).astype(dtype)


def _beta_cdf_alpha(x, a, b):
    """``∂ I_x(a, b) / ∂a`` (``b`` fixed), a central difference in float64."""
    x, a, b = (v.astype(jnp.float64) for v in (x, a, b))
    h = 1e-5 * jnp.maximum(a, 1e-3)
    return (jax.scipy.special.betainc(a + h, b, x) - jax.scipy.special.betainc(a - h, b, x)) / (2 * h)


def _beta_pdf(x, a, b):
    x, a, b = (v.astype(jnp.float64) for v in (x, a, b))
    log_beta = jax.scipy.special.gammaln(a) + jax.scipy.special.gammaln(b) - jax.scipy.special.gammaln(a + b)
    return jnp.exp((a - 1) * jnp.log(x) + (b - 1) * jnp.log1p(-x) - log_beta)


@lowering(aten._dirichlet_grad.default)
def lower__dirichlet_grad_default(ctx, x, alpha, total):
    """_dirichlet_grad(Tensor x, Tensor alpha, Tensor total) -> Tensor

    ``-(∂F/∂alpha) / f / (1 - x)`` for ``Beta(alpha, total - alpha)``'s CDF ``F`` and density ``f``
    at ``x`` (see the module docstring); what the Dirichlet and Beta ``rsample`` backward use.
    """
    dtype = ctx.out_dtype or x.dtype
    x, alpha, total = jnp.broadcast_arrays(x, alpha, total)
    beta = total - alpha
    grad = -_beta_cdf_alpha(x, alpha, beta) / _beta_pdf(x, alpha, beta) / (1 - x.astype(jnp.float64))
    return jnp.where(jnp.isfinite(grad), grad, 0.0).astype(dtype)


@lowering(aten.binomial.default)
def lower_binomial_default(ctx, count, prob, generator=None):
    """binomial(Tensor count, Tensor prob, Generator? generator=None) -> Tensor

    ``jax.random.binomial(key, count, prob)`` element-wise, in ``count``'s dtype.
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype or count.dtype
    n, p = jnp.broadcast_arrays(count.astype(jnp.float32), prob.astype(jnp.float32))
    return jax.random.binomial(ctx.next_key(), n, p, n.shape, jnp.float32).astype(dtype)
