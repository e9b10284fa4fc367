"""A second floor: the minGPT training step when device tensors are plain tensors with per-op Python kernels.

:mod:`benchmarks.subclass_floor` measures the least a ``__torch_dispatch__`` wrapper subclass runtime (``tpu_runtime``,
torchax) can cost per step. A Python runtime can also be built the other way: its tensors plain ``PrivateUse1``
tensors (``torch._C._acc.create_empty_tensor``: no data, no ``Python`` dispatch key) and its kernels Python functions
registered per op on the ``PrivateUse1`` key, with a boxed fallback for the rest. Each ATen call then skips the
``Python`` key's path (torch's ``find_torch_dispatch_rule`` lookup, the ``__torch_dispatch__`` call) and each output
is cheaper to make than a wrapper. This script runs both floors on the same step, alternating, in one process, and
prints ``time(subclass floor) / time(plain floor)``: how much of torch's per-step cost the plain design would save.

Both floors do the same nothing (outputs of the right shapes and dtypes from a per-signature cache, in-place calls
return their targets, ``.item()`` returns 0). The plain one registers a kernel for every ATen op the step calls (found
by running it once under a recording dispatch mode), so composite kernels do not split those ops into more calls.

It names ``PrivateUse1`` itself, so it runs alone, never in a process that imported ``tpu_runtime``::

    python benchmarks/plain_floor.py [--rounds 9] [--block 5] [--repeats 3]
"""

from __future__ import annotations

import argparse
import functools
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from benchmarks.subclass_floor import (_make, _on_meta, _spec, _written, floor_training_step,  # noqa: E402
                                       training_step)
from benchmarks.timing import alternating  # noqa: E402
from examples.models import MinGPT  # noqa: E402

aten = torch.ops.aten
#: The name this script gives PrivateUse1.
NAME = "plainfloor"
_META = torch.device("meta")
#: Call signature → how its outputs are made (as :data:`benchmarks.subclass_floor._OUTPUTS`).
_OUTPUTS: dict = {}
#: ops whose output is their second argument (the copy into a device tensor ``_to_copy`` ends in).
_INTO_SECOND = (aten._copy_from.default, aten._copy_from_and_resize.default)


class _Guard(torch._C._acc.DeviceGuard):
    """A Python device guard, as ``tpu_runtime`` registers (the autograd engine asks it about each device tensor's
    node). The subclass floor's tensors are on the meta device, whose guard is C++: the comparison leans its way."""

    type_ = staticmethod(lambda: torch._C._autograd.DeviceType.PrivateUse1)


#: What PyTorch's C++ side asks a PrivateUse1 backend: yes to all.
_Hooks = type("_Hooks", (torch._C._acc.PrivateUse1Hooks,), {
    "is_available": lambda self: True, "has_primary_context": lambda self, index: True, "is_built": lambda self: True})


def _new(shape: tuple, dtype: torch.dtype) -> torch.Tensor:
    """A plain tensor of the device (no data), knowing its ``(shape, dtype)``."""
    r = torch._C._acc.create_empty_tensor(shape, dtype)
    r._spec = (shape, dtype)
    return r


def _describe(v: Any) -> Any:
    """The hashable part of an argument that can change an output's shape or dtype (see subclass_floor)."""
    t = type(v)
    if t is torch.Tensor or t is torch.nn.Parameter:
        spec = getattr(v, "_spec", None)
        return spec if spec is not None else (tuple(v.shape), v.dtype, v.device.type)
    if t is list or t is tuple:
        return tuple([_describe(x) for x in v])
    if t is float:
        return float
    return v


def _plan(func: Any, args: tuple, kwargs: dict) -> tuple:
    writes = _written(func)
    if writes and all(w is not None for w in writes):
        return "arg", writes
    if func in _INTO_SECOND:
        return "arg", (1,)
    if func is aten._local_scalar_dense.default:
        return "scalar", 0.0 if args[0].dtype.is_floating_point else 0
    kwargs = {k: _META if isinstance(v, torch.device) and v.type == NAME else v for k, v in kwargs.items()}
    return "make", _spec(func(*_on_meta(args), **_on_meta(kwargs)))


