"""FFTs (``torch.fft.*``) and the complex ↔ real views around them.

torch.export turns every ``torch.fft`` call into one of three ops: ``_fft_r2c`` (rfft,
and fft of a real input with ``onesided=False``), ``_fft_c2r`` (irfft) and
``_fft_c2c`` (fft/ifft of a complex input). Each names the transformed dims and a
normalization code, ``0``: none, ``1``: ``1/sqrt(n)``, ``2``: ``1/n``, where ``n`` is
the product of the signal sizes; the transforms below are unnormalized and scaled
afterwards. XLA's FFT takes at most three dims at a time, so longer dim lists are
transformed in chunks (a multi-dim DFT is separable). Results are complex64 for
float32 inputs, complex128 for float64 ones.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _scale(y, sizes, normalization: int):
    """Apply torch's normalization code for a transform over ``sizes``."""
    if normalization == 0:
        return y
    n = 1
    for s in sizes:
        n = n * s
    n = jnp.asarray(n, y.real.dtype)
    return y * (jax.lax.rsqrt(n) if normalization == 1 else 1 / n)


def _c2c(x, axes, forward: bool):
    """Unnormalized complex DFT over ``axes`` (chunks of at most three dims)."""
    for i in range(0, len(axes), 3):
        chunk = axes[i:i + 3]
        x = jnp.fft.fftn(x, axes=chunk, norm="backward") if forward else jnp.fft.ifftn(x, axes=chunk, norm="forward")
    return x


def _dims(dim, ndim: int) -> list:
    """Normalized dims in the given order (the last one is the halved dim of r2c/c2r)."""
    return [norm_dim(d, ndim) for d in dim]


@lowering(aten._fft_r2c.default)
def lower__fft_r2c_default(ctx, self, dim, normalization, onesided):
    """_fft_r2c(Tensor self, int[] dim, int normalization, bool onesided) -> Tensor

    Emits ``fft`` (RFFT) over the last of ``dim`` (keeping ``n//2 + 1`` bins when
    ``onesided``, the full Hermitian spectrum otherwise), then complex ``fft`` over the
    other dims, then the normalization scale.
    """
    axes = _dims(dim, self.ndim)
    x = self.astype(jnp.float32 if self.dtype != jnp.float64 else jnp.float64)
    sizes = [self.shape[a] for a in axes]
    if onesided:
        y = jnp.fft.rfft(x, axis=axes[-1], norm="backward")
        y = _c2c(y, axes[:-1], True)
    else:
        y = _c2c(x.astype(jnp.complex64 if x.dtype == jnp.float32 else jnp.complex128), axes, True)
    return _scale(y, sizes, normalization)


@lowering(aten._fft_c2r.default)
def lower__fft_c2r_default(ctx, self, dim, normalization, last_dim_size):
    """_fft_c2r(Tensor self, int[] dim, int normalization, SymInt last_dim_size) -> Tensor

    Emits inverse complex ``fft`` over all of ``dim`` but the last, then ``fft`` (IRFFT)
    of length ``last_dim_size`` over the last (the imaginary parts of its DC and Nyquist
    bins are ignored, as in torch/pocketfft), then the normalization scale.
    """
    axes = _dims(dim, self.ndim)
    y = _c2c(self, axes[:-1], False)
    y = jnp.fft.irfft(y, n=last_dim_size, axis=axes[-1], norm="forward")
    sizes = [self.shape[a] for a in axes[:-1]] + [last_dim_size]
    return _scale(y, sizes, normalization)


@lowering(aten._fft_c2c.default)
def lower__fft_c2c_default(ctx, self, dim, normalization, forward):
    """_fft_c2c(Tensor self, SymInt[] dim, int normalization, bool forward) -> Tensor

    Emits complex ``fft`` (FFT or IFFT, unnormalized) over ``dim``, then the
    normalization scale.
    """
    axes = _dims(dim, self.ndim)
    return _scale(_c2c(self, axes, forward), [self.shape[a] for a in axes], normalization)


def _check_view_input(ctx, op, x, want: str) -> None:
    """torch's dtype check (writes through these views on the eager device go by value, not through this
    lowering on position arrays: tpu_runtime.values)."""
    ok = jnp.issubdtype(x.dtype, jnp.complexfloating) if want == "complex" else x.dtype in (jnp.float32, jnp.float64)
    if not ok:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason=f"{op._schema.name.split('::')[1]} needs a {want} input, got {x.dtype}")


@lowering(aten.view_as_real.default)
def lower_view_as_real_default(ctx, self):
    """view_as_real(Tensor(a) self) -> Tensor(a)

    ``real`` and ``imag`` stacked on a new last dim of size 2 (a copy: JAX has no views).
    """
    _check_view_input(ctx, aten.view_as_real.default, self, "complex")
    return jnp.stack([jnp.real(self), jnp.imag(self)], axis=-1)


@lowering(aten.complex.default)
def lower_complex_default(ctx, real, imag):
    """complex(Tensor real, Tensor imag) -> Tensor

    ``lax.complex`` of the broadcast float parts (complex64 from float32, complex128 from float64).
    """
    real, imag = jnp.broadcast_arrays(real, imag)
    return jax.lax.complex(real, imag)


@lowering(aten.polar.default)
def lower_polar_default(ctx, abs, angle):
    """polar(Tensor abs, Tensor angle) -> Tensor

    ``abs * cos(angle) + i * abs * sin(angle)`` as one ``lax.complex``.
    """
    abs, angle = jnp.broadcast_arrays(abs, angle)
    return jax.lax.complex(abs * jnp.cos(angle), abs * jnp.sin(angle))


@lowering(aten.angle.default)
def lower_angle_default(ctx, self):
    """angle(Tensor self) -> Tensor

    ``atan2(imag, real)`` of a complex input (its real dtype); for a real input ``π`` where
    it is negative, else 0 (NaN stays NaN), in the input's float dtype (integers: float32).
    """
    if jnp.issubdtype(self.dtype, jnp.complexfloating):
        return jnp.arctan2(jnp.imag(self), jnp.real(self))
    out = ctx.out_dtype or (self.dtype if jnp.issubdtype(self.dtype, jnp.floating) else jnp.float32)
    x = self.astype(out)
    return jnp.where(jnp.isnan(x), x, jnp.where(x < 0, jnp.asarray(jnp.pi, out), jnp.zeros((), out)))


@lowering(aten._conj.default, aten._conj_physical.default)
def lower__conj_default(ctx, self):
    """_conj(Tensor(a) self) -> Tensor(a)

    Also _conj_physical. ``conj`` (torch's lazy conjugate bit becomes a value: JAX has no
    views); the identity on real tensors.
    """
    return jnp.conj(self) if jnp.iscomplexobj(self) else self


@lowering(aten._neg_view.default)
def lower__neg_view_default(ctx, self):
    """_neg_view(Tensor(a) self) -> Tensor(a)

    ``negative`` (torch's lazy negation bit becomes a value, as ``_conj``'s): what ``x.conj().imag`` reads.
    """
    return jnp.negative(self)


@lowering(aten.view_as_complex.default)
def lower_view_as_complex_default(ctx, self):
    """view_as_complex(Tensor(a) self) -> Tensor(a)

    ``lax.complex(x[..., 0], x[..., 1])`` of a float tensor whose last dim is 2 (a copy).
    """
    _check_view_input(ctx, aten.view_as_complex.default, self, "float32/float64")
    return jax.lax.complex(self[..., 0], self[..., 1])
