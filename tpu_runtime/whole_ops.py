"""``F.linear`` and ``torch.matmul`` on tpu tensors: one op forward and one op backward each; ``silu_backward`` and
``mish_backward`` as one op (:func:`_activation_backward`).

Both are CompositeImplicitAutograd ops: on any device torch decomposes them above the backend, ``linear`` of a
3-D input into ``view``, ``t``, ``addmm``, ``view`` and its backward into each piece's formula (``t``, ``mm``,
``t``, ``mm``, ``sum``, ``view``, ``t``), a batched ``matmul`` into ``expand``, ``reshape`` (a copy for a
transposed operand), ``bmm`` and ``_unsafe_view`` and as many pieces backward: a dozen runtime dispatches and
four autograd nodes per call. :func:`linear` and :func:`matmul` take the call at the AutogradPrivateUse1 key
instead (as torch_xla takes ops its compiler runs better whole): the forward runs the op itself below the
autograd keys (``linear``: its lowering-table row; ``matmul``: a runtime kernel built from the ``bmm``/``mm``
rows) and the backward torch's ``linear_backward`` / ``matmul_backward`` op (runtime kernels: ``jax.vjp`` of the
forward), one autograd node between them.

torch's composite runs as before for calls the one-op path does not take: operands that are not all tpu
tensors of one floating dtype, shapes outside those listed at :func:`_linear_taken` / :func:`_matmul_taken`
(mismatched sizes get torch's own error), forward-mode AD or functorch transforms, and while ``torch.compile``
traces (fake tensors). A second-order gradient (``create_graph=True``) runs the backward as differentiable ops.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Callable, Iterator

import torch

from tpu_runtime import attention
from tpu_runtime.tensor import TpuTensor

aten = torch.ops.aten
_BELOW_AUTOGRAD = torch._C._AutoDispatchBelowAutograd
_GRAD_ENABLED = torch.is_grad_enabled


def _node(name: str, forward_op: Any, backward: Callable, differentiable: Callable) -> type:
    """An autograd Function running ``forward_op(a, b, ...)`` below the autograd keys and ``backward(grad, a, b,
    mask)`` for its gradients. As torch's formulas, it saves ``a`` only when ``b`` needs a gradient and ``b``
    only when ``a`` does (a frozen weight keeps no activation alive, and the input may then be written in
    place); with one left out, or under ``create_graph=True``, ``differentiable(grad, a, b, mask, shapes)``
    makes the gradients from ordinary ops."""

    def forward(ctx: Any, a: Any, b: Any, *rest: Any) -> Any:
        needs = ctx.needs_input_grad
        ctx.save_for_backward(a if needs[1] else None, b if needs[0] else None)
        ctx.shapes = (a.shape, b.shape)
        with _BELOW_AUTOGRAD():
            return forward_op(a, b, *rest)

    def run_backward(ctx: Any, grad: Any) -> tuple:
        a, b = ctx.saved_tensors
        mask = ctx.needs_input_grad
        if _GRAD_ENABLED() or a is None or b is None:
            return differentiable(grad, a, b, mask, ctx.shapes)
        return backward(grad, a, b, mask)

    node = type(name, (torch.autograd.Function,), {"forward": staticmethod(forward),
                                                   "backward": staticmethod(run_backward)})
    # ``Function.apply`` without its Python layer (default-argument binding for ``setup_context``, which the node
    # does not define, and the unwrapping of functorch wrappers, which the one-op path never takes: see
    # _untransformed): the C++ apply it ends in, ~2 µs less per call
    node.run = _C_APPLY.__get__(None, node)
    return node


_C_APPLY = torch._C._FunctionBase.__dict__["apply"]


def _tpu(*tensors: Any) -> bool:
    """All of ``tensors`` are real (not traced) tpu tensors of one floating dtype."""
    dtype = tensors[0].dtype
    if not dtype.is_floating_point:
        return False
    for t in tensors:  # (a loop, not all() of a generator: twice per linear or matmul)
        if not isinstance(t, TpuTensor) or t._fake is not None or t._spec[1] is not dtype or t.is_nested:
            return False
    return True


def _untransformed() -> bool:
    """Neither forward-mode AD nor a functorch transform is active (the one-op node has no rules for them), nor
    :func:`decomposed`."""
    return (_WHOLE[0] and torch.autograd.forward_ad._current_level < 0
            and not torch._C._are_functorch_transforms_active())


_WHOLE = [True]


@contextlib.contextmanager
def decomposed() -> Iterator[None]:
    """Within: ``linear`` and ``matmul`` with autograd take torch's composite (its pieces and their formulas), as
    without this module: what ``benchmarks/bench_eager.py`` compares the one-op path with."""
    before, _WHOLE[0] = _WHOLE[0], False
    try:
        yield
    finally:
        _WHOLE[0] = before


def _run(node: type, op: Any, tensors: tuple, args: tuple) -> Any:
    """``op(*args)`` below the autograd keys, through ``node`` when a gradient is wanted."""
    if _GRAD_ENABLED():
        for t in tensors:
            if t.requires_grad:
                return node.run(*args)
    with _BELOW_AUTOGRAD():
        return op(*args)


# ------------------------------------------------------------------------------------------------- linear

def linear_grads(grad: Any, input: Any, weight: Any, mask: tuple, shapes: tuple = ()) -> tuple:
    """``linear``'s gradients (``None`` where ``mask`` leaves one out) as ordinary ops: recorded by autograd on
    tpu tensors (a second-order gradient); debug eager's CPU reference of ``linear_backward``."""
    flat = grad.reshape(math.prod(grad.shape[:-1]), grad.size(-1))  # (explicit: a -1 fails beside an empty dim)
    return (grad.matmul(weight) if mask[0] else None,
            flat.t().mm(input.reshape(flat.size(0), input.size(-1))) if mask[1] else None,
            flat.sum(0) if mask[2] else None)


