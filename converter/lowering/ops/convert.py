"""Type conversion and identity-like ops: _to_copy, view.dtype (bit reinterpretation), clone, scalar_tensor,
_local_scalar_dense, and the runtime assertions torch.export leaves in graphs.

``.to(dtype)``, ``.float()``, ``type_as`` and ``fill.Scalar``'s dtype handling
decompose to ``_to_copy``; ``lift_fresh_copy`` to ``clone``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import LoweringError
from converter.lowering.dtypes import is_floating, to_jax_dtype
from converter.lowering.helpers import astype, check_fits, is_array
from converter.lowering.registry import lowering

aten = torch.ops.aten


def cast(x, dtype):
    """Convert ``x`` to ``dtype`` with torch's conversion rules.

    float → int truncates toward zero; anything → bool is ``x != 0`` (NaN is
    True); float → uint8 goes through int64 and wraps (-1.0 → 255), the rule
    torch's ``c10::convert`` documents (complex → uint8 too, from the real part); → float8_e4m3fn
    saturates at ±448 (inf too), as torch's CPU conversion; bool → floating/complex is ``select(x, 1, 0)``
    (:func:`~converter.lowering.helpers.astype`: ``y * mask.float()`` keeps ``inf * 0 = nan``).
    Deviation: float → signed int out of the target's range is undefined in torch (x86 gives INT_MIN); XLA
    saturates.
    """
    dtype = np.dtype(dtype)
    if x.dtype == dtype:
        return x
    if dtype == np.dtype(np.uint8) and jnp.issubdtype(x.dtype, jnp.inexact):
        return jnp.real(x).astype(jnp.int64).astype(jnp.uint8)
    if dtype == _E4M3FN:  # torch saturates at +-448 (also inf); XLA makes NaN of what rounds past it
        if not (is_floating(x.dtype) and jnp.finfo(x.dtype).bits >= 32):
            x = x.astype(jnp.float32)
        return jnp.clip(x, -448, 448).astype(dtype)
    return astype(x, dtype)


_E4M3FN = np.dtype(jnp.float8_e4m3fn)


@lowering(aten._to_copy.default)
def lower__to_copy_default(ctx, self, *, dtype=None, layout=None, device=None, pin_memory=None,
                           non_blocking=False, memory_format=None):
    """_to_copy(Tensor self, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None, bool non_blocking=False, MemoryFormat? memory_format=None) -> Tensor

    Emits ``convert`` (see :func:`cast` for the float → int/bool rules); layout,
    device and memory format are placement hints with no meaning in JAX.
    """  # noqa: E501 (the first line is the exact schema)
    dt = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else self.dtype)
    return cast(self, dt)


@lowering(torch.ops.prims.convert_element_type.default)
def lower_prims_convert_element_type_default(ctx, a, dtype):
    """convert_element_type(Tensor a, ScalarType dtype) -> Tensor

    ``_to_copy(dtype=)``'s primitive: ``torch.compile`` emits it for a python float argument that it
    traces as a symbolic value (a learning rate or temperature that changes between calls).
    """
    return cast(a, ctx.out_dtype or to_jax_dtype(dtype))


@lowering(aten.clone.default)
def lower_clone_default(ctx, self, *, memory_format=None):
    """clone(Tensor self, *, MemoryFormat? memory_format=None) -> Tensor

    Identity: JAX values are immutable, so a copy is the value itself.
    """
    return self


@lowering(aten.scalar_tensor.default)
def lower_scalar_tensor_default(ctx, s, *, dtype=None, layout=None, device=None, pin_memory=None):
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Layout? layout=None, Device? device=None, bool? pin_memory=None) -> Tensor

    A 0-d constant (float32 by default, like torch); a traced scalar (from
    ``_local_scalar_dense``) is converted instead.
    """  # noqa: E501 (the first line is the exact schema)
    dt = ctx.out_dtype or (to_jax_dtype(dtype) if dtype is not None else jnp.float32)
    if is_array(s):
        return cast(jnp.reshape(s, ()), dt)
    return jnp.asarray(check_fits(s, dt), dtype=dt)  # (as torch's fill: uint8 takes -1 as 255, refuses 300)


@lowering(torch.ops.prims.scalar_tensor.default)
def lower_prims_scalar_tensor_default(ctx, s, *, dtype=None, device=None):
    """scalar_tensor(Scalar s, *, ScalarType? dtype=None, Device? device=None) -> Tensor

    ``scalar_tensor``'s primitive: torch's reference of ``xlogy`` with a python number emits it under
    ``torch.compile``.
    """
    return lower_scalar_tensor_default(ctx, s, dtype=dtype)


@lowering(aten._local_scalar_dense.default)
def lower__local_scalar_dense_default(ctx, self):
    """_local_scalar_dense(Tensor self) -> Scalar

    ``Tensor.item()``: the single element as a 0-d array, which later ops take
    where torch has a SymInt/SymFloat. Using it as a shape (data-dependent
    shapes) is not supported by XLA's static shapes.
    """
    return jnp.reshape(self, ())


