"""JAX code on tpu tensors: a tensor's device array, a tensor around an array, and a JAX function (a Pallas
kernel, a ``jax.numpy`` routine) called on tpu tensors inside a PyTorch program, gradients included::

    y = tpu_runtime.call_jax(jax.nn.gelu, x)   # x, y: tpu tensors; y.sum().backward() reaches x
    a = tpu_runtime.as_jax(x)                  # the jax.Array holding x's value
    t = tpu_runtime.from_jax(a)                # a tpu tensor holding a (no copy)

A Pallas kernel is called the same way; its gradient needs a ``jax.custom_vjp`` around it, as in JAX.

A tpu tensor's value is an immutable ``jax.Array``, so nothing is shared for writing: a tensor written in place
later holds a new array, and the array handed out keeps the old value. Reading a value is a sync point in fused
eager. JAX runs here with 64-bit types on, as the runtime does (a float64 tensor stays float64).
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import numpy as np
import torch

from converter.lowering.dtypes import to_jax_dtype, to_torch_dtype
from tpu_runtime._x64 import x64
from tpu_runtime.tensor import TpuTensor, new_tensor
from tpu_runtime.values import materialize, upload


@torch.compiler.disable
def as_jax(t: torch.Tensor) -> jax.Array:
    """The ``jax.Array`` on the device holding ``t``'s value (a view's values, in its shape and dtype; a CPU
    tensor is uploaded). A sync point in fused eager.

    Raises:
        TypeError: ``t`` is not a tensor.
    """
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"as_jax takes a torch.Tensor, not {type(t).__name__}")
    if not isinstance(t, TpuTensor):
        return upload(t.detach())
    shape, dtype = t._spec
    value = materialize(t, "as_jax")
    if value.shape != shape:
        value = value.reshape(shape)
    return value if value.dtype == to_jax_dtype(dtype) else value.astype(to_jax_dtype(dtype))


@torch.compiler.disable
def from_jax(a: Any) -> torch.Tensor:
    """A tpu tensor holding the ``jax.Array`` ``a`` (moved to the runtime's device if it is elsewhere).

    Raises:
        TypeError: ``a`` is not an array, or of a dtype torch has no type for.
    """
    if not isinstance(a, jax.Array):
        raise TypeError(f"from_jax takes a jax.Array, not {type(a).__name__}")
    device = jax.devices()[0]
    if a.devices() != {device}:
        a = jax.device_put(a, device)
    try:
        dtype = to_torch_dtype(a.dtype)
    except (KeyError, TypeError, ValueError) as e:
        raise TypeError(f"from_jax: torch has no dtype for {a.dtype}") from e
    return new_tensor(a, tuple(a.shape), dtype)


@torch.compiler.disable  # (JAX code has no ATen ops for dynamo to trace: a graph break, the call runs eagerly)
def call_jax(fn: Callable[..., Any], *tensors: torch.Tensor) -> Any:
    """``fn`` (a function of ``jax.Array`` s returning arrays: one, or a tuple / list / dict of them) on tensors
    (tpu ones, or CPU ones uploaded): its result with tpu tensors for its arrays. Where an input requires grad, the
    floating outputs carry a gradient function: ``backward()`` runs ``jax.vjp`` of ``fn`` (integer and bool inputs
    and outputs take no gradient; an input's gradient goes to its device). Pass other arguments with
    ``functools.partial``. Under ``torch.compile`` the call is a graph break: it runs eagerly between the
    compiled pieces.

    Raises:
        TypeError: an argument is not a tensor, or ``fn`` returns something else than arrays.
        NotImplementedError: a complex input requires grad (JAX's complex gradients are conjugate to torch's).
    """
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"call_jax: argument {i} is a {type(t).__name__}, not a tensor (bind it to fn with "
                            "functools.partial)")
        if t.requires_grad and t.is_complex():
            raise NotImplementedError(f"call_jax: argument {i} is a complex tensor that requires grad; JAX's complex "
                                      "gradients are conjugate to torch's: pass its real and imaginary parts")
    structure: dict = {}
    outs = _JaxCall.apply(fn, structure, *tensors)
    return jax.tree_util.tree_unflatten(structure["treedef"], outs)


def _inexact(dtype: Any) -> bool:
    return jax.numpy.issubdtype(dtype, jax.numpy.inexact)


class _JaxCall(torch.autograd.Function):
    """``call_jax`` as an autograd function: the forward keeps ``fn``'s vjp for the backward, and says in
    ``structure`` how ``fn`` returned its arrays."""

    @staticmethod
    def forward(ctx: Any, fn: Callable[..., Any], structure: dict, *tensors: torch.Tensor) -> tuple:
        arrays = [as_jax(t) for t in tensors]
        ctx.differentiable = [t.requires_grad and t.is_floating_point() for t in tensors]
        ctx.devices = [t.device for t in tensors]
        with x64():
            if any(ctx.differentiable):
                out, ctx.vjp = jax.vjp(fn, *arrays)
            else:
                out, ctx.vjp = fn(*arrays), None
        leaves, ctx.treedef = jax.tree_util.tree_flatten(out)
        if not leaves or not all(isinstance(o, jax.Array) for o in leaves):
            raise TypeError(f"call_jax: {getattr(fn, '__name__', fn)!r} returned {type(out).__name__}; it must "
                            "return a jax.Array, or a tuple / list / dict of them")
        structure["treedef"], ctx.avals = ctx.treedef, [(o.shape, o.dtype) for o in leaves]
        results = tuple(from_jax(o) for o in leaves)
        ctx.mark_non_differentiable(*(r for r, o in zip(results, leaves) if not _inexact(o.dtype)))
        return results

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor) -> tuple:
        cotangents = [np.zeros(shape, jax.dtypes.float0) if not _inexact(dtype)
                      else as_jax(g) if g is not None else jax.numpy.zeros(shape, dtype)
                      for g, (shape, dtype) in zip(grads, ctx.avals)]
        with x64():
            got = ctx.vjp(jax.tree_util.tree_unflatten(ctx.treedef, cotangents))
        return (None, None, *(from_jax(g).to(device) if d else None
                              for g, d, device in zip(got, ctx.differentiable, ctx.devices)))
