"""Histograms with bin edges: ``torch.histogram`` (an int bin count or a tensor of edges) and
``torch.histogramdd`` (its ``_histogramdd_*`` pieces). ``histc`` is in :mod:`.sorting`.

All shapes are static (the bin counts or the edge tensors fix them); the edges of an int bin
count follow the data's range, a value of the program. As torch's CPU kernel:

* the outer edges are ``range`` when given, else the data's min and max per dimension
  (``[0, 1]`` for empty data), widened by 0.5 each way when they coincide; the edges
  between are torch's ``linspace`` (from the left for the first half, from the right for
  the rest), in the input dtype;
* a value falls in the bin whose left edge is the last edge ``<=`` it; the last bin also
  takes values equal to the rightmost edge; values outside the edges (and NaN) are
  dropped;
* ``weight`` adds each value's weight instead of one; ``density`` divides by the total and
  by each bin's width (the product of widths in several dimensions).

Torch raises when the data's range is not finite (NaN or inf without ``range``): a
data-dependent check a compiled program cannot make; here the edges are then NaN/inf.
"""

from __future__ import annotations

import jax.numpy as jnp
import torch

from converter.lowering.ops.creation import linspace_values
from converter.lowering.registry import lowering

aten = torch.ops.aten


def _outer_edges(points, rng, dims: int):
    """Per dimension ``(lo, hi)`` 0-d arrays of ``points`` (N, dims): ``rng`` or the data's range."""
    dt = points.dtype
    out = []
    for d in range(dims):
        if rng is not None:
            lo, hi = jnp.asarray(rng[2 * d], dt), jnp.asarray(rng[2 * d + 1], dt)
        elif points.shape[0] == 0:
            lo, hi = jnp.asarray(0, dt), jnp.asarray(1, dt)
        else:
            lo, hi = jnp.min(points[:, d]), jnp.max(points[:, d])
        flat = lo == hi
        out.append((jnp.where(flat, lo - 0.5, lo), jnp.where(flat, hi + 0.5, hi)))
    return out


def _count_edges(points, bins, rng):
    """The edge tensor of each dimension for int bin counts ``bins``."""
    return [linspace_values(lo, hi, b + 1, points.dtype)
            for (lo, hi), b in zip(_outer_edges(points, rng, len(bins)), bins)]


def _hist(points, edges: list, weight, density: bool):
    """The histogram of ``points`` (N, D) over ``edges`` (D edge tensors): shape ``(len(e) - 1, …)``."""
    dt = points.dtype
    shape = tuple(e.shape[0] - 1 for e in edges)
    flat = jnp.zeros((points.shape[0],), jnp.int64)
    valid = jnp.ones((points.shape[0],), bool)
    for d, e in enumerate(edges):
        x = points[:, d]
        pos = jnp.searchsorted(e, x, side="right") - 1
        pos = jnp.where(x == e[-1], shape[d] - 1, pos)  # the last bin is closed on the right
        valid &= (x >= e[0]) & (x <= e[-1])
        flat = flat * shape[d] + jnp.clip(pos, 0, shape[d] - 1)
    size = 1
    for s in shape:
        size *= s
    w = jnp.ones((points.shape[0],), dt) if weight is None else weight.reshape(-1).astype(dt)
    hist = jnp.zeros((size,), dt).at[jnp.where(valid, flat, size)].add(w, mode="drop").reshape(shape)
    if density:
        widths = jnp.ones((), dt)
        for d, e in enumerate(edges):
            widths = widths[..., None] * (e[1:] - e[:-1]).astype(dt)
        hist = hist / (jnp.sum(hist) * widths)
    return hist


def _points(self, dims: int | None):
    """``self`` as (N, D) points: every element for a 1-D histogram, else the last dimension."""
    return self.reshape(-1, 1) if dims is None else self.reshape(-1, self.shape[-1])


@lowering(aten.histogram.bin_ct)
def lower_histogram_bin_ct(ctx, self, bins=100, *, range=None, weight=None, density=False):
    """histogram.bin_ct(Tensor self, int bins=100, *, float[]? range=None, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)

    ``bins`` equal-width bins over ``range`` or the data's range (module docstring).
    """
    points = _points(self, None)
    edges = _count_edges(points, [bins], range)
    return _hist(points, edges, weight, density), edges[0]


@lowering(aten.histogram.bins_tensor)
def lower_histogram_bins_tensor(ctx, self, bins, *, weight=None, density=False):
    """histogram.bins_tensor(Tensor self, Tensor bins, *, Tensor? weight=None, bool density=False) -> (Tensor hist, Tensor bin_edges)

    The bins between consecutive entries of the increasing ``bins``; the edges are returned as given.
    """
    points = _points(self, None)
    edges = bins.astype(self.dtype)
    return _hist(points, [edges], weight, density), edges


@lowering(aten._histogramdd_bin_edges.default)
def lower__histogramdd_bin_edges_default(ctx, self, bins, *, range=None, weight=None, density=False):
    """_histogramdd_bin_edges(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor[]

    The edges of each of the last dimension's coordinates (``torch.histogramdd`` with int bin counts).
    """
    return tuple(_count_edges(_points(self, len(bins)), list(bins), range))


@lowering(aten._histogramdd_from_bin_cts.default)
def lower__histogramdd_from_bin_cts_default(ctx, self, bins, *, range=None, weight=None, density=False):
    """_histogramdd_from_bin_cts(Tensor self, int[] bins, *, float[]? range=None, Tensor? weight=None, bool density=False) -> Tensor

    The ``bins[0] × bins[1] × …`` histogram of the points in ``self``'s last dimension.
    """
    points = _points(self, len(bins))
    return _hist(points, _count_edges(points, list(bins), range), weight, density)


@lowering(aten._histogramdd_from_bin_tensors.default)
def lower__histogramdd_from_bin_tensors_default(ctx, self, bins, *, weight=None, density=False):
    """_histogramdd_from_bin_tensors(Tensor self, Tensor[] bins, *, Tensor? weight=None, bool density=False) -> Tensor

    The histogram over the given edge tensors, one per coordinate.
    """
    points = _points(self, len(bins))
    return _hist(points, [b.astype(self.dtype) for b in bins], weight, density)
