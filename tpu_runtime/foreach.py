"""``torch._foreach_*`` ops on tpu tensors: the per-tensor op on each element, in one plan.

Optimizers built with ``foreach=True`` (and ``clip_grad_norm_(foreach=True)``, and
user code calling ``torch._foreach_add_`` …) issue one ``aten._foreach_<op>[_]``
call over lists of tensors. Its meaning is the matching per-tensor op on each
element (``_foreach_mul_.Scalar(params, s)`` → ``mul_(p, s)`` for every ``p``):
list arguments are split, scalars and single tensors are shared, a ``scalars``
tensor (``_foreach_addcdiv_.Tensor``) gives one value per element.

The whole call is one :class:`~tpu_runtime.plans.OpPlan` (one executable in strict
eager, one node in fused eager) whose function applies the per-tensor op's row of
the lowering table (or runtime kernel) to every element; an in-place variant runs
its functional twin and writes each result back. Python floats are traced inputs
where the per-tensor op takes them so (``add``/``mul``/``addcdiv``…: an optimizer's
per-step scalars do not recompile). A call that cannot be planned (no functional
twin, no row for the per-tensor op, a shape torch cannot infer) runs element by
element instead, each element taking the ordinary route.
"""

from __future__ import annotations

import functools
import operator
from typing import Any, Callable

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from converter.lowering import registry
from converter.lowering.context import LoweringContext
from converter.lowering.interpreter import conform

aten = torch.ops.aten

#: foreach names whose per-tensor op is spelled differently.
_ALIASES = {"norm": "linalg_vector_norm"}
#: ... only in their ``Scalar``/``ScalarList`` overloads (``torch.maximum`` takes no scalar).
_SCALAR_ALIASES = {"maximum": "clamp_min", "minimum": "clamp_max"}
#: per-tensor arguments that are keyword-only there but positional in the foreach schema.
_KEYWORD = {"value", "alpha", "dtype"}
#: ops whose foreach ``scalar``/``scalars`` argument is the per-tensor ``value=``.
_VALUE_OPS = {"addcmul", "addcdiv"}


def is_foreach(func: Any) -> bool:
    """Whether ``func`` is an ``aten._foreach_*`` overload."""
    return func._schema.name.startswith("aten::_foreach_")


#: id of a foreach overload → ``(overload, its name after "_foreach_", route)``; the route is ``(functional
#: overload, per-tensor op, floats dynamic, takes a CPU ``scalars`` tensor)``, or ``None``: run element by element
#: (resolved on the first call).
_ROUTES: dict[int, tuple] = {}
#: functional overload's plan key → plan, or ``None`` when this signature cannot be one plan.
_UNPLANNED = object()


