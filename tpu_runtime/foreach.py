"""``torch._foreach_*`` ops on tpu tensors: the per-tensor op on each element.

Optimizers built with ``foreach=True`` (and ``clip_grad_norm_(foreach=True)``, and
user code calling ``torch._foreach_add_`` …) issue one ``aten._foreach_<op>[_]``
call over lists of tensors. The runtime runs the matching per-tensor op on each
element (``_foreach_mul_.Scalar(params, s)`` → ``mul_(p, s)`` for every ``p``):
list arguments are split, scalars and single tensors are shared, a ``scalars``
tensor (``_foreach_addcdiv_.Tensor``) becomes one python value per element. Each
element then takes the ordinary route (its lowering, its cache entry, the current
eager mode), so a foreach step computes exactly what the single-tensor step does.
"""

from __future__ import annotations

from typing import Any

import torch

aten = torch.ops.aten

#: foreach names whose per-tensor op is spelled differently.
_ALIASES = {"norm": "linalg_vector_norm"}
#: per-tensor arguments that are keyword-only there but positional in the foreach schema.
_KEYWORD = {"value", "alpha", "dtype"}
#: ops whose foreach ``scalar``/``scalars`` argument is the per-tensor ``value=``.
_VALUE_OPS = {"addcmul", "addcdiv"}


def is_foreach(func: Any) -> bool:
    """Whether ``func`` is an ``aten._foreach_*`` overload."""
    return func._schema.name.startswith("aten::_foreach_")


def run_foreach(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` (an ``aten._foreach_*`` overload) element by element.

    Returns ``None`` for the in-place variants (their schema returns nothing) and the
    list of per-element results otherwise.
    """
    name = func._schema.name.split("::_foreach_", 1)[1]
    inplace = name.endswith("_")
    base = _ALIASES.get(name.rstrip("_"), name.rstrip("_"))
    packet = getattr(aten, base + "_" if inplace else base)
    schema = func._schema.arguments
    bound = [(a, args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
             for i, a in enumerate(schema) if i < len(args) or a.name in kwargs]
    lists = [v for a, v in bound if _is_list(a) and isinstance(v, (list, tuple))]
    n = len(lists[0]) if lists else 0
    results = []
    for i in range(n):
        pos, kw = [], {}
        for a, v in bound:
            if _is_list(a) or (a.name == "scalars" and isinstance(v, torch.Tensor)):
                v = v[i].item() if isinstance(v, torch.Tensor) else v[i]
            if base in _VALUE_OPS and a.name in ("scalar", "scalars"):
                kw["value"] = v
            elif a.kwarg_only or a.name in _KEYWORD:
                kw[a.name] = v
            else:
                pos.append(v)
        results.append(packet(*pos, **kw))
    return None if inplace else results


def _is_list(arg: Any) -> bool:
    return isinstance(arg.type, torch.ListType)
