"""Ops of a tpu tensor that make their result on another device they are given (``zeros_like(x, device="cpu")``):
:mod:`tpu_runtime.dispatch` routes a call naming a device other than tpu here, to PyTorch's own op there."""

from __future__ import annotations

from typing import Any

import torch

from tpu_runtime.tensor import TpuTensor
from tpu_runtime.values import to_cpu

#: Ops of a tensor input that make their result on the ``device=`` they are given (``zeros_like(x,
#: device="cpu")``, ``x.new_ones(3, device="cpu")``): for another device than tpu, PyTorch's own op there.
DEVICE_ARG_OPS = frozenset({
    "empty_like", "zeros_like", "ones_like", "full_like", "rand_like", "randn_like", "randint_like", "new_empty",
    "new_empty_strided", "new_zeros", "new_ones", "new_full", "linspace", "logspace",
})
#: Those of :data:`DEVICE_ARG_OPS` whose tensor inputs are values, not a template of the result.
READ_DEVICE_ARG_OPS = frozenset({"linspace", "logspace"})


def on_other_device(func: Any, args: tuple, kwargs: dict) -> Any:
    """``func`` on the CPU (or the other device named): a ``*_like``/``new_*`` op's first tensor is only its
    template (shape, dtype), so a CPU one stands in for it; other tpu tensors (a ``high`` bound, ``linspace``'s
    ends) are read."""
    template = func._schema.name.split("::", 1)[1] not in READ_DEVICE_ARG_OPS

    def host(i: int, a: Any) -> Any:
        if not isinstance(a, TpuTensor):
            return a
        if i == 0 and template:
            return torch.empty(a._spec[0], dtype=a._spec[1])
        return to_cpu(a)

    return func(*[host(i, a) for i, a in enumerate(args)], **{k: host(-1, v) for k, v in kwargs.items()})


__all__ = ["DEVICE_ARG_OPS", "READ_DEVICE_ARG_OPS", "on_other_device"]
