"""Shape and view ops: view, permute, expand, squeeze, cat, split, slice, select, flip, …

Views become value ops (functional JAX has no aliasing): ``view`` is a reshape,
``slice`` a strided slice, ``expand`` a broadcast. Sizes may be python ints or
jax.export symbolic dims; python arithmetic works on both, so only "huge" slice
ends (torch's ``INT64_MAX`` for an open end) are special-cased.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import dim as norm_dim
from converter.lowering.helpers import dims as norm_dims
from converter.lowering.helpers import result_type
from converter.lowering.registry import lowering

aten = torch.ops.aten
lax = jax.lax

_OPEN_END = 2**62  # torch writes ``x[a:]`` as end=INT64_MAX


def _bound(v, size, default):
    """Clamp a slice start/end to ``[0, size]`` the way torch does (negative counts from the end)."""
    if v is None:
        return default
    if isinstance(v, int) and v >= _OPEN_END:
        return size
    if isinstance(v, int) and isinstance(size, int):
        v = v + size if v < 0 else v
        return min(max(v, 0), size)
    return v + size if isinstance(v, int) and v < 0 else v


@lowering(aten.view.default)
def lower_view_default(ctx, self, size):
    """view(Tensor(a) self, SymInt[] size) -> Tensor(a)

    Emits ``reshape`` (``-1`` inferred). reshape/_unsafe_view/flatten decompose to this.
    """
    return jnp.reshape(self, tuple(size))


@lowering(aten.permute.default)
def lower_permute_default(ctx, self, dims):
    """permute(Tensor(a) self, int[] dims) -> Tensor(a)

    Emits ``transpose``. transpose.int, t and movedim decompose to this.
    """
    return jnp.transpose(self, tuple(norm_dim(d, self.ndim) for d in dims)) if self.ndim else self


@lowering(aten.expand.default)
def lower_expand_default(ctx, self, size, *, implicit=False):
    """expand(Tensor(a) self, SymInt[] size, *, bool implicit=False) -> Tensor(a)

    Emits ``broadcast_in_dim``; ``-1`` keeps the existing size, new dims lead.
    """
    lead = len(size) - self.ndim
    shape = tuple(self.shape[i - lead] if (i >= lead and isinstance(s, int) and s == -1) else s
                  for i, s in enumerate(size))
    return jnp.broadcast_to(self, shape)


@lowering(aten.squeeze.dims)
def lower_squeeze_dims(ctx, self, dim):
    """squeeze.dims(Tensor(a) self, int[] dim) -> Tensor(a)

    Emits ``reshape`` dropping the listed dims that have size 1 (others are kept,
    as torch does; an empty list squeezes nothing). squeeze.default / squeeze.dim decompose to this.
    """
    if self.ndim == 0 or not dim:
        return self
    drop = [d for d in norm_dims(list(dim), self.ndim) if self.shape[d] == 1]
    return jnp.squeeze(self, tuple(drop)) if drop else self


@lowering(aten.unsqueeze.default)
def lower_unsqueeze_default(ctx, self, dim):
    """unsqueeze(Tensor(a) self, int dim) -> Tensor(a)

    Emits ``broadcast_in_dim`` adding a size-1 dim (negative dims count from ndim+1).
    """
    return jnp.expand_dims(self, norm_dim(dim, self.ndim + 1))


@lowering(aten.cat.default)
def lower_cat_default(ctx, tensors, dim=0):
    """cat(Tensor[] tensors, int dim=0) -> Tensor

    Emits ``concatenate`` in torch's promoted dtype. Legacy empty 1-d inputs
    (shape ``(0,)``) are skipped, as torch allows with any other rank.
    """
    dtype = ctx.out_dtype or result_type(*tensors)
    kept = [t for t in tensors if not (t.ndim == 1 and isinstance(t.shape[0], int) and t.shape[0] == 0)]
    if not kept:
        return jnp.zeros((0,), dtype)
    d = norm_dim(dim, kept[0].ndim)
    return jnp.concatenate([t.astype(dtype) for t in kept], axis=d)


@lowering(aten.split_with_sizes.default)
def lower_split_with_sizes_default(ctx, self, split_sizes, dim=0):
    """split_with_sizes(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]

    Emits one ``slice`` per piece. split.Tensor and chunk decompose to this.
    """
    d = norm_dim(dim, self.ndim)
    out, start = [], 0
    for s in split_sizes:
        out.append(lax.slice_in_dim(self, start, start + s, axis=d))
        start = start + s
    return out


@lowering(aten.slice.Tensor)
def lower_slice_tensor(ctx, self, dim=0, start=None, end=None, step=1):
    """slice.Tensor(Tensor(a) self, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor(a)

    Emits a strided ``slice``. Negative and out-of-range bounds are clamped as
    in Python; ``end <= start`` gives an empty dim. narrow decomposes to this.
    """
    d = norm_dim(dim, self.ndim)
    size = self.shape[d]
    lo = _bound(start, size, 0)
    hi = _bound(end, size, size)
    if isinstance(lo, int) and isinstance(hi, int) and hi < lo:
        hi = lo
    return lax.slice_in_dim(self, lo, hi, stride=step, axis=d)


@lowering(aten.narrow_copy.default)
def lower_narrow_copy_default(ctx, self, dim, start, length):
    """narrow_copy(Tensor self, int dim, SymInt start, SymInt length) -> Tensor

    Emits a ``slice`` of ``length`` elements from ``start`` (negative counts from the end).
    """
    d = norm_dim(dim, self.ndim)
    lo = _bound(start, self.shape[d], 0)
    return lax.slice_in_dim(self, lo, lo + length, axis=d)


@lowering(aten.select.int)
def lower_select_int(ctx, self, dim, index):
    """select.int(Tensor(a) self, int dim, SymInt index) -> Tensor(a)

    Emits a ``slice`` + ``reshape`` (``dynamic_slice`` for a symbolic index);
    a negative index counts from the end. unbind decomposes to slices + squeeze.
    """
    d = norm_dim(dim, self.ndim)
    if isinstance(index, int):
        index = index + self.shape[d] if index < 0 else index
        return lax.index_in_dim(self, index, axis=d, keepdims=False)
    return lax.dynamic_index_in_dim(self, index, axis=d, keepdims=False)


@lowering(aten.flip.default)
def lower_flip_default(ctx, self, dims):
    """flip(Tensor self, int[] dims) -> Tensor

    Emits ``rev``. rot90 decomposes to flip + permute.
    """
    if self.ndim == 0 or not dims:
        return self
    return jnp.flip(self, axis=norm_dims(list(dims), self.ndim))


@lowering(aten.repeat.default)
def lower_repeat_default(ctx, self, repeats):
    """repeat(Tensor self, SymInt[] repeats) -> Tensor

    Emits ``broadcast_in_dim`` + ``reshape`` (jnp.tile); extra repeats add leading
    dims. tile decomposes to this.
    """
    return jnp.tile(self, tuple(repeats))


@lowering(aten.alias.default)
def lower_alias_default(ctx, self):
    """alias(Tensor(a) self) -> Tensor(a)

    Identity: JAX values never alias.
    """
    return self


@lowering(aten.pixel_shuffle.default, composite=True)
def lower_pixel_shuffle_default(ctx, self, upscale_factor):
    """pixel_shuffle(Tensor self, int upscale_factor) -> Tensor

    Composite ``aten.pixel_shuffle`` (LiteRT: DEPTH_TO_SPACE after a layout
    change); body is ``reshape`` → ``transpose`` → ``reshape`` over
    ``(*, C*r*r, H, W) → (*, C, H*r, W*r)``. pixel_unshuffle decomposes already.
    """
    r = upscale_factor
    *batch, c, h, w = self.shape
    nb = len(batch)
    x = self.reshape(*batch, c // (r * r), r, r, h, w)
    perm = tuple(range(nb)) + (nb, nb + 3, nb + 1, nb + 4, nb + 2)
    return jnp.transpose(x, perm).reshape(*batch, c // (r * r), h * r, w * r)


@lowering(aten.unfold.default)
def lower_unfold_default(ctx, self, dimension, size, step):
    """unfold(Tensor(a) self, int dimension, int size, int step) -> Tensor(a)

    Sliding windows along ``dimension`` as a new last dim. Emits ``size`` strided
    ``slice`` ops stacked (windows up to 16) or one ``gather`` for larger windows.
    """
    if self.ndim == 0:
        return self.reshape(1)
    d = norm_dim(dimension, self.ndim)
    count = (self.shape[d] - size) // step + 1
    if size <= 16:
        parts = [lax.slice_in_dim(self, j, j + (count - 1) * step + 1, stride=step, axis=d) for j in range(size)]
        return jnp.stack(parts, axis=-1)
    idx = jnp.arange(count)[:, None] * step + jnp.arange(size)[None, :]
    return jnp.moveaxis(jnp.take(self, idx, axis=d), d + 1, -1)


def _dense_restride(ctx, self, size, stride, storage_offset) -> bool:
    """Whether an as_strided view only re-labels the strides of size-1 dims of a dense input of as many elements
    (channels-last's ``mean(keepdim=True)`` output re-strided: ``as_strided(x, [b, c, 1, 1], [c, 1, c, c])``):
    its elements are the input's in order, a reshape, also when a size is a dynamic dim (a batch)."""
    if storage_offset not in (None, 0) or len(size) != len(stride):
        return False
    meta = ctx.node.args[0].meta.get("val") if ctx.node is not None else None
    if meta is not None and (not meta.is_contiguous() or meta.storage_offset() != 0):
        return False
    dense = 1
    for n, st in zip(reversed(size), reversed(stride)):
        if not (isinstance(n, int) and n == 1):
            if not isinstance(st, int) or not isinstance(dense, int) or st != dense:
                return False
        dense = dense * n
    try:
        return bool(dense == math.prod(self.shape))
    except Exception:  # noqa: BLE001 (an inconclusive symbolic comparison)
        return False


def _strided_indices(ctx, op, self, size, stride, storage_offset, views=False):
    """Flat indices into ``self`` of an as_strided view (computed at conversion time).

    torch's as_strided reads storage: for a contiguous input at offset 0 (and in eager, where the
    runtime has already put an input whose storage layout it knows back on its storage) the storage
    positions are ``self``'s flat indices. With ``views`` (a read), a non-contiguous or offset input
    whose layout the node's meta gives (a CPU tensor, or a tpu tensor: it reports the CPU's layout,
    Longformer's chunks of a transposed projection under ``torch.compile``) maps each storage position
    back to the element of ``self`` stored there; a position no element of ``self`` holds (storage
    beyond the view) raises UnsupportedOpError.
    """
    meta = ctx.node.args[0].meta.get("val") if ctx.node is not None else None
    dense = meta is None
    strided = not dense and (not meta.is_contiguous() or meta.storage_offset() != 0)
    layout = (tuple(meta.stride()), meta.storage_offset()) if strided else None
    if strided and (not views or not all(isinstance(v, int) for v in (*layout[0], layout[1]))):
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="as_strided of a non-contiguous or offset view reads torch's storage layout")
    if not all(isinstance(v, int) for v in (*size, *stride, storage_offset or 0)):
        raise UnsupportedOpError(str(op), ctx.target, ctx.location, reason="as_strided needs static sizes and strides")
    start = storage_offset if storage_offset is not None else (layout[1] if layout else 0)
    if layout is None:
        idx = _positions(tuple(size), tuple(stride), start)
        if idx.size and idx.max() >= math.prod(self.shape):
            raise UnsupportedOpError(str(op), ctx.target, ctx.location, reason="as_strided reads past the input's storage")
        return idx
    picked = strided_elements(tuple(self.shape), layout[0], layout[1], tuple(size), tuple(stride), start)
    if (picked < 0).any():
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="as_strided reads storage that the (non-contiguous) input does not hold")
    return picked


