"""The input sets of a parity run: the sample, any given ones, and seeded random ones.

Random inputs keep each sample's dtype, and its shape but for the dims the capture made dynamic
(``dynamic_shapes=``): each dynamic dim takes another size inside its declared range (at least 2, at most
twice the sample's plus one), the same for every input that shares it, so a dynamic export is checked at sizes
other than the one it was traced at; a derived dim (``2 * h``, ``2 * h + 1``) is its symbol's new value scaled
and offset, so every size stays one the export takes. (A set keeps the sample's sizes when an input it must reuse,
below, or a dim of several symbols, ``batch * length``, has a dynamic size.) Floating inputs are drawn from
a normal distribution with the sample's mean and standard deviation; integer
inputs stay inside the range the model can take — ``[0, num_embeddings)`` when
they index an embedding table (or the indexed dim of ``index_select`` /
``gather`` / ``index`` / ``embedding_bag``), else the sample's own ``[min, max]``
(token ids); boolean and mask-like inputs (two distinct values one of which is 0,
or non-finite entries such as ``-inf`` attention masks) and structural inputs (the
``offsets`` of ``embedding_bag``, which must start at 0 and never decrease; the
indices of a replacing ``scatter`` / ``index_put``, where a random draw's duplicates
would make PyTorch's own result undefined) are reused as given, because their
pattern carries meaning a random draw would destroy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind

from converter.call_inputs import finite_bound
from converter.dim_links import parsed_dim

aten = torch.ops.aten

#: Ops that only move or re-view data: an index stays an index through them.
_VIEW_LIKE = {
    aten.view.default, aten.reshape.default, aten._unsafe_view.default, aten.unsqueeze.default,
    aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default, aten.flatten.using_ints, aten.clone.default,
    aten.expand.default, aten.permute.default, aten._to_copy.default, aten.alias.default,
}

#: ``embedding_bag`` overloads: (weight, indices, offsets, …) — indices index the rows, offsets
#: define the bags (the first is 0, they never decrease), so offsets are never drawn at random.
_EMBEDDING_BAG = {
    aten.embedding_bag.default, aten.embedding_bag.padding_idx, aten._embedding_bag.default,
    aten._embedding_bag_forward_only.default,
}

#: Replacing scatters (self, dim, index, src|value): duplicate indices leave the result undefined.
_SCATTER = {aten.scatter.src, aten.scatter.value}


@dataclass(frozen=True)
class InputSet:
    """One set of inputs for the reference and every target.

    Attributes:
        index: position in the run (0 is the sample).
        origin: "sample", "given" or "random".
        args: positional inputs.
        kwargs: keyword inputs.
        notes: how each random input was drawn (for the report).
    """

    index: int
    origin: str
    args: tuple
    kwargs: dict
    notes: tuple = ()

    @property
    def flat(self) -> list[torch.Tensor]:
        """The tensor leaves of ``(args, kwargs)``, in the order the targets take them."""
        leaves = torch.utils._pytree.tree_leaves((tuple(self.args), dict(self.kwargs)))
        return [x for x in leaves if isinstance(x, torch.Tensor)]


def index_bounds(ep: ExportedProgram) -> dict[str, int]:
    """Upper bounds (exclusive) of user inputs that index a dim, by placeholder name."""
    users = {s.arg.name for s in ep.graph_signature.input_specs
             if s.kind == InputKind.USER_INPUT and hasattr(s.arg, "name")}
    bounds: dict[str, int] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        for index, size in _indexed(node):
            root = _through_views(index)
            if root is not None and root.name in users and isinstance(size, int):
                bounds[root.name] = min(bounds.get(root.name, size), size)
    return bounds


def _indexed(node: torch.fx.Node) -> list[tuple[Any, Any]]:
    """``(index node, size of the dim it indexes)`` pairs of one node."""

    def dim_size(t: Any, dim: int) -> Any:
        val = t.meta.get("val") if isinstance(t, torch.fx.Node) else None
        return val.shape[dim] if isinstance(val, torch.Tensor) and -val.dim() <= dim < val.dim() else None

    a = node.args
    if node.target in (aten.embedding.default,) or node.target in _EMBEDDING_BAG:
        return [(a[1], dim_size(a[0], 0))]
    if node.target in (aten.index_select.default, aten.gather.default):
        return [(a[2], dim_size(a[0], a[1]))]
    if node.target is aten.index.Tensor:
        return [(ix, dim_size(a[0], d)) for d, ix in enumerate(a[1]) if ix is not None]
    return []


def structural_inputs(ep: ExportedProgram) -> dict[str, str]:
    """User inputs whose values define structure rather than data, by placeholder name → why.

    Random input sets reuse the sample for them: random ``embedding_bag`` offsets
    would not start at 0 or would decrease (PyTorch itself rejects them), and random
    indices of a replacing scatter or ``index_put`` would repeat, where which write
    wins is unspecified, so no target could be judged against PyTorch.
    """
    out: dict[str, str] = {}
    for node in ep.graph.nodes:
        if node.op != "call_function":
            continue
        a = node.args
        if node.target in _EMBEDDING_BAG and len(a) > 2:
            found = [(a[2], "offsets of embedding_bag (they define the bags)")]
        elif node.target in _SCATTER and len(a) > 2:
            found = [(a[2], "indices of scatter (duplicates would leave PyTorch's result undefined)")]
        elif node.target is aten.index_put.default and not (a[3] if len(a) > 3 else node.kwargs.get("accumulate")):
            found = [(ix, "indices of index_put (duplicates would leave PyTorch's result undefined)")
                     for ix in a[1] if ix is not None]
        else:
            continue
        for index, why in found:
            root = _through_views(index)
            if root is not None:
                out.setdefault(root.name, why)
    return out


def _through_views(x: Any) -> torch.fx.Node | None:
    while isinstance(x, torch.fx.Node) and x.op == "call_function" and x.target in _VIEW_LIKE:
        x = x.args[0]
    return x if isinstance(x, torch.fx.Node) and x.op == "placeholder" else None


def _reused(sample: torch.Tensor) -> str | None:
    """Why a sample input is reused as given rather than drawn (a mask), or ``None``."""
    if sample.dtype == torch.bool:
        return "bool: sample reused (mask)"
    if sample.dtype.is_floating_point or sample.dtype.is_complex:
        s = sample.detach().float()
        if s.numel() > 2 and (not torch.isfinite(s).all() or _two_valued_with_zero(s)):
            return "mask-like: sample reused"
    return None


def random_like(sample: torch.Tensor, generator: torch.Generator, bound: int | None = None,
                shape: tuple | None = None) -> tuple[torch.Tensor, str]:
    """A seeded random tensor like ``sample`` (of ``shape``, else the sample's), and how it was drawn.

    Args:
        sample: the sample input.
        generator: the seeded generator to draw from.
        bound: exclusive upper bound for an integer input that indexes a dim.
        shape: the shape to draw (a mask is reused as given: the caller keeps its shape).

    Returns:
        ``(tensor, note)``.
    """
    dtype, shape = sample.dtype, tuple(sample.shape if shape is None else shape)
    reused = _reused(sample)
    if reused is not None:
        return sample.clone(), reused
    if dtype.is_floating_point or dtype.is_complex:
        s = sample.detach().float()
        mean = float(s.mean()) if s.numel() else 0.0
        std = float(s.std()) if s.numel() > 1 else 0.0
        std = std if std > 0 else 1.0
        x = torch.randn(shape, generator=generator) * std + mean
        return x.to(dtype), f"normal(mean={mean:.3g}, std={std:.3g})"
    if bound is not None:
        lo, hi = 0, bound - 1
        why = f"index into a dim of size {bound}"
    else:
        lo = int(sample.min()) if sample.numel() else 0
        hi = int(sample.max()) if sample.numel() else 0
        why = "sample range"
    return torch.randint(lo, hi + 1, shape, generator=generator, dtype=dtype), f"integers in [{lo}, {hi}] ({why})"


def _two_valued_with_zero(s: torch.Tensor) -> bool:
    values = torch.unique(s)
    return values.numel() == 2 and bool((values == 0).any())


def build_input_sets(ep: ExportedProgram, sample_args: tuple, sample_kwargs: dict, *,
                     inputs: list | None = None, num_random_inputs: int = 2, seed: int = 0) -> list[InputSet]:
    """The sample, then the given input sets, then ``num_random_inputs`` random ones.

    Args:
        ep: the captured program (tells which integer inputs index a dim).
        sample_args: the sample positional inputs.
        sample_kwargs: the sample keyword inputs.
        inputs: more input sets, each a tuple of positional inputs or an
            ``(args, kwargs)`` pair whose args is a tuple.
        num_random_inputs: how many seeded random sets to add.
        seed: the seed of the random sets.

    Returns:
        The input sets, numbered from 0.
    """
    sets = [InputSet(0, "sample", tuple(sample_args), dict(sample_kwargs))]
    for given in inputs or []:
        args, kwargs = _split(given)
        sets.append(InputSet(len(sets), "given", args, kwargs))
    bounds = index_bounds(ep)
    structural = structural_inputs(ep)
    names = tensor_input_names(ep)
    leaves, spec = torch.utils._pytree.tree_flatten((tuple(sample_args), dict(sample_kwargs)))
    generator = torch.Generator().manual_seed(seed)
    dims, hints = _dynamic_dims(ep, names, structural, [x for x in leaves if isinstance(x, torch.Tensor)])
    for _ in range(num_random_inputs):
        sizes = _other_sizes(ep, hints, generator)
        new, notes, t = [], [], 0
        for leaf in leaves:
            if isinstance(leaf, torch.Tensor):
                name = names[t] if t < len(names) else f"input_{t}"
                shape = tuple(n if d is None else d[1] * sizes[d[0]] + d[2]
                              for d, n in zip(dims.get(name, ()), leaf.shape)) or None
                if name in structural:
                    x, note = leaf.clone(), f"sample reused: {structural[name]}"
                else:
                    x, note = random_like(leaf, generator, bounds.get(name), shape)
                new.append(x)
                notes.append(f"{name}: {note}" + (f", shape {list(x.shape)}" if x.shape != leaf.shape else ""))
                t += 1
            else:
                new.append(leaf)
        args, kwargs = torch.utils._pytree.tree_unflatten(new, spec)
        sets.append(InputSet(len(sets), "random", tuple(args), dict(kwargs), tuple(notes)))
    return sets


def _dynamic_dims(ep: ExportedProgram, names: list[str], structural: dict,
                  samples: list) -> tuple[dict[str, tuple], dict[str, int]]:
    """``({input name: (each dim's ``(symbol, scale, offset)``: the dim is ``scale * symbol + offset``, or None)},
    {symbol: its sample value})`` for the inputs a random set may resize; both empty when none may (no dynamic dim,
    a dim that is no multiple of one symbol plus a constant, or a reused input of a dynamic size)."""
    dims, hints = {}, {}
    for name, sample in zip(names, samples):
        syms = []
        for d in getattr(_placeholder_val(ep, name), "shape", ()):
            expr = d.node.expr if isinstance(d, torch.SymInt) else None
            link = None if expr is None else parsed_dim(str(expr))
            if expr is not None and (link is None or d.node.hint is None):
                return {}, {}  # (batch * length, or a size only known at run time: the sizes of a set are not free)
            syms.append(link)
            if link is not None:
                hints.setdefault(link[0], (int(d.node.hint) - link[2]) // link[1])
        if any(syms):
            if name in structural or _reused(sample) is not None:
                return {}, {}
            dims[name] = tuple(syms)
    return dims, hints


def _other_sizes(ep: ExportedProgram, hints: dict[str, int], generator: torch.Generator) -> dict[str, int]:
    """A size for each dynamic symbol (``hints``: its sample size): another than the sample's where its range
    allows (module docstring), drawn from ``generator``."""
    ranges = {str(s): r for s, r in (ep.range_constraints or {}).items()}
    out = {}
    for sym, sample in sorted(hints.items()):
        r = ranges.get(sym)
        lo, hi = (finite_bound(r.lower), finite_bound(r.upper)) if r is not None else (None, None)
        lo, hi = max(2, lo or 0), 2 * sample + 1 if hi is None else min(hi, 2 * sample + 1)
        choices = [n for n in range(lo, hi + 1) if n != sample]
        out[sym] = choices[int(torch.randint(len(choices), (), generator=generator))] if choices else sample
    return out


def tensor_input_names(ep: ExportedProgram) -> list[str]:
    """Placeholder names of the user's tensor inputs, in the order targets take them."""
    return [s.arg.name for s in ep.graph_signature.input_specs
            if s.kind == InputKind.USER_INPUT and hasattr(s.arg, "name")
            and isinstance(_placeholder_val(ep, s.arg.name), torch.Tensor)]


def _split(given: Any) -> tuple[tuple, dict]:
    if isinstance(given, torch.Tensor):
        return (given,), {}
    if (isinstance(given, (tuple, list)) and len(given) == 2 and isinstance(given[0], (tuple, list))
            and isinstance(given[1], dict)):
        return tuple(given[0]), dict(given[1])
    return tuple(given), {}


def _placeholder_val(ep: ExportedProgram, name: str) -> Any:
    for n in ep.graph.nodes:
        if n.op == "placeholder" and n.name == name:
            return n.meta.get("val")
    return None
