"""Fold eval-mode BatchNorm into the convolution or linear layer before it (inference only)."""

from __future__ import annotations

import operator

import torch
from torch.export import ExportedProgram

from converter.passes.base import Pass
from converter.passes.program import ProgramEditor

aten = torch.ops.aten

_BATCH_NORM = aten._native_batch_norm_legit_no_training.default
_PRODUCERS = (aten.convolution.default, aten.linear.default)


def fold_into_weights(weight: torch.Tensor, bias: torch.Tensor | None, scale: torch.Tensor, shift: torch.Tensor,
                      *, transposed: bool = False, groups: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(W', b')`` with ``layer'(x) == layer(x) * scale + shift`` per output channel.

    Args:
        weight: ``[out, in/groups, *k]`` (conv), ``[out, in]`` (linear) or, when
            ``transposed``, ``[in, out/groups, *k]`` (transposed conv).
        bias: the layer's bias or None.
        scale: ``gamma / sqrt(var + eps)``, one value per output channel.
        shift: ``beta - mean * scale``, one value per output channel.
        transposed: the weight is a transposed convolution's.
        groups: convolution groups.

    Returns:
        The folded weight and bias, in the weight's dtype (computed in float64).
    """
    w = weight.detach().to(torch.float64)
    s = scale.to(torch.float64)
    if transposed:
        cin, cout_g, *k = w.shape
        w = (w.reshape(groups, cin // groups, cout_g, *k)
             * s.reshape(groups, 1, cout_g, *([1] * len(k)))).reshape(weight.shape)
    else:
        w = w * s.reshape(-1, *([1] * (w.dim() - 1)))
    b = torch.zeros_like(s) if bias is None else bias.detach().to(torch.float64)
    b = b * s + shift.to(torch.float64)
    return w.to(weight.dtype), b.to(weight.dtype if bias is None else bias.dtype)


class FoldBatchNormPass(Pass):
    """Fold ``_native_batch_norm_legit_no_training`` into the layer that feeds it.

    Handles ``aten.convolution`` (1d/2d/3d, grouped, transposed) and
    ``aten.linear`` with a 2-D output (BatchNorm1d after Linear) whose only user
    is the BatchNorm, when the layer's weight and bias and the BatchNorm's
    affine parameters and running statistics are all constants (parameters or
    buffers the program does not mutate). The layer node keeps its
    ``node.meta`` (source location, ``val``); its weight and bias become new
    constants and the BatchNorm's output is replaced by the layer's.

    Not handled: training-mode BatchNorm (``_native_batch_norm_legit_functional``),
    a layer output that is also used elsewhere, BatchNorm whose mean/invstd
    outputs are used, a BatchNorm that changes dtype, and patterns with ops in
    between (e.g. Linear → permute → BatchNorm1d).
    """

    inference_only = True

    def call(self, ep: ExportedProgram) -> tuple[ExportedProgram, bool]:
        """Return the program with every foldable BatchNorm folded."""
        editor = ProgramEditor(ep)
        folded = []
        for bn in list(editor.graph.nodes):
            if bn.op == "call_function" and bn.target is _BATCH_NORM and self._fold(editor, bn):
                folded.extend(bn.users)  # its getitems; erasing them frees the BatchNorm itself
        if not folded:
            return ep, False
        editor.erase_dead(folded)
        return editor.build(), True

    def _fold(self, editor: ProgramEditor, bn: torch.fx.Node) -> bool:
        args = torch.fx.operator_schemas.normalize_function(
            bn.target, bn.args, bn.kwargs, normalize_to_only_use_kwargs=True).kwargs
        layer = args["input"]
        if not (isinstance(layer, torch.fx.Node) and layer.op == "call_function"
                and layer.target in _PRODUCERS and len(layer.users) == 1):
            return False
        outputs = list(bn.users)
        if not all(u.target is operator.getitem and (u.args[1] == 0 or not u.users) for u in outputs):
            return False
        layer_val, bn_val = layer.meta.get("val"), next(
            (u.meta.get("val") for u in outputs if u.args[1] == 0), None)
        if not isinstance(layer_val, torch.Tensor) or (
                isinstance(bn_val, torch.Tensor) and bn_val.dtype != layer_val.dtype):
            return False
        stats = {k: self._constant(editor, args[k]) for k in ("weight", "bias", "running_mean", "running_var")}
        if stats["running_mean"] is None or stats["running_var"] is None:
            return False
        if (args["weight"] is not None and stats["weight"] is None) or (
                args["bias"] is not None and stats["bias"] is None):
            return False

        if layer.target is aten.linear.default and layer_val.dim() != 2:
            return False  # BatchNorm1d normalises dim 1: the linear's features only for 2-D outputs
        bound = torch.fx.operator_schemas.normalize_function(
            layer.target, layer.args, layer.kwargs, normalize_to_only_use_kwargs=True).kwargs
        w_node, b_node = bound["weight"], bound.get("bias")
        transposed, groups = bool(bound.get("transposed", False)), int(bound.get("groups", 1))
        weight = self._constant(editor, w_node)
        bias = self._constant(editor, b_node) if b_node is not None else None
        if weight is None or (b_node is not None and bias is None):
            return False
        channels = weight.shape[1] * groups if transposed else weight.shape[0]
        mean, var = stats["running_mean"], stats["running_var"]
        if mean.numel() != channels or layer_val.shape[1] != channels:
            return False

        eps = float(args["eps"])
        gamma = stats["weight"] if stats["weight"] is not None else torch.ones_like(var)
        beta = stats["bias"] if stats["bias"] is not None else torch.zeros_like(mean)
        scale = gamma.to(torch.float64) / torch.sqrt(var.to(torch.float64) + eps)
        shift = beta.to(torch.float64) - mean.to(torch.float64) * scale
        new_w, new_b = fold_into_weights(weight, bias, scale, shift, transposed=transposed, groups=groups)

        w_ph = editor.add_constant(new_w, f"{layer.name}_weight", like=layer)
        b_ph = editor.add_constant(new_b, f"{layer.name}_bias", like=layer)
        bound.update(weight=w_ph, bias=b_ph)
        layer.args = tuple(bound[a.name] for a in layer.target._schema.arguments)  # all set: normalised
        layer.kwargs = {}
        for out in outputs:
            if out.args[1] == 0:
                out.replace_all_uses_with(layer)
        return True

    @staticmethod
    def _constant(editor: ProgramEditor, node: object) -> torch.Tensor | None:
        return editor.constant_value(node) if isinstance(node, torch.fx.Node) else None
