"""The floor of any Python tensor-subclass runtime: a training step whose ATen calls do no work at all.

A runtime written as a ``__torch_dispatch__`` wrapper subclass (``tpu_runtime``, torchax) pays torch's own code
on every step however little its dispatch does: the modules' Python, autograd's engine, the optimizer's Python,
the hand-off of each ATen call from C++ to Python and the wrapper tensor made for each output. :class:`Shadow`
is such a runtime doing nothing: a call's outputs are new wrapper tensors of the right shapes and dtypes
(worked out once per call signature on the meta device, then looked up), an in-place call returns its target,
``.item()`` returns 0. No values exist and nothing is recorded or run; what is left of the runtime is one dict
lookup per call, keyed by the arguments' shapes and dtypes (a runtime must know its outputs' shapes too; measured
on a chain of ``x + y``: 10.1 µs per add on shadows, 8.2 µs under a subclass that returns one fixed wrapper). So the
step's time is about the least any Python-subclass runtime's step can take on this machine: ``strict time /
floor time`` bounds fused/strict from above, whatever fused eager records or XLA runs (``bench_eager.py`` prints
it next to the XLA floor of :mod:`benchmarks.xla_floor`).
"""

from __future__ import annotations

from typing import Any, Callable

import torch

#: Call signature (op, described arguments: :func:`_describe`) → how its outputs are made (:func:`_plan`).
_OUTPUTS: dict = {}


class Shadow(torch.Tensor):
    """A wrapper tensor with a shape and a dtype and no data; every ATen call on it returns new shadows."""

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, shape: tuple, dtype: torch.dtype) -> "Shadow":
        r = torch.Tensor._make_wrapper_subclass(cls, shape, dtype=dtype, device="meta")
        r._spec = (shape, dtype)
        return r

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        key = (func, *[_describe(a) for a in args], *[(k, _describe(v)) for k, v in kwargs.items()]) if kwargs \
            else (func, *[_describe(a) for a in args])
        spec = _OUTPUTS.get(key, _OUTPUTS)  # (the table itself: not yet seen; ``None`` is a spec)
        if spec is _OUTPUTS:
            spec = _OUTPUTS[key] = _plan(func, args, kwargs or {})
        kind, what = spec
        if kind is _ONE:
            return Shadow(*what)
        if kind is _ARG:  # in place (or out=): its targets are its results
            got = [args[w] if w < len(args) else kwargs[func._schema.arguments[w].name] for w in what]
            return got[0] if len(got) == 1 else tuple(got)
        if kind is _SCALAR:
            return what
        return _make(what)


#: How a call signature's outputs are made: one new shadow of ``(shape, dtype)``; the arguments at these
#: positions (an in-place or ``out=`` call); this python number (``.item()``); or :func:`_make` of a structure.
_ONE, _ARG, _SCALAR, _MANY = "one", "arg", "scalar", "many"


def _plan(func: Any, args: tuple, kwargs: dict) -> tuple:
    """How ``func``'s outputs on arguments like these are made (see :data:`_ONE`)."""
    writes = _written(func)
    if writes and all(w is not None for w in writes):
        return _ARG, writes
    if func is torch.ops.aten._local_scalar_dense.default:
        return _SCALAR, 0.0 if args[0].dtype.is_floating_point else 0
    out = _spec(func(*_on_meta(args), **_on_meta(kwargs)))
    if type(out) is tuple and len(out) == 3 and out[0] == "T":
        return _ONE, out[1:]
    return _MANY, out


def _written(func: Any) -> tuple:
    """For each of ``func``'s outputs, the position of the argument it writes (``None`` where it writes none)."""
    schema, found = func._schema, []
    for ret in schema.returns:
        info = ret.alias_info
        where = None
        if info is not None and info.is_write:
            where = next((i for i, a in enumerate(schema.arguments)
                          if a.alias_info is not None and a.alias_info.before_set == info.before_set), None)
        found.append(where)
    return tuple(found)


def _describe(v: Any) -> Any:
    """The hashable part of an argument that can change an output's shape or dtype (a python float cannot:
    an optimizer's per-step scalars do not make new signatures)."""
    t = type(v)
    if t is Shadow:
        return v._spec
    if t is list or t is tuple:
        return tuple([_describe(x) for x in v])
    if t is float:
        return float
    if isinstance(v, torch.Tensor):  # a plain tensor (a meta one a factory made, a CPU scalar)
        return (tuple(v.shape), v.dtype, v.device)
    return v


def _on_meta(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return torch.empty(v.shape, dtype=v.dtype, device="meta")
    if isinstance(v, (list, tuple)):
        return type(v)(_on_meta(x) for x in v)
    if isinstance(v, dict):
        return {k: _on_meta(x) for k, x in v.items()}
    return v


def _spec(out: Any) -> Any:
    if isinstance(out, torch.Tensor):
        return ("T", tuple(out.shape), out.dtype)
    if isinstance(out, (list, tuple)):
        return type(out)(_spec(x) for x in out)
    return out


def _make(spec: Any, new: Callable[[tuple, torch.dtype], torch.Tensor] | None = None) -> Any:
    """The outputs ``spec`` (:func:`_spec`) describes, each tensor ``new(shape, dtype)`` (default: a shadow)."""
    if type(spec) is tuple and len(spec) == 3 and spec[0] == "T":
        return (new or Shadow)(spec[1], spec[2])
    if isinstance(spec, (list, tuple)):
        return type(spec)(_make(x, new) for x in spec)
    return spec


def shadow_model(model: torch.nn.Module) -> torch.nn.Module:
    """``model`` with every parameter and buffer replaced by a shadow of its shape and dtype (tied ones stay tied)."""
    made: dict = {}
    for module in model.modules():
        for table, as_param in ((module._parameters, True), (module._buffers, False)):
            for name, t in list(table.items()):
                if t is None:
                    continue
                if id(t) not in made:
                    s = Shadow(tuple(t.shape), t.dtype)
                    made[id(t)] = torch.nn.Parameter(s, t.requires_grad) if as_param else s
                table[name] = made[id(t)]
    return model


def floor_training_step(model: torch.nn.Module, batch: tuple, loss_fn: Callable[..., torch.Tensor],
                        **adamw: Any) -> Callable[[], float]:
    """One step of ``bench_eager.py``'s training loop (forward, ``zero_grad``, backward on the calling thread as
    the tpu device runs it, ``AdamW(lr=1e-3, **adamw)`` step, ``loss.item()``) on shadows of ``model`` (a CPU
    module, changed in place) and ``batch``."""
    return training_step(shadow_model(model), *(Shadow(tuple(t.shape), t.dtype) for t in batch), loss_fn, **adamw)


def training_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, loss_fn: Callable[..., torch.Tensor],
                  **adamw: Any) -> Callable[[], float]:
    """``bench_eager.py``'s training step on ``model``, ``x`` and ``y`` as they are (the floors' tensors): forward,
    ``zero_grad``, backward on the calling thread, ``AdamW(lr=1e-3, **adamw)`` step, ``loss.item()``."""
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, **adamw)

    def step() -> float:
        loss = loss_fn(model(x), y)
        opt.zero_grad(set_to_none=True)
        with torch.autograd.set_multithreading_enabled(False):
            loss.backward()
        opt.step()
        return loss.item()

    return step


__all__ = ["Shadow", "floor_training_step", "shadow_model", "training_step"]
