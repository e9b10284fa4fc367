"""Graph outputs of ``torch.compile(backend="tpu")`` that are views of one intermediate.

``y = x * w; return y[0], y[1]`` returns two views of ``y``, an intermediate the caller
never sees. AOTAutograd keeps such outputs aliased for plain tensors (it returns ``y``
as an extra output and regenerates the views from it) but refuses them when the inputs
are tensor subclasses, as tpu tensors are ("ANY output aliasing ... is currently
unsupported"). :func:`split_shared_views` does what AOTAutograd does, around it: the graph
returns the intermediate instead of its views, and each call replays the views' ops
(``getitem``, ``view``, ``transpose``…) on it in eager mode, so the outputs share its
storage as on the CPU: a write through one is seen through the others and by autograd.

A view whose ops take a value computed in the graph (a size read from a traced tensor)
cannot be replayed outside it: that output is a copy (it no longer aliases the others).
Outputs that view an input, or an intermediate that is itself returned, AOTAutograd
handles for every tensor type; they are left alone, except those AOTAutograd would make wrongly (:func:`resolve_outputs`).
"""

from __future__ import annotations

import collections
from typing import Any, Callable

import torch
from torch.fx import Node
from torch.utils._python_dispatch import is_traceable_wrapper_subclass
from torch.utils._pytree import tree_leaves


def _storage_of(node: Any) -> Any:
    val = node.meta.get("example_value") if isinstance(node, Node) else None
    return val.untyped_storage()._cdata if isinstance(val, torch.Tensor) else None


def _view_chain(node: Node) -> tuple[Node, list[Node]]:
    """The node that made ``node``'s storage and the view ops from it to ``node``, in order."""
    storage, chain = _storage_of(node), []
    while node.op in ("call_function", "call_method") and node.args and isinstance(node.args[0], Node) \
            and _storage_of(node.args[0]) == storage:
        chain.append(node)
        node = node.args[0]
    return node, chain[::-1]


def _replayable(chain: list[Node]) -> bool:
    """Whether every op of ``chain`` takes only constants besides the viewed tensor."""
    return all(not any(isinstance(a, Node) for a in tree_leaves((n.args[1:], n.kwargs))) for n in chain)


def _replay(root: torch.Tensor, chain: list[Node]) -> torch.Tensor:
    """``chain``'s view ops run eagerly on ``root``."""
    t = root
    for n in chain:
        t = getattr(t, n.target)(*n.args[1:], **n.kwargs) if n.op == "call_method" else \
            n.target(t, *n.args[1:], **n.kwargs)
    return t


def split_shared_views(gm: torch.fx.GraphModule, example_inputs: list) -> Callable[[Callable], Callable] | None:
    """Rewrite ``gm`` so that outputs viewing one unreturned intermediate come back as views of it.

    Returns ``wrap(compiled)``, which makes the compiled graph's callable give the original
    outputs (the views replayed on the returned intermediates), or ``None`` when ``gm`` was
    left as it was (no such outputs, or no tensor-subclass inputs: AOTAutograd handles them)."""
    if not any(is_traceable_wrapper_subclass(t) for t in example_inputs if isinstance(t, torch.Tensor)):
        return None
    out = next(n for n in gm.graph.nodes if n.op == "output")
    inputs = {_storage_of(n) for n in gm.graph.nodes if n.op == "placeholder"}
    leaves = [n for n in tree_leaves(out.args) if isinstance(n, Node)]
    counts = collections.Counter(_storage_of(n) for n in leaves)  # an output returned twice counts twice
    shared = {n for n in leaves if counts[_storage_of(n)] > 1 and _storage_of(n) not in inputs | {None}}
    if not shared:
        return None
    flat = len(out.args) == 1 and type(out.args[0]) in (tuple, list)
    views, copies = {}, {}
    for n in shared:
        root, chain = _view_chain(n)
        if root in leaves:  # a view of an output: AOTAutograd's own case
            continue
        if flat and _replayable(chain):
            views[n] = (root, chain)
        else:
            copies[n] = None
    with gm.graph.inserting_before(out):
        for n in copies:
            copies[n] = gm.graph.call_function(torch.clone, (n,))
    outputs = out.args[0] if flat else out.args
    outputs = torch.utils._pytree.tree_map(lambda a: copies.get(a, a) if isinstance(a, Node) else a, outputs)
    if not views:
        out.args = (outputs,) if flat else outputs
        gm.recompile()
        return None
    roots = list(dict.fromkeys(root for root, _ in views.values()))
    kept = [a for a in outputs if a not in views]
    plan = [("out", kept.index(a)) if a not in views else ("view", roots.index(views[a][0]), views[a][1])
            for a in outputs]
    out.args = (type(out.args[0])(kept + roots),)
    gm.recompile()
    n_kept = len(kept)

    def wrap(compiled: Callable) -> Callable:
        def run(*args: Any) -> Any:
            got = compiled(*args)
            results = [got[p[1]] if p[0] == "out" else _replay(got[n_kept + p[1]], p[2]) for p in plan]
            return type(got)(results) if type(got) in (tuple, list) else results

        run.__dict__.update(getattr(compiled, "__dict__", {}))
        return run

    return wrap


def resolve_outputs(gm: torch.fx.GraphModule) -> None:
    """Return copies of the outputs that AOTAutograd would make wrongly from the inputs they view.

    AOTAutograd makes an output that views an input again from the input at each call, by ``as_strided`` of the
    layout it reports where the view has no ``_base`` (tensor subclasses). That drops a lazy conjugate or
    negation (a compiled ``x.conj()`` returned ``x``), and a view through ``view_as_real`` (``.real``, ``.imag``)
    reports dense strides, not its place in the input (a compiled ``x[:, 1:].imag`` returned other elements).
    Such outputs come back resolved and copied. Deviation: the CPU returns views of the input (a write through one
    reaches it)."""
    from torch.fx.experimental.symbolic_shapes import statically_known_true

    out = next(n for n in gm.graph.nodes if n.op == "output")
    inputs = {_storage_of(n): n.meta["example_value"].dtype for n in gm.graph.nodes
              if n.op == "placeholder" and _storage_of(n) is not None}
    copied = {}
    for n in out.all_input_nodes:
        val = n.meta.get("example_value")
        if not isinstance(val, torch.Tensor) or _storage_of(n) not in inputs:
            continue
        fake = getattr(val, "_fake", None)  # (a view of another dtype: its layout may not be the one reported)
        misplaced = fake is not None and val.dtype != inputs[_storage_of(n)] and any(
            statically_known_true(a != b) for a, b in zip((*val.stride(), val.storage_offset()),
                                                         (*fake.stride(), fake.storage_offset())))
        if val.is_conj() or val.is_neg() or misplaced:
            with gm.graph.inserting_before(out):
                resolved = gm.graph.call_method("resolve_neg", (gm.graph.call_method("resolve_conj", (n,)),))
                copied[n] = gm.graph.call_function(torch.clone, (resolved,))
    if copied:
        out.args = torch.utils._pytree.tree_map(lambda a: copied.get(a, a) if isinstance(a, Node) else a, out.args)
        gm.recompile()
