"""Segment reductions (``torch.segment_reduce`` and its backward) and ``torch.hash_tensor``.

``segment_reduce`` reduces consecutive runs of ``data`` along ``axis``: run ``s`` has
``lengths[..., s]`` elements (or ``offsets[..., s + 1] - offsets[..., s]``); the dims before
``axis`` are batch dims with lengths of their own. Empty runs give the reduction's identity
(sum 0, prod 1, max -inf, min +inf, mean NaN) or ``initial``, which otherwise joins every run
(mean: ``(sum + initial) / length``). With ``unsafe=True`` the lengths may cover fewer elements
than ``data`` has; the rest are ignored.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import dims as norm_dims
from converter.lowering.registry import lowering

aten = torch.ops.aten

_REDUCE = {"sum": jax.ops.segment_sum, "mean": jax.ops.segment_sum, "prod": jax.ops.segment_prod,
           "max": jax.ops.segment_max, "min": jax.ops.segment_min}
_JOIN = {"sum": jnp.add, "mean": jnp.add, "prod": jnp.multiply, "max": jnp.maximum, "min": jnp.minimum}


def _layout(data, lengths, offsets, axis: int):
    """``data`` as ``[batch, n, rest]``, the lengths as ``[batch, S]`` and each element's run
    ``[batch, n]`` (``S`` for the elements past the last run); plus the output shape."""
    if lengths is None:
        lengths = jnp.diff(offsets, axis=-1)
    lengths = lengths.astype(jnp.int64)
    axis = axis % data.ndim
    lead, n, rest = data.shape[:axis], data.shape[axis], data.shape[axis + 1:]
    batch, segments = math.prod(lead), lengths.shape[-1]
    lengths = lengths.reshape(batch, segments)
    ends = jnp.cumsum(lengths, axis=-1)
    ids = jax.vmap(lambda e: jnp.searchsorted(e, jnp.arange(n), side="right"))(ends)
    flat = data.reshape(batch, n, math.prod(rest))
    return flat, lengths, ids, lead + (segments,) + rest


def _per_run(fn, flat, ids, segments: int):
    """``fn`` (a ``jax.ops.segment_*``) over each batch row; the past-the-end bucket dropped."""
    return jax.vmap(lambda x, i: fn(x, i, num_segments=segments + 1))(flat, ids)[:, :segments]


def _gather(runs, ids):
    """Each element's run value: ``runs[b, ids[b, i]]`` (zeros for the past-the-end bucket)."""
    padded = jnp.concatenate([runs, jnp.zeros_like(runs[:, :1])], axis=1)
    return jnp.take_along_axis(padded, ids[..., None], axis=1)


@lowering(aten.segment_reduce.default)
def lower_segment_reduce_default(ctx, data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                                 unsafe=False, initial=None):
    """segment_reduce(Tensor data, str reduce, *, Tensor? lengths=None, Tensor? indices=None,
    Tensor? offsets=None, int axis=0, bool unsafe=False, Scalar? initial=None) -> Tensor

    See the module docstring. Emits a ``scatter`` (add/mul/max/min) per reduction into one
    bucket per run, the run of each element found by ``searchsorted`` over the cumulative lengths.
    """
    flat, lens, ids, shape = _layout(data, lengths, offsets, axis)
    segments = lens.shape[-1]
    runs = _per_run(_REDUCE[reduce], flat, ids, segments)
    count = lens[..., None].astype(runs.dtype)
    if initial is not None:
        init = jnp.asarray(initial, runs.dtype)
        runs = _JOIN[reduce](runs, init)
        if reduce == "mean":
            runs = jnp.where(count == 0, init, runs / jnp.where(count == 0, 1, count))
    elif reduce == "mean":
        runs = runs / count
    return runs.reshape(shape).astype(data.dtype)


@lowering(aten._segment_reduce_backward.default)
def lower__segment_reduce_backward_default(ctx, grad, output, data, reduce, *, lengths=None, offsets=None, axis=0,
                                           initial=None):
    """_segment_reduce_backward(Tensor grad, Tensor output, Tensor data, str reduce, *, Tensor? lengths=None,
    Tensor? offsets=None, int axis=0, Scalar? initial=None) -> Tensor

    The gradient of each element from its run's: sum passes it on, mean divides it by the run's
    length, max/min share it among the elements equal to the result (or NaN) — as PyTorch's CPU
    kernel, a positive gradient is divided by their count and a negative one is not — prod multiplies it
    by the product of the run's other elements (and ``initial``), exact where elements are zero.
    """
    flat, lens, ids, _ = _layout(data, lengths, offsets, axis)
    segments = lens.shape[-1]
    g = _gather(grad.reshape(flat.shape[0], segments, -1), ids)
    out = _gather(output.reshape(flat.shape[0], segments, -1), ids)
    valid = (ids < segments)[..., None]
    if reduce == "sum":
        res = g
    elif reduce == "mean":
        res = g / jnp.maximum(_gather(lens[..., None].astype(g.dtype), ids), 1)
    elif reduce in ("max", "min"):  # PyTorch's CPU kernel: NaNs are hits; only positive shares are divided
        hit = ((flat == out) | jnp.isnan(flat)).astype(g.dtype)
        ties = _gather(_per_run(jax.ops.segment_sum, hit, ids, segments), ids)
        res = g * hit
        res = jnp.where(res > 0, res / jnp.maximum(ties, 1), res)
    else:  # prod
        zero = flat == 0
        nonzero = _per_run(jax.ops.segment_prod, jnp.where(zero, 1, flat), ids, segments)
        if initial is not None:
            nonzero = nonzero * jnp.asarray(initial, nonzero.dtype)
        zeros = _gather(_per_run(jax.ops.segment_sum, zero.astype(jnp.int32), ids, segments), ids)
        others = jnp.where(zero, jnp.where(zeros == 1, _gather(nonzero, ids), 0), out / jnp.where(zero, 1, flat))
        res = g * others
    return jnp.where(valid, res, 0).reshape(data.shape).astype(data.dtype)