_Linear = _node("_Linear", aten.linear.default,
                lambda grad, input, weight, mask: tuple(aten.linear_backward.default(input, grad, weight, list(mask))),
                linear_grads)


def _linear_taken(tensors: tuple, input: Any, weight: Any, bias: Any) -> bool:
    """The one-op path takes ``linear`` of an input of any rank ≥ 1, a 2-D weight and no bias or a 1-D one
    (``tensors``: those of them given)."""
    if not _tpu(*tensors):
        return False
    w, x = weight._spec[0], input._spec[0]  # (their shapes, read without a call into torch)
    return (len(w) == 2 and len(x) >= 1 and x[-1] == w[1] and (bias is None or tuple(bias._spec[0]) == (w[0],))
            and _untransformed())


def linear(input: Any, weight: Any, bias: Any = None) -> Any:
    """``aten::linear`` for tpu tensors (registered at the AutogradPrivateUse1 key, above torch's composite):
    one op forward, one op backward where :func:`_linear_taken`, else torch's composite."""
    tensors = (input, weight) if bias is None else (input, weight, bias)
    if not _linear_taken(tensors, input, weight, bias):
        return aten.linear.default.decompose(input, weight, bias)
    return _run(_Linear, aten.linear.default, tensors, (input, weight, bias))


# ------------------------------------------------------------------------------------------------- matmul

def matmul_grads(grad: Any, a: Any, b: Any, mask: tuple, shapes: tuple = ()) -> tuple:
    """``matmul``'s gradients (``None`` where ``mask`` leaves one out) as ordinary ops, summed over broadcast
    batch dimensions: recorded by autograd on tpu tensors (a second-order gradient); debug eager's CPU
    reference of ``matmul_backward``."""
    a_shape, b_shape = shapes or (a.shape, b.shape)
    return (grad.matmul(b.mT).sum_to_size(a_shape) if mask[0] else None,
            a.mT.matmul(grad).sum_to_size(b_shape) if mask[1] else None)


_Matmul = _node("_Matmul", aten.matmul.default,
                lambda grad, a, b, mask: tuple(aten.matmul_backward.default(grad, a, b, list(mask))),
                matmul_grads)


