"""Random ops: dropout, bernoulli, rand/randn/randint (+ ``_like``), normal, uniform, exponential,
geometric, randperm, multinomial, rrelu noise.

RNG deviation from torch (by design): every op draws from JAX's counter-based PRNG
with a key from ``ctx.next_key()`` (the program's ``rng`` argument folded with the node
name and a per-call counter), not from torch's Philox/MT19937 generator state. Values
therefore differ from PyTorch for the same seed, while shapes, dtypes, supports and
distributions match; the same ``rng`` key reproduces the same values. Tests check
statistics (``tests/ops/test_random.py``), not values. A ``generator=`` argument cannot
be honoured in an exported program and is rejected; the tpu device's eager runtime takes a
CPU generator off the call and seeds the op's key from it (``tpu_runtime.rng``).

torch.export produces ``native_dropout`` for ``nn.Dropout``/``F.dropout`` in train mode,
``bernoulli.p`` for ``dropout2d``/``alpha_dropout``, and ``rand`` + ``lt`` for
``torch.bernoulli(probs)``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _check_generator(ctx, generator) -> None:
    if generator is not None:
        raise UnsupportedOpError(str(ctx.node.target if ctx.node is not None else "random op"), ctx.target,
                                 ctx.location, reason="an explicit torch.Generator cannot be honoured; "
                                                      "pass rng= to the lowered program instead")


def _sample_dtype(dtype):
    """float64 for float64 and complex128, else float32: JAX's bfloat16/float16 samplers are coarser."""
    return jnp.float64 if dtype in (jnp.float64, jnp.complex128) else jnp.float32


def _complex_parts(draw, key, shape, dtype, scale=1.0):
    """For a complex ``dtype``: ``draw(key, shape + (2,), real dtype)`` as real and imaginary parts, each times
    ``scale``, as torch's CPU fills a complex tensor (its real view); ``None`` for any other dtype."""
    if not jnp.issubdtype(dtype, jnp.complexfloating):
        return None
    parts = draw(key, tuple(shape) + (2,), _sample_dtype(dtype)) * scale
    return jax.lax.complex(parts[..., 0], parts[..., 1]).astype(dtype)


def _each_part(offset, dtype):
    """A real python number ``offset`` to add to a sample of ``dtype``: for a complex one, added to both parts."""
    return complex(offset, offset) if jnp.issubdtype(dtype, jnp.complexfloating) else offset


def _normal01(key, shape, dtype):
    """N(0, 1) in ``dtype`` (drawn in :func:`_sample_dtype`); complex: variance 1/2 in each part, as torch's
    ``randn``/``normal_``."""
    z = _complex_parts(jax.random.normal, key, shape, dtype, 0.5 ** 0.5)
    return z if z is not None else jax.random.normal(key, tuple(shape), _sample_dtype(dtype)).astype(dtype)


def _uniform01(key, shape, dtype):
    """U[0, 1) in ``dtype``; float16/bfloat16 like torch: ``digits`` random bits * 2^-digits; complex: each part.

    (A float32 sample cast to bfloat16 could round up to 1.0.)
    """
    u = _complex_parts(jax.random.uniform, key, shape, dtype)
    if u is not None:
        return u
    if dtype not in (jnp.float16, jnp.bfloat16):
        return jax.random.uniform(key, tuple(shape), dtype)
    digits = jnp.finfo(dtype).nmant + 1
    bits = jax.random.bits(key, tuple(shape), jnp.uint32) >> (32 - digits)
    return (bits.astype(jnp.float32) * (2.0 ** -digits)).astype(dtype)