def strided_elements(shape, strides, offset, size, stride, start):
    """For each element of an as_strided view (``size``/``stride`` from storage position ``start``), the flat
    index of the element of a tensor of ``shape`` laid out with ``strides`` at ``offset`` that is stored at
    that position; -1 where no element of that tensor is stored."""
    idx = _positions(size, stride, start)
    held = _positions(shape, strides, offset).reshape(-1)
    where = np.full(max(int(held.max(initial=0)), int(idx.max(initial=0))) + 1, -1, dtype=np.int64)
    where[held] = np.arange(held.size)
    return where[idx]


def _positions(size: tuple, stride: tuple, offset: int) -> np.ndarray:
    """Storage position of each element of a ``size``/``stride`` layout starting at ``offset``."""
    idx = np.full(size, offset, dtype=np.int64)
    for axis, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[axis] = n
        idx = idx + (np.arange(n, dtype=np.int64) * s).reshape(shape)
    return idx


@lowering(aten.as_strided.default)
def lower_as_strided_default(ctx, self, size, stride, storage_offset=None):
    """as_strided(Tensor(a) self, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor(a)

    The view's flat indices are computed at conversion time; emits ``reshape`` when they are
    simply 0..n-1, else one ``gather``. A non-contiguous or offset input reads through its
    layout in the node's meta (torch reads raw storage); storage it does not hold raises
    UnsupportedOpError.
    """
    if _dense_restride(ctx, self, size, stride, storage_offset):
        return self.reshape(tuple(size))
    idx = _strided_indices(ctx, aten.as_strided.default, self, size, stride, storage_offset, views=True)
    flat = self.reshape(-1)
    if np.array_equal(idx.reshape(-1), np.arange(idx.size)):
        return flat[: idx.size].reshape(tuple(size))
    return jnp.take(flat, jnp.asarray(idx), axis=0)


