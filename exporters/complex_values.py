"""Complex values inside an exported program, for both exporters: each is a pair of real values.

Neither format computes on complex numbers (TFLite's few complex kernels and ONNX's ``DFT`` cover a sliver of
what a program does with them), so the shared walker (:class:`~exporters.jaxpr_walk.JaxprTranslator`) keeps a
complex jaxpr value as a :class:`ComplexPair` of two values of the real dtype, and translates each eqn that
reads or makes one through a small JAX function of the real and imaginary parts (:data:`RULES`), which the
target's own rules then translate: a spectrogram's ``stft`` → ``abs``, ``view_as_complex`` → ``mul`` →
``view_as_real`` (rotary embeddings written with complex numbers), ``torch.fft`` with real inputs and outputs.

* Ops that act on each part alone (reshape, transpose, slice, pad, concatenate, add, reduce_sum, …) run twice.
* ``mul``, ``div``, ``dot_general``, ``abs``, ``exp``, ``sign``, comparisons: their formulas on the parts.
* ``fft``: a DFT along each transformed axis as a matrix product with constant cosine / sine tables (any
  length, not only powers of two; O(n²) per axis, which for the frame sizes of spectrograms costs less than
  the matmuls around them). ``IFFT``/``IRFFT`` scale by ``1/n`` as XLA's do; ``IRFFT`` reads the half
  spectrum as pocketfft does (the imaginary parts of the zero and Nyquist bins are ignored).

A complex program input or output is refused by name (no format has a complex tensor the artifact could feed;
``torch.view_as_real`` gives the same numbers as a real tensor).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import primitives as lax

from exporters.jaxpr_values import JaxprValue
from exporters.rule_table import Unsupported


class ComplexPair(JaxprValue):
    """A complex jaxpr value as two real values of the translator's value type (``re``, ``im``); never a
    constant (a complex constant is one value of the translator's type, split when read: :func:`parts`)."""

    __slots__ = ("re", "im", "shape", "dtype", "const", "base")

    def __init__(self, re: Any, im: Any, dtype: Any):
        self.re, self.im = re, im
        self.shape = self.base = tuple(re.shape)
        self.dtype = np.dtype(dtype)
        self.const = None


def is_complex(dtype: Any) -> bool:
    """Whether ``dtype`` is a complex dtype."""
    return np.issubdtype(np.dtype(dtype), np.complexfloating)


def touches_complex(eqn: Any) -> bool:
    """Whether an eqn reads or makes a complex value."""
    return any(is_complex(v.aval.dtype) for v in (*eqn.invars, *eqn.outvars) if hasattr(v.aval, "dtype"))


def _real(dtype: Any) -> np.dtype:
    return np.finfo(np.dtype(dtype)).dtype  # complex64 → float32, complex128 → float64


def parts(tr: Any, v: Any) -> tuple:
    """``(re, im)`` of a complex value: a :class:`ComplexPair`'s, or a complex constant's split in two."""
    if type(v) is ComplexPair:
        return v.re, v.im
    if v.is_const and is_complex(v.dtype):
        c = v.full()
        return tr.const(np.array(c.real)), tr.const(np.array(c.imag))
    raise Unsupported(f"a complex value of {v.dtype} arriving as a real tensor")


def _pairs(tr: Any, eqn: Any, re: list, im: list) -> list:
    return [ComplexPair(r, i, v.aval.dtype) for r, i, v in zip(re, im, eqn.outvars)]


def _real_params(params: dict) -> dict:
    """An eqn's params with each complex dtype replaced by its real one."""
    def real(v: Any) -> Any:
        dtype = isinstance(v, np.dtype) or (isinstance(v, type) and issubclass(v, np.generic))
        return _real(v) if dtype and is_complex(v) else v
    return {k: real(v) for k, v in params.items()}


def _bind(prim: Any, params: dict) -> Callable:
    def fn(*xs: Any) -> list:
        out = prim.bind(*xs, **params)
        return list(out) if prim.multiple_results else [out]
    return fn


def per_part(tr: Any, eqn: Any, ins: list) -> list:
    """An op that acts on the real and imaginary parts alone (structural ops, ``add``, ``reduce_sum``…):
    run on each, its real operands (indices, predicates) the same both times."""
    re_ins, im_ins = [], []
    for v, var in zip(ins, eqn.invars):
        if is_complex(var.aval.dtype):
            r, i = parts(tr, v)
            re_ins.append(r)
            im_ins.append(i)
        else:
            re_ins.append(v)
            im_ins.append(v)
    fn = _bind(eqn.primitive, _real_params(eqn.params))
    return _pairs(tr, eqn, tr.through_all(fn, *re_ins), tr.through_all(fn, *im_ins))


_PER_PART = {lax.reshape_p, lax.transpose_p, lax.broadcast_in_dim_p, lax.squeeze_p, lax.slice_p, lax.dynamic_slice_p,
             lax.dynamic_update_slice_p, lax.concatenate_p, lax.pad_p, lax.rev_p, lax.gather_p, lax.select_n_p,
             lax.add_p, lax.sub_p, lax.neg_p, lax.reduce_sum_p, lax.cumsum_p, lax.copy_p, lax.reduce_precision_p,
             lax.add_jaxvals_p}


def _on_parts(fn: Callable, real_out: bool = False) -> Callable:
    """A rule computing an eqn's output(s) from its inputs' parts with ``fn(tr, eqn, *[(re, im) | real])``."""
    def rule(tr: Any, eqn: Any, ins: list) -> list:
        args = []
        for v, var in zip(ins, eqn.invars):
            args.append(parts(tr, v) if is_complex(var.aval.dtype) else v)
        return fn(tr, eqn, *args)
    return rule


def _components(tr: Any, eqn: Any, fn: Callable, *vals: Any) -> list:
    """``fn(*arrays) -> (re, im)`` translated on ``vals``, as the eqn's complex output."""
    re, im = tr.through_all(lambda *xs: list(fn(*xs)), *vals)
    return _pairs(tr, eqn, [re], [im])


def _mul(tr: Any, eqn: Any, a: Any, b: Any) -> list:
    return _components(tr, eqn, lambda ar, ai, br, bi: (ar * br - ai * bi, ar * bi + ai * br), *a, *b)


def _div(tr: Any, eqn: Any, a: Any, b: Any) -> list:
    def fn(ar: Any, ai: Any, br: Any, bi: Any) -> tuple:
        d = br * br + bi * bi
        return (ar * br + ai * bi) / d, (ai * br - ar * bi) / d
    return _components(tr, eqn, fn, *a, *b)


def _abs(tr: Any, eqn: Any, a: Any) -> list:
    """``|z|``, scaled by the larger part (``re² + im²`` overflows float32 from 1.8e19)."""
    def fn(re: Any, im: Any) -> Any:
        big = jnp.maximum(jnp.abs(re), jnp.abs(im))
        safe = jnp.where(big == 0, jnp.ones_like(big), big)
        out = big * jnp.sqrt((re / safe) ** 2 + (im / safe) ** 2)
        return jnp.where(jnp.isinf(re) | jnp.isinf(im), jnp.inf, out)
    return [tr.through_all(lambda *xs: [fn(*xs)], *a)[0]]


def _exp(tr: Any, eqn: Any, a: Any) -> list:
    return _components(tr, eqn, lambda re, im: (jnp.exp(re) * jnp.cos(im), jnp.exp(re) * jnp.sin(im)), *a)


def _sign(tr: Any, eqn: Any, a: Any) -> list:
    def fn(re: Any, im: Any) -> tuple:
        m = jnp.sqrt(re * re + im * im)
        safe = jnp.where(m == 0, jnp.ones_like(m), m)
        return jnp.where(m == 0, 0.0, re / safe), jnp.where(m == 0, 0.0, im / safe)
    return _components(tr, eqn, fn, *a)


def _integer_pow(tr: Any, eqn: Any, a: Any) -> list:
    y = eqn.params["y"]

    def fn(re: Any, im: Any) -> tuple:
        acc, base, n = (jnp.ones_like(re), jnp.zeros_like(re)), (re, im), abs(y)
        while n:  # (square and multiply, in the parts)
            if n & 1:
                acc = (acc[0] * base[0] - acc[1] * base[1], acc[0] * base[1] + acc[1] * base[0])
            base = (base[0] * base[0] - base[1] * base[1], 2 * base[0] * base[1])
            n >>= 1
        if y < 0:
            d = acc[0] * acc[0] + acc[1] * acc[1]
            acc = (acc[0] / d, -acc[1] / d)
        return acc
    return _components(tr, eqn, fn, *a)


def _compare(tr: Any, eqn: Any, a: Any, b: Any) -> list:
    same = eqn.primitive is lax.eq_p
    fn = (lambda ar, ai, br, bi: [(ar == br) & (ai == bi)]) if same else \
        (lambda ar, ai, br, bi: [(ar != br) | (ai != bi)])
    return tr.through_all(fn, *a, *b)


def _complex(tr: Any, eqn: Any, re: Any, im: Any) -> list:
    return _pairs(tr, eqn, [re], [im])


def _real_part(tr: Any, eqn: Any, a: Any) -> list:
    return [a[0]]


def _imag_part(tr: Any, eqn: Any, a: Any) -> list:
    return [a[1]]


def _conj(tr: Any, eqn: Any, a: Any) -> list:
    if isinstance(a, tuple):
        re, im = a
        return _pairs(tr, eqn, [re], tr.through_all(lambda x: [-x], im))
    dt = _real(eqn.outvars[0].aval.dtype)
    re, im = tr.through_all(lambda x: [x.astype(dt), jnp.zeros_like(x, dt)], a)
    return _pairs(tr, eqn, [re], [im])


def _convert(tr: Any, eqn: Any, a: Any) -> list:
    new = eqn.params["new_dtype"]
    if not is_complex(new):  # complex → real keeps the real part, as lax does
        return tr.through_all(lambda x: [x.astype(new)], a[0])
    dt = _real(new)
    if isinstance(a, tuple):
        return _pairs(tr, eqn, *([v] for v in tr.through_all(lambda r, i: [r.astype(dt), i.astype(dt)], *a)))
    re, im = tr.through_all(lambda x: [x.astype(dt), jnp.zeros(x.shape, dt)], a)
    return _pairs(tr, eqn, [re], [im])


def _dot_general(tr: Any, eqn: Any, a: Any, b: Any) -> list:
    params = _real_params(eqn.params)
    dot = _bind(lax.dot_general_p, params)
    if not isinstance(b, tuple):
        return _components(tr, eqn, lambda ar, ai, y: (dot(ar, y)[0], dot(ai, y)[0]), *a, b)
    if not isinstance(a, tuple):
        return _components(tr, eqn, lambda x, br, bi: (dot(x, br)[0], dot(x, bi)[0]), a, *b)
    return _components(tr, eqn, lambda ar, ai, br, bi: (dot(ar, br)[0] - dot(ai, bi)[0],
                                                        dot(ar, bi)[0] + dot(ai, br)[0]), *a, *b)


def _tables(n: int, m: int, dtype: Any) -> tuple:
    """``cos`` and ``sin`` of ``2π·k·t/n`` for ``k < n``, ``t < m`` (``k·t`` reduced mod n in integers first)."""
    kt = (np.arange(n)[:, None] * np.arange(m)[None, :]) % n
    angle = 2 * math.pi * kt / n
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


def _along(x: Any, axis: int, matrix: Any) -> Any:
    """``x``'s ``axis`` contracted with ``matrix``'s rows (the result's axis in its place)."""
    return jnp.moveaxis(jnp.moveaxis(x, axis, -1) @ matrix, -1, axis)


def _dft(re: Any, im: Any, axis: int, inverse: bool) -> tuple:
    n = re.shape[axis]
    c, s = _tables(n, n, re.dtype)
    cr, ci, sr, si = _along(re, axis, c), _along(im, axis, c), _along(re, axis, s), _along(im, axis, s)
    if inverse:
        return (cr - si) / n, (ci + sr) / n
    return cr + si, ci - sr


def _fft(tr: Any, eqn: Any, a: Any) -> list:
    kind = jax.lax.FftType(eqn.params["fft_type"]).name
    lengths = tuple(eqn.params["fft_lengths"])
    out_shape = eqn.outvars[0].aval.shape
    rank = len(out_shape)
    axes = list(range(rank - len(lengths), rank))

    def fn(*xs: Any) -> list:
        if kind in ("FFT", "IFFT"):
            re, im = xs
            for axis in axes:
                re, im = _dft(re, im, axis, kind == "IFFT")
            return [re, im]
        if kind == "RFFT":
            (x,) = xs
            n = lengths[-1]
            c, s = _tables(n, n // 2 + 1, x.dtype)
            re, im = _along(x, -1, c), -_along(x, -1, s)
            for axis in axes[:-1]:
                re, im = _dft(re, im, axis, False)
            return [re, im]
        re, im = xs  # IRFFT: the leading axes back, then the half spectrum to n real values
        for axis in axes[:-1]:
            re, im = _dft(re, im, axis, True)
        n = lengths[-1]
        c, s = _tables(n, re.shape[-1], re.dtype)
        w = np.full(re.shape[-1], 2.0)
        w[0] = 1.0
        if n % 2 == 0 and re.shape[-1] > n // 2:
            w[n // 2] = 1.0
        w = (w / n).astype(re.dtype)[:, None]
        return [_along(re, -1, (c.T * w)) - _along(im, -1, (s.T * w))]

    if kind not in ("FFT", "IFFT", "RFFT", "IRFFT"):
        raise Unsupported(f"fft of type {kind}")
    if not all(isinstance(n, (int, np.integer)) for n in lengths):
        raise Unsupported(f"an FFT over a dynamic axis (lengths {lengths}: its DFT tables are constants)")
    outs = tr.through_all(fn, *(a if isinstance(a, tuple) else (a,)))
    return outs if kind == "IRFFT" else _pairs(tr, eqn, [outs[0]], [outs[1]])


#: Primitive → ``rule(translator, eqn, ins) -> outputs`` for an eqn that reads or makes a complex value.
RULES: dict[Any, Callable] = {p: per_part for p in _PER_PART}
RULES.update({
    lax.mul_p: _on_parts(_mul), lax.div_p: _on_parts(_div), lax.abs_p: _on_parts(_abs), lax.exp_p: _on_parts(_exp),
    lax.sign_p: _on_parts(_sign), lax.integer_pow_p: _on_parts(_integer_pow), lax.eq_p: _on_parts(_compare),
    lax.ne_p: _on_parts(_compare), lax.complex_p: _on_parts(_complex), lax.real_p: _on_parts(_real_part),
    lax.imag_p: _on_parts(_imag_part), lax.conj_p: _on_parts(_conj),
    lax.convert_element_type_p: _on_parts(_convert), lax.dot_general_p: _on_parts(_dot_general),
    lax.fft_p: _on_parts(_fft),
})


def translate(tr: Any, eqn: Any, ins: list) -> list:
    """The outputs of an eqn that reads or makes a complex value (:class:`ComplexPair` for complex ones).

    Raises:
        Unsupported: a primitive without a rule here (named)."""
    rule = RULES.get(eqn.primitive)
    if rule is None:
        raise Unsupported(f"jaxpr primitive '{eqn.primitive.name}' on complex values (exported as pairs of real "
                          "values; this op has no formula on them)")
    return rule(tr, eqn, ins)


__all__ = ["ComplexPair", "RULES", "is_complex", "parts", "touches_complex", "translate"]