@lowering(aten.native_dropout.default)
def lower_native_dropout_default(ctx, input, p, train):
    """native_dropout(Tensor input, float p, bool? train) -> (Tensor, Tensor)

    Train (``train`` True or None, as in torch's CPU kernel): ``mask = bernoulli(1 - p)``
    (``random_bits`` + compare) and ``input * mask / (1 - p)``; p == 1 gives zeros.
    Otherwise the identity and an all-True mask. Values differ from torch's RNG (see
    module docstring).
    """
    if (train is None or train) and p != 0:
        if p == 1:
            return jnp.zeros_like(input), jnp.zeros(input.shape, jnp.bool_)
        mask = jax.random.bernoulli(ctx.next_key(), 1.0 - p, input.shape)
        out = jnp.where(mask, input * jnp.asarray(1.0 / (1.0 - p), input.dtype), jnp.zeros((), input.dtype))
        return out, mask
    return input, jnp.ones(input.shape, jnp.bool_)


@lowering(aten.bernoulli.p)
def lower_bernoulli_p(ctx, self, p=0.5, *, generator=None):
    """bernoulli.p(Tensor self, float p, *, Generator? generator=None) -> Tensor

    ``jax.random.bernoulli(key, p)`` shaped like ``self``, cast to ``self``'s dtype.
    """
    _check_generator(ctx, generator)
    return jax.random.bernoulli(ctx.next_key(), p, self.shape).astype(ctx.out_dtype or self.dtype)


@lowering(aten.bernoulli.Tensor)
def lower_bernoulli_tensor(ctx, self, p, *, generator=None):
    """bernoulli.Tensor(Tensor self, Tensor p, *, Generator? generator=None) -> Tensor

    ``jax.random.bernoulli(key, p)`` with ``p`` (one probability per element, broadcast) shaped like ``self``,
    cast to ``self``'s dtype (``x.bernoulli_(p)``'s functional form).
    """
    _check_generator(ctx, generator)
    probs = jnp.broadcast_to(p.astype(jnp.float32 if p.dtype in (jnp.float16, jnp.bfloat16) else p.dtype), self.shape)
    return jax.random.bernoulli(ctx.next_key(), probs, self.shape).astype(ctx.out_dtype or self.dtype)