@lowering(aten.as_strided_scatter.default)
def lower_as_strided_scatter_default(ctx, self, src, size, stride, storage_offset=None):
    """as_strided_scatter(Tensor self, Tensor src, SymInt[] size, SymInt[] stride, SymInt? storage_offset=None) -> Tensor

    Writes ``src`` into the as_strided view of a contiguous input: one ``scatter``
    on the flattened tensor (indices computed at conversion time).
    """
    idx = _strided_indices(ctx, aten.as_strided_scatter.default, self, size, stride, storage_offset)
    flat = self.reshape(-1).at[jnp.asarray(idx.reshape(-1))].set(src.reshape(-1).astype(self.dtype))
    return flat.reshape(self.shape)


@lowering(aten.sym_size.int)
def lower_sym_size_int(ctx, self, dim):
    """sym_size.int(Tensor self, int dim) -> SymInt

    The dim's size: a python int, or a jax.export symbolic dim under shape polymorphism.
    """
    return self.shape[norm_dim(dim, self.ndim)]


@lowering(aten.diagonal.default)
def lower_diagonal_default(ctx, self, offset=0, dim1=0, dim2=1):
    """diagonal(Tensor(a) self, int offset=0, int dim1=0, int dim2=1) -> Tensor(a)

    Emits ``jnp.diagonal`` (a ``gather`` of the diagonal's indices); the diagonal
    becomes the last dim. trace and diag decompose to this.
    """
    return jnp.diagonal(self, offset, norm_dim(dim1, self.ndim), norm_dim(dim2, self.ndim))


