"""Dynamo graphs rewritten before AOTAutograd traces them (:func:`rewrite`): torch functions whose traced form
computes something other than their eager kernel.

``F.multilabel_margin_loss``: torch registers its decomposition of ``multilabel_margin_loss_forward`` as the op's
Python kernel at the Autograd key, which runs wherever the Python dispatcher is on (while AOTAutograd traces), and
that decomposition counts the label slots after a row's first ``-1`` as targets of class 0: a compiled loss of
``-1``-padded targets differed from eager on any device (``inductor`` too). The call becomes
:func:`multilabel_margin_loss`, the CPU kernel's loss in ordinary differentiable ops (the lowering table's row for
the op, written in torch), for graphs of tpu and of CPU tensors alike. ``convert`` keeps the op whole
(``converter.capture.DECOMPOSITIONS``) and is not affected.

``Tensor.polygamma_(n)``: its schema takes ``self`` first where the functional ``polygamma(n, self)`` takes it last,
so functionalization does not pair the two and refused the in-place op as a custom operator with an aliased output
(``aot_eager`` and ``inductor`` fail the same way). The call becomes :func:`polygamma_`, the functional op and a
``copy_`` back, which functionalization takes as for any in-place op (through views too).

``torch.conv2d`` / ``conv3d`` / ``conv_transpose2d`` / ``conv_transpose3d``: the result is laid out channels-last
when the input or the weight is, as the CPU's kernels and eager (:func:`_laid_out_convolution`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from tpu_runtime.memory_format import convolution_format

_TARGET_RANGE = "argument #2 'target' is out of range"  # (the CPU kernel's message)


def multilabel_margin_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None,
                           reduction: str = "mean") -> Any:
    """``F.multilabel_margin_loss`` in ordinary ops: per sample ``Σ_j Σ_i max(0, 1 - x[y_j] + x[i]) / C`` over the
    target classes ``y_j`` (the row up to its first -1) and the classes ``i`` that are not targets, then reduced.
    As the CPU kernel, every target value must be in ``[-1, C)`` (raised after the run: an ``_assert_async``)."""
    if size_average is not None or reduce is not None:
        reduction = torch.nn._reduction.legacy_get_string(size_average, reduce)
    c = input.shape[-1] if input.dim() else 1
    x, t = input.reshape(-1, c), target.reshape(-1, c)
    torch._assert_async(((t >= -1) & (t < c)).all(), _TARGET_RANGE)
    valid = (t == -1).cumsum(1) == 0  # the slots before the first -1
    y = torch.where(valid, t, 0)
    classes = torch.arange(c, device=t.device)
    is_target = ((y.unsqueeze(2) == classes) & valid.unsqueeze(2)).any(1)  # [N, C]
    hinge = (1 - x.gather(1, y).unsqueeze(2) + x.unsqueeze(1)).clamp_min(0)  # [N, slot j, class i]
    hinge = torch.where(valid.unsqueeze(2) & ~is_target.unsqueeze(1), hinge, 0)
    per = hinge.sum((1, 2)) / c
    if reduction == "mean":
        return per.mean()
    if reduction == "sum":
        return per.sum()
    return per.reshape(input.shape[:-1] if input.dim() == 2 else ())


def polygamma_(self: Any, n: int) -> Any:
    """``Tensor.polygamma_(n)`` as ``self.copy_(torch.polygamma(n, self))`` (see the module docstring)."""
    return self.copy_(torch.polygamma(n, self))


def _laid_out_convolution(conv: Any) -> Any:
    """``conv`` whose result is laid out as the CPU lays it out (channels-last when its input or weight is), as in
    eager (:func:`tpu_runtime.memory_format.laid_out`): the fake kernel of a convolution on this device answers the
    contiguous format, so a compiled ``Conv2d`` of a channels-last input returned an NCHW-strided tensor (on which
    ``.view(n, -1)`` worked where the CPU's raises). A relayout only: the values are the same arrays."""

    def call(input: Any, weight: Any, *args: Any, **kwargs: Any) -> Any:
        out = conv(input, weight, *args, **kwargs)
        fmt = convolution_format(out.dim(), input, weight)
        return out if fmt is None else out.contiguous(memory_format=fmt)

    return call


#: Torch functions dynamo records → what the graph calls instead.
_REWRITES = {F.multilabel_margin_loss: multilabel_margin_loss,
             torch._C._nn.multilabel_margin_loss: multilabel_margin_loss, torch.Tensor.polygamma_: polygamma_,
             **{f: _laid_out_convolution(f) for f in (torch.conv2d, torch.conv3d, torch.conv_transpose2d,
                                                      torch.conv_transpose3d)}}

#: Tensor methods dynamo records (``call_method`` nodes, by name) → the function the graph calls instead.
_METHOD_REWRITES = {"polygamma_": polygamma_}


def rewrite(gm: torch.fx.GraphModule) -> None:
    """Point ``gm``'s calls of the functions of :data:`_REWRITES` and the methods of :data:`_METHOD_REWRITES` at
    their replacements (in place; each node keeps its metadata, so its checks are worded and located as before)."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in _REWRITES:
            node.target = _REWRITES[node.target]
            changed = True
        elif node.op == "call_method" and node.target in _METHOD_REWRITES:
            node.op, node.target = "call_function", _METHOD_REWRITES[node.target]
            changed = True
    if changed:
        gm.recompile()


__all__ = ["multilabel_margin_loss", "polygamma_", "rewrite"]
