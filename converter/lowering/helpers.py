"""Small shared helpers for lowerings: torch type promotion, dims, scalars."""

from __future__ import annotations

import math
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np

_KIND = {"b": 0, "u": 1, "i": 1, "f": 2, "V": 2, "c": 3}  # bfloat16 reports kind "V"


def _kind(dtype: Any) -> int:
    if dtype == jnp.bfloat16:
        return 2
    return _KIND[np.dtype(dtype).kind]


def is_array(x: Any) -> bool:
    """True for JAX arrays and tracers (not python scalars)."""
    return isinstance(x, (jax.Array, jax.core.Tracer, np.ndarray))


def result_type(*args: Any) -> Any:
    """torch's result dtype for an elementwise op over ``args``.

    Dimensioned tensors outrank 0-d tensors, which outrank python scalars; a
    lower-ranked argument only decides the dtype when it is of a higher kind
    (bool < int < float < complex). Python floats give float32, ints int64.
    """
    cats: list[list[Any]] = [[], [], []]
    for a in args:
        if a is None:
            continue
        if is_array(a):
            cats[0 if a.ndim > 0 else 1].append(a.dtype)
        elif isinstance(a, bool):
            cats[2].append(np.dtype(bool))
        elif isinstance(a, int):
            cats[2].append(np.dtype(np.int64))
        elif isinstance(a, float):
            cats[2].append(np.dtype(np.float32))
        elif isinstance(a, complex):
            cats[2].append(np.dtype(np.complex64))
    top = max(_kind(d) for c in cats for d in c)
    for i, c in enumerate(cats):
        same = [d for d in c if _kind(d) == top]
        if same:
            out = same[0]
            for d in same[1:]:
                out = jnp.promote_types(out, d)
            return out
    raise TypeError("result_type of no arguments")


def promote(*args: Any, dtype: Any = None, wrap: bool = False) -> list[Any]:
    """Cast every argument (arrays and python scalars) to ``dtype`` or torch's result type.

    With ``wrap``, a python int outside an integer ``dtype``'s range wraps around into it, as torch's
    arithmetic and comparison ops take it (``int8 * 200`` multiplies by -56); without, it raises."""
    dtype = dtype or result_type(*args)
    if wrap and jnp.issubdtype(dtype, jnp.integer):
        args = tuple(wrapped_int(a, dtype) if type(a) is int else a for a in args)
    return [jnp.asarray(a, dtype=dtype) if not is_array(a) else astype(a, dtype) for a in args]


def astype(a: Any, dtype: Any) -> Any:
    """``a.astype(dtype)``, a bool array to a floating or complex dtype as ``select(a, 1, 0)``: XLA rewrites
    ``y * convert(mask)`` into ``select(mask, y, 0)`` (within one graph too), which gives 0 where IEEE and the CPU
    give ``inf * 0 = nan`` and ``-2 * 0 = -0``; a select is not rewritten."""
    if a.dtype == jnp.bool_ and (jnp.issubdtype(dtype, jnp.floating) or jnp.issubdtype(dtype, jnp.complexfloating)):
        return jnp.where(a, jnp.ones((), dtype), jnp.zeros((), dtype))
    return a.astype(dtype)


def wrapped_int(value: int, dtype: Any) -> int:
    """``value`` wrapped around into the range of the integer ``dtype`` (two's complement)."""
    info = jnp.iinfo(dtype)
    if info.min <= value <= info.max:
        return value
    bits = info.bits
    value %= 1 << bits
    return value - (1 << bits) if info.min < 0 and value > info.max else value


#: torch's C names of integer dtypes, as its overflow message spells them.
_C_NAMES = {"int8": "int8_t", "uint8": "uint8_t", "int16": "int16_t", "int32": "int", "int64": "int64_t",
            "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t"}


def check_fits(value: Any, dtype: Any) -> Any:
    """``value`` as an integer ``dtype`` takes it from a fill: refused when it cannot hold it, as torch refuses a
    fill value, except that an unsigned dtype takes a negative int down to ``-max`` wrapped around (c10's
    ``overflows``: ``uint8`` fills ``-1`` as 255). Other values come back unchanged.

    A complex value of a real ``dtype`` is its real part when its imaginary part is 0 (``fill_(2+0j)``), as c10
    converts it; another is refused.

    Raises:
        RuntimeError: torch's message (``fill_``, ``full``, ``masked_fill`` with ``int8`` and 300).
    """
    if type(value) is complex and not jnp.issubdtype(dtype, jnp.complexfloating):
        if value.imag:
            name = np.dtype(dtype).name
            raise RuntimeError(f"value cannot be converted to type {_C_NAMES.get(name, name)} without overflow")
        value = value.real
    if type(value) is int and jnp.issubdtype(dtype, jnp.integer):
        info = jnp.iinfo(dtype)
        if info.min == 0 and -info.max <= value < 0:
            return wrapped_int(value, dtype)
        if not info.min <= value <= info.max:
            name = np.dtype(dtype).name
            raise RuntimeError(f"value cannot be converted to type {_C_NAMES.get(name, name)} without overflow")
    return value


def dim(d: int, ndim: int) -> int:
    """Normalize a possibly negative dim (0-d tensors accept dim 0 and -1)."""
    n = max(ndim, 1)
    if not -n <= d < n:
        raise IndexError(f"dim {d} out of range for a {ndim}-d tensor")
    return d % n