@lowering(aten.hash_tensor.default)
def lower_hash_tensor_default(ctx, self, dim=(), *, keepdim=False, mode=0):
    """hash_tensor(Tensor self, int[1] dim=[], *, bool keepdim=False, int mode=0) -> Tensor

    ``mode=0`` (the only one): each element widened to its 64-bit float or integer type, its
    bits read as uint64 and the reduced elements combined with ``xor``; the result is uint64.
    Emits ``convert``, ``bitcast_convert`` and a ``reduce`` of ``xor``.
    """
    x = self
    if jnp.issubdtype(x.dtype, jnp.floating):
        bits = jax.lax.bitcast_convert_type(x.astype(jnp.float64), jnp.uint64)
    else:
        bits = x.astype(jnp.int64).astype(jnp.uint64)
    axes = norm_dims(dim, x.ndim) if x.ndim else ()
    out = jax.lax.reduce(bits, jnp.uint64(0), jax.lax.bitwise_xor, axes)
    if keepdim:
        out = jnp.expand_dims(out, axes)
    return out


def _rows(offsets, total: int):
    """Each jagged row's ``(batch, position)``: ``offsets`` are the ``batch + 1`` run starts."""
    rows = jnp.arange(total)
    batch = jnp.searchsorted(offsets[1:], rows, side="right")
    return batch, rows - offsets[jnp.minimum(batch, offsets.shape[0] - 1)]


def _one_ragged_dim(op, ctx, offsets) -> None:
    if len(offsets) != 1:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason=f"{len(offsets)} ragged dims: only one (a jagged nested tensor's) is supported")


@lowering(aten._jagged_to_padded_dense_forward.default)
def lower__jagged_to_padded_dense_forward_default(ctx, values, offsets, max_lengths, padding_value=0.0):
    """_jagged_to_padded_dense_forward(Tensor values, Tensor[] offsets, SymInt[] max_lengths, float padding_value=0.) -> Tensor

    A jagged nested tensor's ``to_padded_tensor``: row ``i`` of ``values`` goes to
    ``[batch, position]`` of a ``[len(offsets) - 1, max_length, ...]`` tensor of ``padding_value``
    (rows past ``max_length`` are dropped). Emits a ``scatter``.
    """  # noqa: E501 (the first line is the exact schema)
    _one_ragged_dim(aten._jagged_to_padded_dense_forward.default, ctx, offsets)
    off = offsets[0].astype(jnp.int64)
    batch, pos = _rows(off, values.shape[0])
    out = jnp.full((off.shape[0] - 1, int(max_lengths[0])) + values.shape[1:], padding_value, values.dtype)
    return out.at[batch, pos].set(values, mode="drop")


@lowering(aten._padded_dense_to_jagged_forward.default)
def lower__padded_dense_to_jagged_forward_default(ctx, dense, offsets, total_L=None):
    """_padded_dense_to_jagged_forward(Tensor dense, Tensor[] offsets, SymInt? total_L=None) -> Tensor

    The inverse (and the backward of ``to_padded_tensor``): the ``total_L`` jagged rows gathered
    from ``dense[batch, position]``. Emits a ``gather``.

    Raises:
        UnsupportedOpError: no ``total_L`` (the row count would depend on the offsets' values).
    """
    op = aten._padded_dense_to_jagged_forward.default
    _one_ragged_dim(op, ctx, offsets)
    if total_L is None:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="total_L is needed: the number of rows would depend on the offsets' values")
    batch, pos = _rows(offsets[0].astype(jnp.int64), int(total_L))
    return dense[batch, jnp.minimum(pos, dense.shape[1] - 1)]


def padded_dense_to_jagged_meta(dense, offsets, total_L=None):
    """``_padded_dense_to_jagged_forward``'s output, from meta tensors (torch has no meta kernel)."""
    if total_L is None:
        raise NotImplementedError("_padded_dense_to_jagged_forward without total_L has a data-dependent shape")
    return dense.new_empty((int(total_L),) + tuple(dense.shape[2:]))
