"""Embeddings: ``embedding`` and the embedding-bag family.

torch.export keeps ``nn.Embedding`` as ``embedding`` (preserved), ``nn.EmbeddingBag``/
``F.embedding_bag`` as ``embedding_bag.padding_idx`` (2-d inputs arrive flattened with
``arange`` offsets); ``torch.ops.aten.embedding_bag.default`` becomes
``_embedding_bag_forward_only``. Their backward ops (``_embedding_bag_backward``,
``_embedding_bag_per_sample_weights_backward``: eager autograd and AOTAutograd graphs) are
rows too.

Deviation: out-of-range indices are not checked (XLA cannot raise); the gather clamps
them where torch raises an IndexError.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.errors import UnsupportedOpError
from converter.lowering.helpers import opmath_dtype
from converter.lowering.registry import lowering

aten = torch.ops.aten

_SUM, _MEAN, _MAX = 0, 1, 2


@lowering(aten.embedding.default, composite=True)
def lower_embedding_default(ctx, weight, indices, padding_idx=-1, scale_grad_by_freq=False, sparse=False):
    """embedding(Tensor weight, Tensor indices, SymInt padding_idx=-1, bool scale_grad_by_freq=False, bool sparse=False) -> Tensor

    Composite ``aten.embedding``: a row ``gather`` (``jnp.take(weight, indices, 0)``).
    ``padding_idx``, ``scale_grad_by_freq`` and ``sparse`` only affect gradients.
    """
    return jnp.take(weight, indices, axis=0, mode="clip")


@lowering(aten.embedding_renorm.default)
def lower_embedding_renorm_default(ctx, self, indices, max_norm, norm_type):
    """embedding_renorm(Tensor self, Tensor indices, float max_norm, float norm_type) -> Tensor

    The functional form of ``embedding_renorm_`` (``nn.Embedding(max_norm=...)``): each row of ``self``
    that ``indices`` names and whose ``norm_type``-norm exceeds ``max_norm`` is scaled by
    ``max_norm / (norm + 1e-7)``, as torch does; other rows are unchanged. A row named twice is
    scaled once (the scaled rows are set, not multiplied in).
    """
    idx = indices.reshape(-1).astype(jnp.int64)
    rows = jnp.take(self, idx, axis=0, mode="clip")
    acc = rows.astype(opmath_dtype(self.dtype))
    if norm_type == float("inf"):
        norms = jnp.max(jnp.abs(acc), axis=1)
    else:
        norms = jnp.sum(jnp.abs(acc) ** norm_type, axis=1) ** (1.0 / norm_type)
    scale = jnp.where(norms > max_norm, max_norm / (norms + 1e-7), 1.0)
    return self.at[idx].set((acc * scale[:, None]).astype(self.dtype), mode="drop")


def bag_ids(offsets, n, nb):
    """The bag of each of ``n`` index positions given the first ``nb`` offsets (bag starts).

    Bag of a position = (number of bag starts <= position) - 1: a scatter-add of the starts
    and a cumsum, O(n) and valid for symbolic sizes. With include_last_offset torch ignores
    the last offset's value here (``nb`` excludes it): the last bag runs to the end of the indices
    (without a padding_idx, the sum and mean modes stop adding at the last offset: see
    ``_embedding_bag``).
    """
    starts = offsets[:nb].astype(jnp.int64)
    return jnp.cumsum(jnp.zeros((n,), jnp.int64).at[starts].add(1, mode="drop")) - 1


def _same_size(a, b):
    """Whether two recorded sizes (ints or symbolic sizes) are the same, without guarding on a symbol."""
    return a == b if isinstance(a, int) and isinstance(b, int) else str(a) == str(b)


def _embedding_bag(ctx, op, weight, indices, offsets, mode, per_sample_weights, include_last_offset, padding_idx):
    if indices.ndim != 1 or offsets.ndim != 1:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="embedding_bag expects 1-d indices and offsets at the ATen level")
    if per_sample_weights is not None and mode != _SUM:
        raise UnsupportedOpError(str(op), ctx.target, ctx.location,
                                 reason="per_sample_weights is only supported with mode='sum'")
    if mode not in (_SUM, _MEAN, _MAX):
        raise UnsupportedOpError(str(op), ctx.target, ctx.location, reason=f"unknown embedding_bag mode {mode}")
    n = indices.shape[0]
    nb = offsets.shape[0] - 1 if include_last_offset else offsets.shape[0]
    pos = jnp.arange(n, dtype=jnp.int64)
    seg = bag_ids(offsets, n, nb)
    idx = indices.astype(jnp.int64)
    has_padding = padding_idx is not None and padding_idx >= 0
    valid = idx != padding_idx if has_padding else jnp.ones((n,), jnp.bool_)
    acc = opmath_dtype(weight.dtype)
    rows = jnp.take(weight, idx, axis=0, mode="clip").astype(acc)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.astype(acc)[:, None]
    d = weight.shape[1]
    # scatter-add/max/min into (nb, …) buffers: unlike jax.ops.segment_*, the bag count
    # may be a symbolic dim (dynamic batch)
    counts = jnp.zeros((nb,), jnp.int64).at[seg].add(valid.astype(jnp.int64), mode="drop")
    if mode == _MAX:
        lowest = jnp.asarray(-jnp.inf, acc)
        masked = jnp.where(valid[:, None], rows, lowest)
        out = jnp.full((nb, d), lowest, acc).at[seg].max(masked, mode="drop")
        nonempty = (counts > 0)[:, None]
        # first position holding the maximum (torch updates on a strictly larger value)
        hit = valid[:, None] & (masked == jnp.take(out, seg, axis=0, mode="clip"))
        first = jnp.full((nb, d), n, jnp.int64).at[seg].min(jnp.where(hit, pos[:, None], n), mode="drop")
        max_indices = jnp.where(nonempty, jnp.take(idx, first, mode="clip"), 0)
        out = jnp.where(nonempty, out, jnp.zeros((), acc))
    else:
        # with include_last_offset and no padding_idx, torch's CPU kernel sums a bag only up to the
        # last offset (the mean still divides by the count to the end of the indices); with a
        # padding_idx, and in max mode, the last bag runs to the end
        bounded = include_last_offset and not has_padding and nb >= 0
        kept = valid & (pos < offsets[nb].astype(jnp.int64)) if bounded else valid
        summed = jnp.where(kept[:, None], rows, jnp.zeros((), acc))
        out = jnp.zeros((nb, d), acc).at[seg].add(summed, mode="drop")
        if mode == _MEAN:
            out = out / jnp.maximum(counts, 1).astype(acc)[:, None]
    # torch's CPU kernel (shapes as torch.export's meta records them): bag_size has one
    # entry per offset, zeros in sum mode, else the non-padding counts; max_indices is
    # bag_size again outside max mode.
    bag_size = jnp.zeros((nb,), jnp.int64) if mode == _SUM else counts
    if mode != _MAX:
        max_indices = bag_size
    # torch's fast CPU path (sum, no padding_idx, float32/float64) leaves offset2bag empty;
    # follow the shapes recorded when there are some: torch's meta kernel (torch.export, eager,
    # torch.compile of tpu tensors) gives include_last_offset's bag_size one entry per offset and no
    # max_indices outside max mode; the CPU kernel (torch.compile of CPU tensors) one per bag and
    # bag_size again
    meta = ctx.out_meta
    if isinstance(meta, (list, tuple)) and len(meta) == 4:
        empty = meta[1].shape[0] == 0
        if include_last_offset and not _same_size(meta[2].shape[0], meta[0].shape[0]):
            bag_size = jnp.concatenate([bag_size, jnp.zeros((1,), jnp.int64)])
        if mode != _MAX and meta[3].shape[0] == 0:
            max_indices = jnp.zeros((0,), jnp.int64)
    else:
        empty = mode == _SUM and not has_padding and weight.dtype in (jnp.float32, jnp.float64)
        if include_last_offset:
            bag_size = jnp.concatenate([bag_size, jnp.zeros((1,), jnp.int64)])
    offset2bag = jnp.zeros((0,), jnp.int64) if empty else jnp.clip(seg, 0, nb - 1)
    return out.astype(weight.dtype), offset2bag, bag_size, max_indices


@lowering(aten.embedding_bag.padding_idx, composite=True)
def lower_embedding_bag_padding_idx(ctx, weight, indices, offsets, scale_grad_by_freq, mode, sparse,
                                    per_sample_weights, include_last_offset, padding_idx):
    """embedding_bag.padding_idx(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, bool include_last_offset, int? padding_idx) -> (Tensor, Tensor, Tensor, Tensor)

    Composite ``aten.embedding_bag``: row ``gather``, bag ids by comparing positions
    with the offsets, then ``segment_sum`` (mode sum, ``* per_sample_weights``), sum /
    non-padding count (mean) or ``segment_max`` (max); entries equal to ``padding_idx``
    are skipped and empty bags give zeros. Also returns offset2bag, bag_size and
    max_indices as torch's CPU kernel does.
    """
    return _embedding_bag(ctx, aten.embedding_bag.padding_idx, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, padding_idx)


@lowering(aten._embedding_bag.default, aten._embedding_bag_forward_only.default, composite=True)
def lower__embedding_bag_default(ctx, weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                                 per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    """_embedding_bag(Tensor weight, Tensor indices, Tensor offsets, bool scale_grad_by_freq=False, int mode=0, bool sparse=False, Tensor? per_sample_weights=None, bool include_last_offset=False, int padding_idx=-1) -> (Tensor, Tensor, Tensor, Tensor)

    Also _embedding_bag_forward_only. As embedding_bag.padding_idx; ``padding_idx=-1``
    means no padding index.
    """
    return _embedding_bag(ctx, aten._embedding_bag.default, weight, indices, offsets, mode, per_sample_weights,
                          include_last_offset, padding_idx)


@lowering(aten._embedding_bag_backward.default)
def lower__embedding_bag_backward(ctx, grad, indices, offsets, offset2bag, bag_size, maximum_indices, num_weights,
                                  scale_grad_by_freq, mode, sparse, per_sample_weights, padding_idx=-1):
    """_embedding_bag_backward(Tensor grad, Tensor indices, Tensor offsets, Tensor offset2bag, Tensor bag_size, Tensor maximum_indices, SymInt num_weights, bool scale_grad_by_freq, int mode, bool sparse, Tensor? per_sample_weights, int padding_idx=-1) -> Tensor

    The dense weight gradient: each bag's gradient row scattered back to the rows it
    gathered (divided by the bag's size in mean mode, times ``per_sample_weights``),
    or to the row that held each maximum in max mode; padding entries get nothing;
    ``scale_grad_by_freq`` divides by each row's count in the batch.

    Raises:
        UnsupportedOpError: ``sparse=True`` (a sparse gradient has no dense-array representation).
    """
    if sparse:
        raise UnsupportedOpError(str(aten._embedding_bag_backward.default), ctx.target, ctx.location,
                                 reason="sparse=True embedding gradients are not supported (dense arrays only); "
                                        "use sparse=False (a dense gradient)")
    nb, d = grad.shape
    idx = indices.astype(jnp.int64)
    acc = jnp.float32 if grad.dtype in (jnp.float16, jnp.bfloat16) else grad.dtype
    g = grad.astype(acc)
    valid = idx != padding_idx if padding_idx is not None and padding_idx >= 0 else jnp.ones(idx.shape, bool)
    if mode == _MAX:  # max: the gradient goes to the row each maximum came from (empty bags: nowhere)
        nonempty = (bag_size[:nb] > 0)[:, None]
        cols = jnp.broadcast_to(jnp.arange(d), (nb, d))
        out = jnp.zeros((num_weights, d), acc).at[maximum_indices.astype(jnp.int64), cols].add(
            jnp.where(nonempty, g, jnp.zeros((), acc)), mode="drop")
    else:
        seg = bag_ids(offsets, idx.shape[0], nb)
        if offsets.shape[0] == nb + 1 and not (padding_idx is not None and padding_idx >= 0):
            # include_last_offset: the forward summed no index past the last offset (see _embedding_bag);
            # they get no gradient (the CPU kernel reads past the end of ``grad`` for them)
            valid = valid & (jnp.arange(idx.shape[0]) < offsets[nb].astype(jnp.int64))
        rows = jnp.take(g, jnp.clip(seg, 0, nb - 1), axis=0)
        if mode == _MEAN:
            rows = rows / jnp.maximum(jnp.take(bag_size[:nb], jnp.clip(seg, 0, nb - 1)), 1).astype(acc)[:, None]
        if per_sample_weights is not None:
            rows = rows * per_sample_weights.astype(acc)[:, None]
        rows = jnp.where((valid & (seg >= 0))[:, None], rows, jnp.zeros((), acc))
        out = jnp.zeros((num_weights, d), acc).at[idx].add(rows, mode="drop")
    if scale_grad_by_freq:
        freq = jnp.zeros((num_weights,), acc).at[idx].add(valid.astype(acc), mode="drop")
        out = out / jnp.maximum(freq, 1)[:, None]
    return out.astype(grad.dtype)


@lowering(aten._embedding_bag_per_sample_weights_backward.default)
def lower__embedding_bag_per_sample_weights_backward(ctx, grad, weight, indices, offsets, offset2bag, mode,
                                                     padding_idx=-1):
    """_embedding_bag_per_sample_weights_backward(Tensor grad, Tensor weight, Tensor indices, Tensor offsets, Tensor offset2bag, int mode, int padding_idx=-1) -> Tensor

    Sum mode: each sample's weight gets the dot product of its bag's gradient row with
    the embedding row it scaled (zero for padding entries).
    """
    nb = grad.shape[0]
    idx = indices.astype(jnp.int64)
    seg = bag_ids(offsets, idx.shape[0], nb)
    rows = jnp.take(weight, idx, axis=0, mode="clip")
    out = jnp.sum(jnp.take(grad, jnp.clip(seg, 0, nb - 1), axis=0) * rows, axis=1)
    if padding_idx is not None and padding_idx >= 0:
        out = jnp.where(idx != padding_idx, out, jnp.zeros((), out.dtype))
    return out.astype(grad.dtype)
