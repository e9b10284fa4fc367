"""``torch.cond``, ``scan`` and ``map`` on tpu tensors in eager (and in dynamo's tracing of them).

PyTorch runs these higher-order ops in eager by compiling a wrapper around the op with dynamo
(``backend="eager"``) and calling the graph it traced. Both halves met torch kernels that
assume plain tensors:

* while dynamo traces, the op runs on fake tensors; a tpu tensor's fake is a tracing
  :class:`~tpu_runtime.tensor.TpuTensor` around a ``FakeTensor``, and torch's fake rule for
  ``cond`` accepts only plain ``FakeTensor`` outputs ("expected both a and b to be FakeTensor");
  ``scan`` and ``map`` failed the same way;
* when the traced graph runs, the op reaches the tpu tensors' Python key, where torch has no
  rule for the tpu class.

Each op gets two kernels, registered through the op's own ``py_impl`` (nothing patched):

* on the ``AutogradPrivateUse1`` key (dispatched first, for any tpu-device tensor):

  - on concrete tpu tensors it runs torch's dense kernel (``CompositeExplicitAutograd``: the
    chosen branch, the loop over the scanned dim) with autograd recording the ops it makes, so
    gradients flow as through any eager code. ``cond`` reads its predicate: a sync point in
    fused eager, as any data-dependent control flow is;
  - on dynamo's tracing tensors (their fakes are ``FakeTensor``: dynamo only propagates
    metadata) it runs the op on the fakes, marked as requiring grad where the tracing tensor
    does, and wraps the results as tracing tensors;
  - otherwise (AOTAutograd's tracing of ``torch.compile(backend="tpu")``, plain fakes) it hands
    the call to torch's own autograd kernel, which records the op's backward and runs the op
    below autograd, where the second kernel takes tracing tensors (a plain fake of the device
    beside them, a tensor the traced code made, is wrapped as one first);

* for the tpu class on the ``Python`` key (below autograd): the op on the tracing tensors'
  fakes (AOTAutograd's functional tensors), wrapped as tracing tensors again.

``torch._higher_order_ops.while_loop`` is not covered: dynamo's own tracing of it refuses
wrapper subclasses before any kernel runs ("get_tensor_storages does not support traceable
wrapper subclasses").
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._C import DispatchKey
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._pytree import tree_leaves, tree_map

from tpu_runtime.compile_tensors import tracing_tensor
from tpu_runtime.tensor import DEVICE, TpuTensor


def _traced(x: Any) -> Any:
    return tracing_tensor(x) if isinstance(x, torch.Tensor) and x.device == DEVICE else x


def _joined(x: Any) -> Any:
    """``x``, or when it is a plain tensor of the tpu device that needs no gradient, a tracing tensor around it."""
    if isinstance(x, torch.Tensor) and type(x) is not TpuTensor and x.device == DEVICE and not x.requires_grad:
        return tracing_tensor(x)
    return x


def _on_fakes(op: Any, args: tuple, kwargs: dict, grad: bool = False) -> Any:
    """``op`` run on the fakes of the tracing tensors in ``args``/``kwargs``, its results wrapped as tracing
    tensors; ``grad``: each fake is marked as requiring grad where its tracing tensor does."""

    def fake(x: Any) -> Any:
        if type(x) is not TpuTensor:
            return x
        if grad and x.requires_grad and not x._fake.requires_grad:
            return x._fake.detach().requires_grad_()
        return x._fake

    return tree_map(_traced, op(*tree_map(fake, args), **tree_map(fake, kwargs)))


def _kernels(op: Any) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The ``AutogradPrivateUse1`` kernel and the tpu class's ``Python`` kernel of the higher-order op ``op``
    (see the module docstring)."""
    dense = op.py_kernels[DispatchKey.CompositeExplicitAutograd]
    autograd = op.py_kernels.get(DispatchKey.Autograd)

    def above_autograd(*args: Any, **kwargs: Any) -> Any:
        tpu = [x for x in tree_leaves((args, kwargs)) if type(x) is TpuTensor]
        traced = [x for x in tpu if x._fake is not None]
        if not traced:
            if tpu:
                return dense(*args, **kwargs)
        elif all(type(x._fake) is FakeTensor for x in traced):
            return _on_fakes(op, args, kwargs, grad=True)
        else:  # AOTAutograd's trace: a tensor made in the traced code (``torch.zeros(3, device=x.device)``) is a plain
            # fake of the device, beside the tracing tensors; it joins them (torch has no rule for that mix)
            args, kwargs = tree_map(_joined, (args, kwargs))
        if autograd is not None:
            return autograd(*args, **kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    def below_autograd(*args: Any, **kwargs: Any) -> Any:
        if any(type(x) is TpuTensor and x._fake is not None for x in tree_leaves((args, kwargs))):
            return _on_fakes(op, args, kwargs)
        return dense(*args, **kwargs)

    for kernel, where in ((above_autograd, "above"), (below_autograd, "below")):
        kernel.__doc__ = f"{op.name()} on tpu tensors, {where} autograd (see tpu_runtime.control_flow)."
    return above_autograd, below_autograd


def register() -> None:
    """Give ``cond``, ``scan`` and ``map`` their tpu kernels (once, from :func:`tpu_runtime.device.register`)."""
    from torch._higher_order_ops.cond import cond_op
    from torch._higher_order_ops.map import map_impl
    from torch._higher_order_ops.scan import scan_op

    for op in (cond_op, scan_op, map_impl):
        if DispatchKey.AutogradPrivateUse1 not in op.py_kernels:
            above, below = _kernels(op)
            op.py_impl(DispatchKey.AutogradPrivateUse1)(above)
            op.py_impl(TpuTensor)(below)