@lowering(aten.poisson.default)
def lower_poisson_default(ctx, self, generator=None):
    """poisson(Tensor self, Generator? generator=None) -> Tensor

    ``jax.random.poisson(key, rate)`` element-wise with ``self`` as the rates, in ``self``'s dtype.
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype or self.dtype
    rates = self.astype(jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype)
    return jax.random.poisson(ctx.next_key(), rates, self.shape).astype(dtype)


@lowering(aten.rand.default)
def lower_rand_default(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """rand(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``jax.random.uniform`` on [0, 1) in the recorded dtype (float16/bfloat16: ``random_bits``
    scaled like torch, so 1.0 never appears).
    """
    return _uniform01(ctx.next_key(), size, ctx.out_dtype)


@lowering(aten.randn.default)
def lower_randn_default(ctx, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """randn(SymInt[] size, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``jax.random.normal`` (standard normal) in the recorded dtype (complex: variance 1/2 in each part).
    """
    return _normal01(ctx.next_key(), size, ctx.out_dtype)


@lowering(aten.rand_like.default)
def lower_rand_like_default(ctx, self, *, dtype=None, layout=None, device=None, pin_memory=None,
                            memory_format=None):
    """rand_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    ``jax.random.uniform`` on [0, 1) with ``self``'s shape (float16/bfloat16 as in rand).
    """
    return _uniform01(ctx.next_key(), self.shape, ctx.out_dtype or self.dtype)


@lowering(aten.randn_like.default)
def lower_randn_like_default(ctx, self, *, dtype=None, layout=None, device=None, pin_memory=None,
                             memory_format=None):
    """randn_like(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    ``jax.random.normal`` with ``self``'s shape (complex as in randn).
    """
    return _normal01(ctx.next_key(), self.shape, ctx.out_dtype or self.dtype)


def _randint(ctx, low, high, shape, dtype):
    return jax.random.randint(ctx.next_key(), tuple(shape), low, high, dtype=jnp.int64).astype(dtype)


@lowering(aten.randint.low)
def lower_randint_low(ctx, low, high, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """randint.low(SymInt low, SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``jax.random.randint`` uniform on [low, high), drawn as int64 and cast to the dtype.
    """
    return _randint(ctx, low, high, size, ctx.out_dtype)


@lowering(aten.randint.default)
def lower_randint_default(ctx, high, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    """randint(SymInt high, SymInt[] size, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    ``jax.random.randint`` uniform on [0, high).
    """
    return _randint(ctx, 0, high, size, ctx.out_dtype)


@lowering(aten.randint_like.low_dtype)
def lower_randint_like_low_dtype(ctx, self, low, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                                 memory_format=None):
    """randint_like.low_dtype(Tensor self, SymInt low, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    ``jax.random.randint`` on [low, high) with ``self``'s shape.
    """
    return _randint(ctx, low, high, self.shape, ctx.out_dtype or self.dtype)


@lowering(aten.randint_like.default)
def lower_randint_like_default(ctx, self, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                               memory_format=None):
    """randint_like(Tensor self, SymInt high, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, MemoryFormat? memory_format=None) -> Tensor

    ``jax.random.randint`` on [0, high) with ``self``'s shape.
    """
    return _randint(ctx, 0, high, self.shape, ctx.out_dtype or self.dtype)


@lowering(aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor)
def lower_normal_tensor_float(ctx, mean, std=1.0, *, generator=None):
    """normal.Tensor_float(Tensor mean, float std=1., *, Generator? generator=None) -> Tensor

    Also normal.float_Tensor and normal.Tensor_Tensor. ``mean + std * N(0, 1)`` over the
    broadcast shape of the tensor arguments.
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype
    shape = jnp.broadcast_shapes(*(jnp.shape(a) for a in (mean, std)))
    base = dtype if jnp.issubdtype(dtype, jnp.complexfloating) else _sample_dtype(dtype)
    z = _normal01(ctx.next_key(), shape, base)
    return (jnp.asarray(mean, base) + jnp.asarray(std, base) * z).astype(dtype)


@lowering(aten.normal_functional.default)
def lower_normal_functional_default(ctx, self, mean=0.0, std=1.0, *, generator=None):
    """normal_functional(Tensor self, float mean=0., float std=1., *, Generator? generator=None) -> Tensor

    ``mean + std * N(0, 1)`` with ``self``'s shape and dtype (functional ``normal_``; complex: ``mean`` in each
    part, ``std`` its whole: ``std / sqrt(2)`` each, as torch's CPU).
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype or self.dtype
    base = dtype if jnp.issubdtype(dtype, jnp.complexfloating) else _sample_dtype(dtype)
    z = _normal01(ctx.next_key(), self.shape, base)
    return (_each_part(mean, base) + std * z).astype(dtype)


@lowering(aten.uniform.default)
def lower_uniform_default(ctx, self, from_=0.0, to=1.0, *, generator=None, **kwargs):
    """uniform(Tensor self, float from=0., float to=1., *, Generator? generator=None) -> Tensor

    ``from + (to - from) * U[0, 1)`` with ``self``'s shape and dtype (functional ``uniform_``; complex: each part).
    """
    _check_generator(ctx, generator)
    from_ = kwargs.pop("from", from_)  # the schema's name is a python keyword
    if kwargs:
        raise TypeError(f"uniform got unexpected arguments {sorted(kwargs)}")
    dtype = ctx.out_dtype or self.dtype
    base = dtype if jnp.issubdtype(dtype, jnp.complexfloating) else _sample_dtype(dtype)
    u = _uniform01(ctx.next_key(), self.shape, base)
    return (_each_part(from_, base) + (to - from_) * u).astype(dtype)


@lowering(aten.exponential.default)
def lower_exponential_default(ctx, self, lambd=1.0, *, generator=None):
    """exponential(Tensor self, float lambd=1., *, Generator? generator=None) -> Tensor

    ``jax.random.exponential / lambd`` with ``self``'s shape and dtype.
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype or self.dtype
    e = jax.random.exponential(ctx.next_key(), self.shape, _sample_dtype(dtype))
    return (e / lambd).astype(dtype)


@lowering(aten.geometric.default)
def lower_geometric_default(ctx, self, p, *, generator=None):
    """geometric(Tensor self, float p, *, Generator? generator=None) -> Tensor

    The trials up to the first success, ``floor(log1p(-U) / log1p(-p)) + 1`` (``U`` uniform on [0, 1)), drawn
    in float and cast to ``self``'s dtype: integer tensors too, as on the CPU (torch's decomposition draws
    ``rand_like(self)``, which integers refuse).
    """
    _check_generator(ctx, generator)
    dtype = ctx.out_dtype or self.dtype
    base = _sample_dtype(dtype)
    u = jax.random.uniform(ctx.next_key(), self.shape, base)
    return (jnp.floor(jnp.log1p(-u) / jnp.log1p(-jnp.asarray(p, base))) + 1).astype(dtype)


@lowering(aten.randperm.default, aten.randperm.generator)
def lower_randperm_default(ctx, n, *, generator=None, dtype=None, layout=None, device=None, pin_memory=None):
    """randperm(SymInt n, *, ScalarType? dtype=4, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    Also ``randperm.generator`` (the runtime takes a CPU generator off first: it seeds the key).
    ``jax.random.permutation(key, n)`` (a sort by random keys), cast to the dtype.
    """
    _check_generator(ctx, generator)
    return jax.random.permutation(ctx.next_key(), n).astype(ctx.out_dtype or jnp.int64)


@lowering(aten.multinomial.default)
def lower_multinomial_default(ctx, self, num_samples, replacement=False, *, generator=None):
    """multinomial(Tensor self, SymInt num_samples, bool replacement=False, *, Generator? generator=None) -> Tensor

    Rows of non-negative weights (1-d or 2-d). With replacement: ``jax.random.categorical``
    on ``log(weights)``; without: the Gumbel top-k trick (``log(w) + Gumbel`` then
    ``top_k``), which samples without replacement with torch's probabilities.
    Deviation: torch raises for invalid weights (negative, all zero, too few non-zero
    categories without replacement); here such rows yield arbitrary valid indices.
    """
    _check_generator(ctx, generator)
    logits = jnp.log(self.astype(_sample_dtype(self.dtype)))
    key = ctx.next_key()
    if replacement:
        draws = jax.random.categorical(key, logits, axis=-1, shape=(num_samples,) + logits.shape[:-1])
        out = jnp.moveaxis(draws, 0, -1)
    else:
        g = logits + jax.random.gumbel(key, logits.shape, logits.dtype)
        out = jax.lax.top_k(g, num_samples)[1]
    return out.astype(jnp.int64)


@lowering(aten.rrelu_with_noise_functional.default)
def lower_rrelu_with_noise_functional_default(ctx, self, noise, lower=0.125, upper=1.0 / 3.0, training=False,
                                              generator=None):
    """rrelu_with_noise_functional(Tensor self, Tensor noise, Scalar lower=0.125, Scalar upper=0.33333333333333331, bool training=False, Generator? generator=None) -> (Tensor, Tensor noise_out)

    Train: for ``x <= 0`` a slope drawn from ``U[lower, upper)`` (the new noise; 1 elsewhere),
    output ``x * noise``. Eval: leaky ReLU with slope ``(lower + upper) / 2``; noise unchanged.
    """
    _check_generator(ctx, generator)
    dtype = self.dtype
    if training:
        u = jax.random.uniform(ctx.next_key(), self.shape, _sample_dtype(dtype))
        slope = (lower + (upper - lower) * u).astype(dtype)
        new_noise = jnp.where(self <= 0, slope, jnp.ones((), dtype))
        return self * new_noise, new_noise.astype(noise.dtype)
    slope = jnp.asarray((lower + upper) / 2, dtype)
    return jnp.where(self >= 0, self, self * slope), noise