@lowering(aten._assert_tensor_metadata.default)
def lower__assert_tensor_metadata_default(ctx, a, size=None, stride=None, dtype=None, *, device=None, layout=None):
    """_assert_tensor_metadata(Tensor a, SymInt[]? size=None, SymInt[]? stride=None, ScalarType? dtype=None, *, Device? device=None, Layout? layout=None) -> ()

    Emits nothing. The dtype is checked while tracing (it is static); size and
    stride were checked by torch.export (strides do not exist in JAX).
    """  # noqa: E501 (the first line is the exact schema)
    if dtype is not None and np.dtype(a.dtype) != np.dtype(to_jax_dtype(dtype)):
        raise LoweringError(str(aten._assert_tensor_metadata.default), ctx.location,
                            f"tensor has dtype {a.dtype}, the graph asserts {dtype}")
    return None


@lowering(aten._assert_async.default, aten._assert_async.msg)
def lower__assert_async_default(ctx, self, assert_msg=None):
    """_assert_async(Tensor self) -> ()

    Also _assert_async.msg(Tensor self, str assert_msg) -> (). A condition the program
    computes (``F.one_hot`` of traced indices asserts they are in range): recorded as an
    error check (``ctx.checks``) whose value a caller that can raise after the run checks with
    torch's own kernel (``torch.compile``'s backend and ``convert(target="tpu")``'s module: the same
    error as on CPU); exported files carry no check (torch.export checked it on the sample inputs).
    """
    args = () if assert_msg is None else (assert_msg,)
    op = aten._assert_async.default if assert_msg is None else aten._assert_async.msg
    ctx.checks.append((self, op, args, {}))
    return None


@lowering(aten._assert_scalar.default)
def lower__assert_scalar_default(ctx, self, assert_msg):
    """_assert_scalar(Scalar self, str assert_msg) -> ()

    Emits nothing: a condition on traced values cannot raise inside a compiled
    program (torch.export checked it on the sample inputs). A condition already
    known False while tracing raises here.
    """
    if isinstance(self, (bool, int, np.bool_)) and not self:
        raise LoweringError(str(aten._assert_scalar.default), ctx.location, str(assert_msg))
    return None


def _bits(x):
    """``x`` as unsigned integers of its width (bool as uint8; complex as its real/imag pairs)."""
    if x.dtype == jnp.bool_:
        return x.astype(jnp.uint8)
    if jnp.issubdtype(x.dtype, jnp.complexfloating):
        parts = jnp.stack([jnp.real(x), jnp.imag(x)], axis=-1)
        return _bits(parts.reshape(x.shape[:-1] + (2 * x.shape[-1],)) if x.ndim else parts)
    return jax.lax.bitcast_convert_type(x, jnp.dtype(f"uint{jnp.dtype(x.dtype).itemsize * 8}"))


def _from_bits(u, dtype):
    """Unsigned integers of ``dtype``'s width → ``dtype`` (inverse of :func:`_bits`)."""
    dtype = np.dtype(dtype)
    if dtype == np.dtype(np.bool_):
        return u != 0
    if dtype.kind == "c":
        half = np.dtype(f"float{dtype.itemsize * 4}")
        f = _from_bits(u, half)
        f = f.reshape(f.shape[:-1] + (f.shape[-1] // 2, 2)) if f.ndim else f
        return jax.lax.complex(f[..., 0], f[..., 1]).astype(dtype)
    return jax.lax.bitcast_convert_type(u, dtype)


@lowering(aten.view.dtype)
def lower_view_dtype(ctx, self, dtype):
    """view.dtype(Tensor(a) self, ScalarType dtype) -> Tensor(a)

    Reinterprets the bits (``bitcast_convert_type``): to a narrower dtype the last dim grows by
    the size ratio, to a wider one it shrinks (torch checks the sizes and the layout first);
    bool goes through uint8, complex through its (real, imag) pairs. On the tpu device a write into
    the view reaches ``self`` through the inverse reinterpretation (``tpu_runtime.values._VALUE_VIEWS``).
    """
    to = np.dtype(to_jax_dtype(dtype))
    src = np.dtype(self.dtype)
    if to == src:
        return self
    if to.itemsize == src.itemsize and "b" not in to.kind + src.kind and "c" not in to.kind + src.kind:
        return jax.lax.bitcast_convert_type(self, to)  # one primitive (ONNX computes float32 → int32)
    u = _bits(self)
    width = np.dtype(u.dtype).itemsize
    size = to.itemsize // 2 if to.kind == "c" else to.itemsize
    word = np.dtype(f"uint{size * 8}")
    if size < width:  # each element splits into width // size words (little-endian, as torch's memory)
        u = jax.lax.bitcast_convert_type(u, word)
        u = u.reshape(u.shape[:-2] + (u.shape[-2] * u.shape[-1],))
    elif size > width:
        u = u.reshape(u.shape[:-1] + (u.shape[-1] // (size // width), size // width))
        u = jax.lax.bitcast_convert_type(u, word)
    return _from_bits(u, to)
