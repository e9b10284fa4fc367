"""The per-op fast path of view ops (``view``, ``t``, ``transpose``, ``permute``, ``expand``, ``slice``…).

A view op computes nothing: its result is a tensor of the same storage with one more step in its view
chain and the layout the CPU would report (:func:`tpu_runtime.values.make_view`). Which step and which
layout depend only on the op, its arguments, and the source's spec and layout, so the first call of
each signature takes the dispatcher's route and the result is remembered as a *recipe* (the result's
spec, the chain suffix it adds to the source's, its strides and offset); later calls rebuild the result
from the recipe on their own source, without the dispatcher's key, plan and layout lookups (a
``view``/``t``/``transpose`` took ~9-10 µs, ~3 µs over the ~5 µs of torch's Python dispatch and
``detach``; minGPT's training step makes ~170 of them).

Only plain results are remembered (views of the source's storage with no value cache, no opaque
layout); sources torch.compile traces, resized sources, keyword arguments and non-int arguments take
the route every time.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tpu_runtime.cache import CACHE
from tpu_runtime.tensor import TpuTensor, view_tensor

aten = torch.ops.aten
_INFERENCE = torch.is_inference_mode_enabled
#: Views with a special meaning (as_strided indexes the storage; detach/alias share the value cache).
_EXCLUDED = frozenset({aten.as_strided.default, aten.detach.default, aten.alias.default, aten.lift_fresh.default})
#: view op → whether its results may be remembered (decided on first sight).
_ELIGIBLE: dict[Any, bool] = {}
#: signature → (op, container type or None, ((spec, chain suffix or None, strides, offset), ...)).
_RECIPES: dict[tuple, tuple] = {}
CACHE.on_clear(_RECIPES.clear)


def _signature(func: Any, args: tuple, kwargs: dict) -> tuple | None:
    """The recipe key of a view call (its op, int arguments, and the source's spec and layout), or ``None``
    when it cannot have one."""
    if kwargs or not args:
        return None
    x = args[0]
    if type(x) is not TpuTensor or x._fake is not None or x._prefix or x._opaque:
        return None
    key = (id(func), x._spec, x._storage.spec, not x._chain, x._strides, x._offset)
    for a in args[1:]:
        t = type(a)
        if t is int:
            key += (a,)
        elif t is list or t is tuple:
            for v in a:
                if type(v) is not int:
                    return None
            key += (tuple(a),)
        else:
            return None
    return key


def lookup(func: Any, args: tuple, kwargs: dict) -> Any:
    """The result of a view call rebuilt from its recipe, or ``None`` (no recipe yet: take the route)."""
    key = _signature(func, args, kwargs)
    recipe = _RECIPES.get(key) if key is not None else None
    if recipe is None or recipe[0] is not func:
        return None
    x = args[0]
    if x.is_inference() is not _INFERENCE():  # (the route makes such a view in the source's inference mode)
        return None
    _, container, steps = recipe
    storage, chain = x._storage, x._chain
    if container is None and len(steps) == 1:
        spec, suffix, strides, offset = steps[0]
        return TpuTensor(storage, spec[0], spec[1]) if suffix is None else \
            view_tensor(storage, spec, chain + suffix, strides, offset)
    outs = [TpuTensor(storage, spec[0], spec[1]) if suffix is None else
            view_tensor(storage, spec, chain + suffix, strides, offset) for spec, suffix, strides, offset in steps]
    return outs[0] if container is None else container(outs)


def routed(func: Any, args: tuple, kwargs: dict, route: Callable[[Any, tuple, dict], Any]) -> Any:
    """``route(func, args, kwargs)``, remembering a plain result as the call signature's recipe."""
    out = route(func, args, kwargs)
    eligible = _ELIGIBLE.get(func)
    if eligible is None:
        eligible = _ELIGIBLE[func] = func not in _EXCLUDED and not func._schema.name.endswith("_")
    key = _signature(func, args, kwargs) if eligible else None
    if key is not None:
        recipe = _recipe(args[0], out)
        if recipe is not None:
            _RECIPES[key] = (func,) + recipe
    return out


def _recipe(x: TpuTensor, out: Any) -> tuple | None:
    container = type(out) if type(out) in (list, tuple) else None
    results = out if container is not None else (out,)
    n, steps = len(x._chain), []
    for r in results:
        if type(r) is not TpuTensor or r._storage is not x._storage or r._opaque or r._prefix \
                or r._cached is not None or r._fake is not None:
            return None
        if not r._chain:
            if r._strides is not None or r._offset:
                return None
            steps.append((r._spec, None, None, 0))
        elif len(r._chain) >= n and all(a is b for a, b in zip(r._chain, x._chain)):
            steps.append((r._spec, r._chain[n:], r._strides, r._offset))
        else:
            return None
    return container, tuple(steps)


__all__ = ["lookup", "routed"]