def _matmul_taken(a: Any, b: Any) -> bool:
    """The one-op path takes ``matmul`` of matrices or batches of them whose batch dimensions broadcast (vector
    operands take torch's composite: its ``mv`` / ``dot`` pieces are one op each already); batch dimensions that do
    not broadcast are refused here (:func:`_check_batches`)."""
    if not _tpu(a, b):
        return False
    x, y = a._spec[0], b._spec[0]  # (their shapes, read without a call into torch)
    if not (len(x) >= 2 and len(y) >= 2 and x[-1] == y[-2]):
        return False
    if tuple(x[:-2]) != tuple(y[:-2]):
        _check_batches(x[:-2], y[:-2])
    return _untransformed()


def _check_batches(x: tuple, y: tuple) -> None:
    """Refuse batch dimensions ``x`` and ``y`` that do not broadcast, with the CPU's message (torch's composite on
    this device words it as ``torch._refs`` does); checked here, not with ``torch.broadcast_shapes`` (~10 µs a call).

    Raises:
        RuntimeError: torch's ``infer_size`` message.
    """
    n = max(len(x), len(y))
    x, y = (1,) * (n - len(x)) + tuple(x), (1,) * (n - len(y)) + tuple(y)
    for i in range(n - 1, -1, -1):  # (as infer_size: from the last dimension, numbered in the broadcast shape)
        if x[i] != y[i] and x[i] != 1 and y[i] != 1:
            raise RuntimeError(f"The size of tensor a ({x[i]}) must match the size of tensor b ({y[i]}) at "
                               f"non-singleton dimension {i}")


def matmul(a: Any, b: Any) -> Any:
    """``aten::matmul`` for tpu tensors (registered at the AutogradPrivateUse1 key, above torch's composite):
    one op forward, one op backward where :func:`_matmul_taken`, else torch's composite."""
    if not _matmul_taken(a, b):
        if not (a.dim() and b.dim()):  # (torch's decomposition asserts it: the CPU's message and type)
            raise RuntimeError(f"both arguments to matmul need to be at least 1D, but they are {a.dim()}D and "
                               f"{b.dim()}D")
        return aten.matmul.default.decompose(a, b)
    return _run(_Matmul, aten.matmul.default, (a, b), (a, b))


# ----------------------------------------------------------------------- activations' backward ops

def _activation_backward(op: Any) -> Callable:
    """The AutogradPrivateUse1 kernel of ``op`` (``silu_backward``, ``mish_backward``): torch has a CPU kernel
    for it, computing float16/bfloat16 in float32 and rounding once, and for every other device a composite of
    ~6 ops (each rounded to the half type: bfloat16 gradients a unit or two off). On tpu tensors it runs as the one
    op below the autograd keys (the runtime traces ``torch._decomp``'s decomposition, in float32 for half types,
    into one plan); on other tensors (torch.compile's tracing, where the engine calls the op, mixed dtypes) that
    decomposition itself; with a gradient of its own wanted (a user's direct call), torch's composite."""

    def kernel(grad_output: Any, self: Any) -> Any:
        if (_GRAD_ENABLED() and (grad_output.requires_grad or self.requires_grad)) or not _untransformed():
            return op.decompose(grad_output, self)
        if not _tpu(grad_output, self):
            return _OPMATH[op](grad_output, self)
        with _BELOW_AUTOGRAD():
            return op(grad_output, self)

    return kernel


#: ``torch._decomp``'s decompositions of the activations' backward ops: half types computed in float32.
_OPMATH = {op: torch._decomp.decomposition_table[op] for op in (aten.silu_backward.default, aten.mish_backward.default)}

#: The ops this module takes at the AutogradPrivateUse1 key.
AUTOGRAD_KERNELS = {"linear": linear, "matmul": matmul,
                    **{name: _activation_backward(getattr(aten, name).default)
                       for name in ("silu_backward", "mish_backward")}}

#: PyTorch CPU references of the runtime's ops that have no CPU kernel in torch (debug eager compares with them):
#: the gradient formulas in plain ops, and the fused attention ops'.
CPU_REFERENCES = {
    aten.linear_backward.default: lambda input, grad, weight, mask: linear_grads(grad, input, weight, mask),
    aten.matmul_backward.default: lambda grad, a, b, mask: matmul_grads(grad, a, b, mask),
    **attention.CPU_REFERENCES,
}

__all__ = ["AUTOGRAD_KERNELS", "CPU_REFERENCES", "decomposed", "linear", "linear_grads", "matmul", "matmul_grads"]