@lowering(aten.diagonal_scatter.default)
def lower_diagonal_scatter_default(ctx, self, src, offset=0, dim1=0, dim2=1):
    """diagonal_scatter(Tensor self, Tensor src, int offset=0, int dim1=0, int dim2=1) -> Tensor

    Emits a ``scatter`` of ``src`` (diagonal as its last dim) onto the diagonal.
    """
    d1, d2 = norm_dim(dim1, self.ndim), norm_dim(dim2, self.ndim)
    x = jnp.moveaxis(self, (d1, d2), (-2, -1))
    n = src.shape[-1]
    rows = jnp.arange(n) + max(-offset, 0)
    cols = jnp.arange(n) + max(offset, 0)
    x = x.at[..., rows, cols].set(src.astype(self.dtype))
    return jnp.moveaxis(x, (-2, -1), (d1, d2))


@lowering(aten.slice_scatter.default)
def lower_slice_scatter_default(ctx, self, src, dim=0, start=None, end=None, step=1):
    """slice_scatter(Tensor self, Tensor src, int dim=0, SymInt? start=None, SymInt? end=None, SymInt step=1) -> Tensor

    Writes ``src`` into ``self[start:end:step]`` along ``dim``: ``dynamic_update_slice``
    for step 1, a strided ``scatter`` otherwise. In-place slice assignment
    (``x[:, 1:3] = y``) arrives as this.
    """
    d = norm_dim(dim, self.ndim)
    size = self.shape[d]
    lo = _bound(start, size, 0)
    src = src.astype(self.dtype)
    if step == 1:
        return lax.dynamic_update_slice_in_dim(self, src, lo, axis=d)
    hi = _bound(end, size, size)
    index = (slice(None),) * d + (slice(lo, hi, step),)
    return self.at[index].set(src)


@lowering(aten.copy.default)
def lower_copy_default(ctx, self, src, non_blocking=False):
    """copy(Tensor self, Tensor src, bool non_blocking=False) -> Tensor

    The functional copy_: ``src`` broadcast to ``self``'s shape in ``self``'s dtype.
    """
    return jnp.broadcast_to(src.astype(self.dtype), self.shape)