def kernel(func: Any, *args: Any, **kwargs: Any) -> Any:
    """Every op's kernel (registered per op, and as the key's fallback): outputs of the right shapes, no work."""
    key = (func, *[_describe(a) for a in args], *[(k, _describe(v)) for k, v in kwargs.items()]) if kwargs \
        else (func, *[_describe(a) for a in args])
    plan = _OUTPUTS.get(key)
    if plan is None:
        plan = _OUTPUTS[key] = _plan(func, args, kwargs)
    kind, what = plan
    if kind == "make":
        if type(what) is tuple and len(what) == 3 and what[0] == "T":
            return _new(what[1], what[2])
        return _make(what, _new)
    if kind == "arg":
        got = [args[w] if w < len(args) else kwargs[func._schema.arguments[w].name] for w in what]
        return got[0] if len(got) == 1 else tuple(got)
    return what


#: The libraries holding the registrations (a library's registrations end when it is collected).
_LIBRARIES: list = []


def register() -> torch.library.Library:
    """Name PrivateUse1 :data:`NAME` and make :func:`kernel` its fallback; returns the library to register ops in."""
    torch.utils.rename_privateuse1_backend(NAME)
    torch._C._acc.register_python_privateuseone_hook(_Hooks())
    torch._C._acc.register_python_privateuseone_device_guard(_Guard())
    torch.utils.generate_methods_for_privateuse1_backend(for_storage=False)
    module = types.ModuleType(f"torch.{NAME}")
    module.is_available, module.device_count, module.current_device = (lambda: True), (lambda: 1), (lambda: 0)
    module._is_in_bad_fork, module.manual_seed_all = (lambda: False), (lambda seed: None)
    torch._register_device_module(NAME, module)
    everything = torch.library.Library("_", "IMPL")
    everything.fallback(kernel, dispatch_key="PrivateUse1")
    ops = torch.library.Library("aten", "IMPL")
    for overload in ("", ".start", ".start_step"):  # (a composite that writes into an out= tensor it resizes)
        ops.impl("arange" + overload, functools.partial(kernel, getattr(aten.arange, overload[1:] or "default")),
                 "PrivateUse1")
    _LIBRARIES.extend((everything, ops))
    return ops


class _Seen(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: dict = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops[func] = None
        return func(*args, **(kwargs or {}))


def plain_training_step(model: torch.nn.Module, batch: tuple, loss_fn: Callable[..., torch.Tensor],
                        library: torch.library.Library, **adamw: Any) -> Callable[[], float]:
    """``subclass_floor.floor_training_step``'s step on plain device tensors: ``model`` (a CPU module) moved to the
    device; after one step, a kernel registered in ``library`` for every ATen op the step called."""
    model = model.to(NAME)
    x, y = (t.to(NAME) for t in batch)
    step = training_step(model, x, y, loss_fn, **adamw)
    step.logits_shape = lambda: tuple(model(x).shape)
    with _Seen() as seen:
        step()
    for op in seen.ops:
        if op.namespace == "aten" and not torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "PrivateUse1"):
            name = op._schema.name.split("::")[1] + ("" if op._overloadname == "default" else "." + op._overloadname)
            library.impl(name, functools.partial(kernel, op), "PrivateUse1")
    return step


def _lm_loss(logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), target.reshape(-1))


def main(argv: list[str] | None = None) -> int:
    """Command-line entry point (see the module docstring)."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--block", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    args = p.parse_args(argv)
    torch.set_num_threads(2)
    library = register()
    g = torch.Generator().manual_seed(1234)
    tokens = torch.randint(0, 64, (4, 9), generator=g)
    batch = (tokens[:, :-1], tokens[:, 1:])  # (bench_eager's minGPT batch: 4 sequences of 8 tokens)

    def model() -> torch.nn.Module:
        torch.manual_seed(0)
        m = MinGPT().train()
        for sub in m.modules():
            if isinstance(sub, torch.nn.Dropout):
                sub.p = 0.0
        return m

    want = model()(batch[0]).shape
    plain = plain_training_step(model(), batch, _lm_loss, library, foreach=True)
    shadow = floor_training_step(model(), batch, _lm_loss, foreach=True)
    for fn in (plain, shadow, plain, shadow):
        fn()
    assert plain.logits_shape() == tuple(want), (plain.logits_shape(), want)  # (the same step, shape for shape)
    print(f"minGPT AdamW step (logits {list(want)}), rounds {args.rounds} x block {args.block}")
    for _ in range(max(1, args.repeats)):
        ratio, ts, tp = alternating(shadow, plain, args.rounds, args.block)
        print(f"   subclass-floor/plain-floor time {ratio:.2f}  (subclass floor {ts * 1e3:.2f} ms, plain floor "
              f"{tp * 1e3:.2f} ms per step)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
