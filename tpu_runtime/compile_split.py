"""Custom ops that run eagerly between compiled pieces of one ``torch.compile`` graph.

The dynamo backend traces a custom op (``torch.library.custom_op``) through its Python implementation, as
eager mode runs it. An implementation that writes into its own buffers (``F.linear_cross_entropy``'s chunked
op accumulates its gradients with ``sub_``/``add_``) cannot be traced that way: the implementation runs below
AOTAutograd's functionalization, which then finds in-place ops in its graph. Such a graph is split at each
call of those ops (:func:`split_at_ops`): the pieces between them are compiled as any graph is (the first
time they run, once per input signature), and each custom op runs eagerly on the device in between, with its
registered autograd formula, as inductor runs an op it cannot trace.
"""

from __future__ import annotations

import operator
from typing import Any, Callable

import torch
from torch.fx.passes.split_module import split_module


def split_at_ops(gm: torch.fx.GraphModule, ops: list, compile_piece: Callable) -> torch.fx.GraphModule:
    """``gm`` as pieces: each call of one of ``ops`` (with the ``getitem`` nodes reading its results) in a piece of
    its own that calls it eagerly, every other piece compiled by ``compile_piece(piece, args)`` when it first runs
    (``args``: the piece's inputs, real tensors) and again for each new input signature."""
    targets = set(ops)
    piece, ids = [0], {}

    def which(node: torch.fx.Node) -> int:
        if node.op == "call_function" and node.target in targets:
            piece[0] += 1
            ids[node] = piece[0]
            piece[0] += 1
            return ids[node]
        if node.op == "call_function" and node.target is operator.getitem and node.args[0] in ids:
            return ids[node.args[0]]
        return piece[0]

    split = split_module(gm, None, which, keep_original_order=True)
    for name, child in list(split.named_children()):
        calls = {n.target for n in child.graph.nodes if n.op == "call_function"}
        if not calls & targets:
            setattr(split, name, _Compiled(child, compile_piece))
    return split


class _Compiled(torch.nn.Module):
    """A piece of a split graph, compiled when it first runs with each input signature."""

    def __init__(self, piece: torch.fx.GraphModule, compile_piece: Callable) -> None:
        super().__init__()
        output = next(n for n in piece.graph.nodes if n.op == "output")
        self.single = not isinstance(output.args[0], (tuple, list))
        if self.single:  # (AOTAutograd takes a graph of tuple outputs)
            output.args = ((output.args[0],),)
            piece.recompile()
        self.piece, self.compile_piece = piece, compile_piece
        self.compiled: dict = {}

    def forward(self, *args: Any) -> Any:
        """Run the compiled piece on ``args`` (compiling it for their signature first)."""
        key = (torch.is_grad_enabled(),) + tuple(
            (tuple(a.shape), a.dtype, a.device, a.requires_grad) if isinstance(a, torch.Tensor) else a for a in args)
        fn = self.compiled.get(key)
        if fn is None:
            fn = self.compiled[key] = self.compile_piece(self.piece, list(args))
        out = fn(*args)
        return out[0] if self.single else tuple(out)


__all__ = ["split_at_ops"]