def dims(ds: Sequence[int] | int | None, ndim: int) -> tuple[int, ...]:
    """Normalize a dim list; ``None`` or ``[]`` means all dims."""
    if ds is None or (isinstance(ds, (list, tuple)) and len(ds) == 0):
        return tuple(range(ndim))
    if isinstance(ds, int):
        ds = [ds]
    return tuple(sorted({dim(d, ndim) for d in ds}))


def float_dtype(x: Any) -> Any:
    """``x``'s dtype if floating, else float32 (torch's ops that return floats for ints)."""
    return x.dtype if jnp.issubdtype(x.dtype, jnp.floating) else jnp.float32


def opmath_dtype(dtype: Any) -> Any:
    """torch's CPU accumulation ("opmath") type: float32 for float16/bfloat16, else ``dtype``."""
    return jnp.float32 if dtype in (jnp.float16, jnp.bfloat16) else dtype


def masked_vjp(f: Any, primals: Sequence[Any], mask: Sequence[bool], cotangent: Any) -> list[Any]:
    """``jax.vjp`` of ``f(*primals)`` for the arguments where ``mask`` is true.

    For backward ops with an ``output_mask``: only the selected (non-``None``) primals
    are differentiated; the others are closed over and their gradients are ``None``.
    The cotangent is cast to ``f``'s output dtype.
    """
    wrt = [i for i, m in enumerate(mask) if m and primals[i] is not None]
    grads: list[Any] = [None] * len(primals)
    if not wrt:
        return grads

    def partial(*chosen: Any) -> Any:
        full = list(primals)
        for i, v in zip(wrt, chosen):
            full[i] = v
        return f(*full)

    out, pullback = jax.vjp(partial, *[primals[i] for i in wrt])
    for i, g in zip(wrt, pullback(cotangent.astype(out.dtype))):
        grads[i] = g
    return grads


def kernel_choice(ctx: Any, kernel: str, *, static: bool = True, why_not_static: str = "", **config: Any) -> Any:
    """The ``kernels.dispatch`` decision for a lowering that has a Pallas kernel.

    Honours the conversion option ``kernels="pallas"|"reference"``; every decision
    (including "not static", recorded with ``why_not_static``) is visible in
    ``kernels.dispatch.choices()``.

    Returns:
        A ``kernels.dispatch.Choice``.
    """
    from kernels import dispatch

    force = ctx.options.get("kernels")
    if not static:
        return dispatch.fallback(kernel, why_not_static, force=force)
    return dispatch.choose(kernel, force=force, **config)


def difference(a: Any, b: Any) -> Any:
    """``a - b`` (broadcast), exactly 0 where the two hold the same finite value, as on the CPU. Inside one
    compiled graph XLA's CPU code contracts a product and a difference into one multiply-add, so ``e_i - e_j``
    of ``e = z * s`` can be ``fma(z_i, s, -e_j)``: not 0 where ``e_i == e_j``. A distance's gradient is 0 at
    distance 0 (torch's convention) and O(1) at 1e-7: a pairwise distance needs the exact 0."""
    return jnp.where((a == b) & jnp.isfinite(a), jnp.zeros((), jnp.result_type(a, b)), a - b)


def pnorm(d: Any, p: float, axis: Any = -1, keepdims: bool = False) -> Any:
    """The p-norm over ``axis`` of non-negative ``d`` (``|x|``, ``|x - y|``), as torch's
    vector_norm/cdist/pdist: p=0 counts non-zeros, p=inf takes the max (0 for an empty axis),
    p=-inf the min."""
    if p == 0:
        return jnp.sum((d != 0).astype(d.dtype), axis=axis, keepdims=keepdims)
    if p == float("inf"):
        return jnp.max(d, axis=axis, initial=0, keepdims=keepdims)
    if p == float("-inf"):
        return jnp.min(d, axis=axis, keepdims=keepdims)
    if p == 1:
        return jnp.sum(d, axis=axis, keepdims=keepdims)
    if p == 2:
        return jnp.sqrt(jnp.sum(d * d, axis=axis, keepdims=keepdims))
    return jnp.sum(d ** p, axis=axis, keepdims=keepdims) ** (1.0 / p)


#: Means over at least this many elements take a second pass (:func:`centered_mean`).
CORRECTED_MEAN_SIZE = 256


def centered_mean(x: Any, axes: tuple) -> Any:
    """The mean of ``x`` over ``axes`` (dims kept), as accurate as the CPU's. XLA sums in one running sum, whose
    float32 error grows with the count (a batch norm's mean over 686 values of 0.92 was 1.6e-6 off, the CPU's
    cascade sum 1e-8 off), so a mean over :data:`CORRECTED_MEAN_SIZE` or more elements (a static count) adds the
    mean of the residuals ``x - mean``, which are small: one more pass over ``x``, fused with the subtraction."""
    mean = jnp.mean(x, axis=axes, keepdims=True)
    size = math.prod(x.shape[a] for a in axes)
    if isinstance(size, int) and size >= CORRECTED_MEAN_SIZE and jnp.issubdtype(x.dtype, jnp.inexact):
        mean = mean + jnp.mean(x - mean, axis=axes, keepdims=True)
    return mean