def run_foreach(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run ``func`` (an ``aten._foreach_*`` overload): as one plan when possible, else element by element.

    Returns ``None`` for the in-place variants (their schema returns nothing) and the
    list of per-element results otherwise.
    """
    from tpu_runtime.execute import _PLANS, execute_following, write_outputs
    from tpu_runtime.plans import build_plan, flatten

    entry = _ROUTES.get(id(func))
    if entry is None or entry[0] is not func:  # (keyed by id: an op overload's hash is a python call)
        name = func._schema.name.split("::_foreach_", 1)[1]
        if not args or not args[0]:  # nothing to resolve the per-tensor op on (an empty list)
            return _elementwise(func, name, args, kwargs)
        entry = _ROUTES[id(func)] = (func, name, _route(func, name, args, kwargs))
    _, name, route = entry
    if route is not None:
        functional, element_op, dyn, indexing = route
        key, ins = flatten(functional, args, kwargs, dyn, indexing)
        plan = _PLANS.get(key, _UNPLANNED)
        if plan is _UNPLANNED:
            try:
                plan = build_plan(functional, key, args, kwargs, _kernel(functional, name, element_op), dyn=dyn)
            except Exception:  # e.g. a shape torch cannot infer: element by element, which says what is wrong
                plan = None
            _PLANS[key] = plan
        if plan is not None:
            if functional is func:
                return execute_following(plan, ins)
            if not _overlapping(args):
                write_outputs(plan, ins, args[0])
                _increment_versions(args[0])
                return None
    return _elementwise(func, name, args, kwargs)


_STORAGE = operator.attrgetter("_storage")


def _overlapping(args: tuple) -> bool:
    """Whether an in-place foreach call's targets (``args[0]``) share a storage with each other, or
    with another list's element at a different position: torch then runs element by element, each
    write seen by the next element (one plan would read every input before any write)."""
    try:  # the common case, at C speed: tpu tensor lists with no storage in common (a scalar list has none)
        targets = set(map(id, map(_STORAGE, args[0])))
        if len(targets) == len(args[0]) and all(
                targets.isdisjoint(map(id, map(_STORAGE, a))) for i, a in enumerate(args[1:], 1)
                if type(a) in (list, tuple) and a and isinstance(a[0], torch.Tensor)
                and a is not args[i - 1]):  # (a list passed twice is looked at once: addcmul_(v, g, g))
            return False
    except AttributeError:  # an element that is not a tpu tensor (a CPU scalar tensor)
        pass
    where = {}
    for i, t in enumerate(args[0]):
        if where.setdefault(id(getattr(t, "_storage", t)), i) != i:
            return True
    for a in args[1:]:
        if type(a) is list or type(a) is tuple:
            for j, t in enumerate(a):
                if where.get(id(getattr(t, "_storage", t)), j) != j:
                    return True
    return False


def _base(func: Any, name: str) -> str:
    """The name of the per-tensor op of ``func`` (``aten._foreach_<name>``, in place or not)."""
    base = name.rstrip("_")
    if func._overloadname.startswith("Scalar"):
        base = _SCALAR_ALIASES.get(base, base)
    return _ALIASES.get(base, base)


def _elementwise(func: Any, name: str, args: tuple, kwargs: dict) -> Any:
    """Each element through the ordinary route (``packet(*element_args)``)."""
    inplace = name.endswith("_")
    base = _base(func, name)
    packet = getattr(aten, base + "_" if inplace else base)
    results = [packet(*pos, **kw) for pos, kw in _elements(func, base, args, kwargs)]
    if inplace:
        _increment_versions(args[0])
    return None if inplace else results


def _increment_versions(targets: Any) -> None:
    """Bump the autograd version of each tensor an in-place foreach call wrote (torch's foreach kernels do;
    reached through ``__torch_dispatch__`` they did not, so a backward through a graph that saved a parameter
    an optimizer step had since changed ran on the new values where the CPU raises)."""
    torch._C._increment_version(targets)  # (a Tensor[] argument: every element is a tensor)


def _elements(func: Any, base: str, args: tuple, kwargs: dict) -> list[tuple[list, dict]]:
    """The per-tensor op's ``(args, kwargs)`` for each element of a foreach call (tensors or JAX values)."""
    schema = func._schema.arguments
    bound = [(a, args[i] if i < len(args) else kwargs.get(a.name, a.default_value))
             for i, a in enumerate(schema) if i < len(args) or a.name in kwargs]
    lists = [v for a, v in bound if _is_list(a) and isinstance(v, (list, tuple))]
    n = len(lists[0]) if lists else 0
    calls = []
    for i in range(n):
        pos, kw = [], {}
        for a, v in bound:
            if _is_list(a) or (a.name == "scalars" and not isinstance(v, (float, int))):
                v = v[i].item() if isinstance(v, torch.Tensor) else v[i]
            if base in _VALUE_OPS and a.name in ("scalar", "scalars"):
                kw["value"] = v
            elif a.kwarg_only or a.name in _KEYWORD:
                kw[a.name] = v
            else:
                pos.append(v)
        calls.append((pos, kw))
    return calls


class _Resolve(TorchDispatchMode):
    """Records the overload a per-tensor call on meta tensors dispatches to."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: list = []

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        self.ops.append(func)
        return func(*args, **(kwargs or {}))


def _route(func: Any, name: str, args: tuple, kwargs: dict) -> tuple | None:
    """The :data:`_ROUTES` entry of a foreach overload (resolved on this call's first element)."""
    from tpu_runtime import kernels
    from tpu_runtime.plans import DYNAMIC_FLOAT_OPS, META_FUNCTIONS

    inplace = name.endswith("_")
    functional = func
    if inplace:
        packet = getattr(aten, "_foreach_" + name[:-1], None)
        if packet is None or func._overloadname not in packet.overloads():
            return None
        functional = getattr(packet, func._overloadname)
    base = _base(func, name)
    calls = _elements(func, base, args, kwargs)
    if not calls:
        return None
    pos, kw = calls[0]
    meta = [torch.empty(tuple(v.shape), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v
            for v in pos]
    mkw = {k: torch.empty(tuple(v.shape), dtype=v.dtype, device="meta") if isinstance(v, torch.Tensor) else v
           for k, v in kw.items()}
    try:
        with _Resolve() as mode:
            getattr(aten, base)(*meta, **mkw)
    except Exception:
        return None
    ops = [op for op in mode.ops if op._schema.name == "aten::" + base]
    if len(ops) != 1:  # the per-tensor op decomposes: element by element
        return None
    op = ops[0]
    if registry.find(op) is None and op not in kernels.KERNELS:
        return None
    args_schema = functional._schema.arguments
    scalars = [i for i, a in enumerate(args_schema) if a.name == "scalars" and isinstance(a.type, torch.TensorType)]
    if scalars:  # torch's meta kernel wants that tensor on the CPU
        META_FUNCTIONS[functional] = functools.partial(_meta_with_cpu_scalars, functional, scalars[0])
    return functional, op, op in DYNAMIC_FLOAT_OPS or op in kernels.DYNAMIC, bool(scalars)


def _meta_with_cpu_scalars(functional: Any, index: int, *args: Any, **kwargs: Any) -> Any:
    """``functional`` on meta tensors, its ``scalars`` tensor (argument ``index``) on the CPU."""
    args = list(args)
    if index < len(args):
        args[index] = torch.empty(tuple(args[index].shape), dtype=args[index].dtype)
    else:
        kwargs["scalars"] = torch.empty(tuple(kwargs["scalars"].shape), dtype=kwargs["scalars"].dtype)
    return functional(*args, **kwargs)


def _kernel(functional: Any, name: str, op: Any) -> Callable:
    """The plan function of a foreach call: ``op``'s row (or runtime kernel) on every element."""
    from tpu_runtime import kernels

    row = registry.find(op)
    base = _base(functional, name)

    def kernel(ctx: Any, *args: Any, **kwargs: Any) -> list:
        results = []
        for i, (pos, kw) in enumerate(_elements(functional, base, args, kwargs)):
            sub = LoweringContext(target=ctx.target, meta=ctx.meta[i], where=ctx.location)
            out = registry.apply(row, sub, pos, kw) if row is not None else kernels.KERNELS[op](sub, *pos, **kw)
            results.append(conform(out, ctx.meta[i]))
        return results

    return kernel


def _is_list(arg: Any) -> bool:
    return isinstance(arg.type, torch.ListType)


def _decompose(func: Any, name: str, *args: Any, **kwargs: Any) -> list:
    """A functional foreach call as its per-tensor op on each element (what ``torch.compile`` traces)."""
    return _elementwise(func, name, args, kwargs)


def decompositions() -> dict:
    """AOTAutograd decompositions of every functional ``aten._foreach_*`` overload whose per-tensor op
    exists: a compiled optimizer step (torch.optim takes its foreach path for tpu tensors) becomes
    the per-tensor ops, which the lowering table has rows for."""
    table = {}
    for packet_name in dir(aten):
        if not packet_name.startswith("_foreach_") or packet_name.endswith("_"):
            continue
        name = packet_name[len("_foreach_"):]
        if not hasattr(aten, _ALIASES.get(name, name)):
            continue
        packet = getattr(aten, packet_name)
        for overload in packet.overloads():
            func = getattr(packet, overload)
            table[func] = functools.partial(_decompose, func, name)
    return table
