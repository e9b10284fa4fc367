"""In-place ops and ``out=`` variants on tpu tensors, through their functional twins.

An in-place op (``add_``) runs its functional twin (``add``) and writes the result into its target
(through the target's view chain if it is a view); ops that mutate several arguments
(``_fused_adamw_``) or an argument other than ``self`` (``rrelu_with_noise``) write each result
back into the argument it replaces; an ``out=`` variant writes into its ``out`` tensors, resizing
them as torch does. :mod:`tpu_runtime.dispatch` routes these ops here.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false

from tpu_runtime import dispatch as _dispatch  # (circular: used at call time only)
from tpu_runtime import dynamic, resize
from tpu_runtime.eager import executor
from tpu_runtime.execute import NOT_IN_PLACE, _run, assign_value, check_cast, run_writing
from tpu_runtime.plans import ShapeInferenceError
from tpu_runtime.tensor import TpuTensor, opaque_tensor
from tpu_runtime.values import read, to_cpu, write

aten = torch.ops.aten

#: Functional twins of the in-place ops that write one number into every element (``fill_``, ``zero_``):
#: the CPU lets them write through an expanded view, whose elements share memory.
_UNIFORM = frozenset({aten.fill.Scalar, aten.zero.default})  # (fill_ of a tensor value checks, as the CPU)


#: In-place ops whose functional twin has another overload name.
INPLACE_TWINS = {
    aten.bernoulli_.float: aten.bernoulli.p,
    aten.normal_.default: aten.normal_functional.default,
}


def positional_defaults(func: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """``args`` with the positional arguments torch left out (those equal to their default,
    or passed by name) filled in from ``func``'s schema: a twin of another overload may have
    no default there (``bernoulli_.float``'s ``p=0.5`` → ``bernoulli.p``'s required ``p``)."""
    args, kwargs = list(args), dict(kwargs)
    for a in func._schema.arguments[len(args):]:
        if a.kwarg_only:
            break
        args.append(kwargs.pop(a.name) if a.name in kwargs else a.default_value)
    return tuple(args), kwargs


def pure_twin(functional: Any) -> Any:
    """``functional`` itself, or where it writes into an argument (``rrelu_with_noise`` fills ``noise``) its
    ``<op>_functional`` twin, which returns the new values instead (``None`` when it has none)."""
    if not any(a.alias_info is not None and a.alias_info.is_write for a in functional._schema.arguments):
        return functional
    twin = getattr(aten, functional._schema.name.split("::", 1)[1] + "_functional", None)
    return getattr(twin, functional._overloadname) if twin is not None and \
        functional._overloadname in twin.overloads() else None


def functional_of_inplace(func: Any) -> Any:
    """The functional twin of the in-place op ``func`` (``add_.Tensor`` → ``add.Tensor``), or ``None``."""
    if func in INPLACE_TWINS:
        return INPLACE_TWINS[func]
    name = func._schema.name.split("::", 1)[1]
    if not name.endswith("_") or name.startswith("_foreach"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    # the same overload name with the same arguments; else the overload whose arguments match
    # (transpose_.default ~ transpose.int; pow_.Scalar(Tensor self, Scalar exponent) ~
    # pow.Tensor_Scalar, not pow.Scalar(Scalar self, Tensor exponent))
    types = [str(a.type) for a in func._schema.arguments]
    names = [a.name for a in func._schema.arguments]
    overloads = packet.overloads()
    if func._overloadname in overloads:
        f = getattr(packet, func._overloadname)
        if [str(a.type) for a in f._schema.arguments] == types:
            return f
    for ov in overloads:
        f = getattr(packet, ov)
        if [a.name for a in f._schema.arguments] == names and [str(a.type) for a in f._schema.arguments] == types:
            return f
    return None


def functional_of_out(func: Any, outs: list) -> Any:
    """The functional twin of the ``out=`` variant ``func`` (``sum.IntList_out`` → ``sum.dim_IntList``), or ``None``."""
    name = func._schema.name.split("::", 1)[1]
    packet = getattr(aten, name, None)
    if packet is None:
        return None
    ov = func._overloadname
    wanted = [(a.name, str(a.type)) for a in func._schema.arguments if not a.is_out]
    names = {name for name, _ in wanted}
    preferred = ([ov[:-4]] if ov.endswith("_out") else []) + ["default", "Tensor", "start_step"]
    overloads = packet.overloads()
    # then any overload with the same arguments (sum.IntList_out's twin is sum.dim_IntList)
    for cand in [c for c in preferred if c in overloads] + sorted(set(overloads) - set(preferred)):
        f = getattr(packet, cand)
        # (a factory's twin also takes dtype/layout/device/pin_memory: out_variant passes the out's dtype)
        if [(a.name, str(a.type)) for a in f._schema.arguments
                if not (_factory_kwarg(a) and a.name not in names)] == wanted:
            return f
    return None


_FACTORY_KWARGS = frozenset({"dtype", "layout", "device", "pin_memory"})


def _factory_kwarg(arg: Any) -> bool:
    return arg.kwarg_only and arg.name in _FACTORY_KWARGS


_OVERLAP = ("unsupported operation: some elements of the input tensor and the written-to tensor refer to a single "
            "memory location. Please clone() the tensor before performing the operation.")


def refuse_overlap(dst: Any, args: Any, whole: bool = False) -> None:
    """Raise the CPU's error when a tensor among ``args`` (a list or tuple of them included) partly overlaps
    ``dst``, the tensor an op writes, in their storage: the same bytes but another layout, or bytes in common
    and others not (``x[1:].copy_(x[:-1])``, ``z.add_(z.t())``). Each is dense in some order, as the CPU judges
    (a layout it cannot judge is let through there too). The device would compute it as if from a copy. With
    ``whole``, ``dst`` itself or a tensor of its very bytes and layout is refused too, as torch's
    ``assert_no_overlap`` refuses it for the ops of :data:`NO_OVERLAP` (``x.scatter_add_(0, i, x)``)."""
    if type(dst) is not TpuTensor:
        return
    storage = dst._storage
    for a in args:
        if type(a) in (list, tuple):
            refuse_overlap(dst, a, whole)
        elif type(a) is TpuTensor and a._storage is storage and (a is not dst or whole) and _partial(dst, a, whole):
            raise RuntimeError(_OVERLAP)


def _partial(a: TpuTensor, b: TpuTensor, whole: bool = False) -> bool:
    """Whether ``a`` and ``b`` (of one storage) overlap partly, as torch's ``get_overlap_status`` says (with
    ``whole``: or fully)."""
    if not a.numel() or not b.numel() or not is_non_overlapping_and_dense_or_false(a) \
            or not is_non_overlapping_and_dense_or_false(b):
        return False
    a0, b0 = a.storage_offset() * a.itemsize, b.storage_offset() * b.itemsize
    a1, b1 = a0 + a.numel() * a.itemsize, b0 + b.numel() * b.itemsize
    if (a0, a1) == (b0, b1):
        return whole or a.stride() != b.stride()
    return a0 < b1 and b0 < a1


#: Ops whose written tensor may not overlap another argument at all (the functional twins of in-place ops, and
#: ``out=`` variants), as their CPU kernels check with ``assert_no_overlap``: scatters, index writes, ``cat``.
NO_OVERLAP = frozenset({aten.scatter.src, aten.scatter.reduce, aten.scatter_add.default, aten.scatter_reduce.two,
                        aten.index_add.default, aten.index_copy.default, aten.index_put.default, aten.cat.out})


def inplace(functional: Any, args: tuple, kwargs: dict) -> Any:
    """An in-place op: its ``functional`` twin's result written into ``self`` (``args[0]``)."""
    self = args[0]
    refuse_overlap(self, args[1:], functional in NO_OVERLAP)
    if functional in _UNIFORM and type(self) is TpuTensor and self._chain:
        return _fill_view(functional, args, kwargs)
    route = _dispatch.route_of(functional)
    if route[0] == "generator" and _dispatch._generator_arg(route[1], args, kwargs) is None:
        route = route[2]  # (a given generator was taken off by the in-place op's own route)
    if (type(self) is TpuTensor and route[0] == "op" and route[-1] is functional
            and not (route[3] and dynamic.needs_masks(functional, args))):
        try:  # the common case: the result goes into ``self`` without a wrapper tensor in between
            out = _run(functional, args, kwargs, route, self)
        except ShapeInferenceError:
            out = NOT_IN_PLACE  # the generic path below falls back to CPU or raises
        if out is not NOT_IN_PLACE:
            return out
    result = _dispatch._route(functional, args, kwargs)
    if isinstance(result, (tuple, list)):
        result = result[0]
    if isinstance(result, torch.Tensor) and result.dtype != self.dtype:
        check_cast(result.dtype, self.dtype, functional, args, kwargs)
    if not isinstance(self, TpuTensor):  # a CPU tensor updated from tpu operands
        self.copy_(to_cpu(result))
        return self
    assign(self, result)
    return self


def _fill_view(functional: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """``fill_``/``zero_`` of a view: one value written into every element, also through an expanded view."""
    self = args[0]
    write(self, read(_dispatch._route(functional, args, kwargs)), uniform=True)  # (of self's dtype and shape)
    return self


def inplace_multi(functional: Any, mutated: tuple[tuple[int, str], ...], unchanged: Callable | None, returns_self: bool, args: tuple,
                   kwargs: dict) -> Any:
    """An in-place op that mutates several arguments or tensor lists (``_fused_adam_``,
    ``_amp_update_scale_``): its functional twin returns one result per mutated argument,
    in order; each is written into its tensor (or list of tensors), except the arguments
    ``unchanged(args, kwargs)`` names. Returns ``self`` if the op's schema returns it."""
    skip = unchanged(args, kwargs) if unchanged is not None else ()
    ex = executor()
    if hasattr(ex, "run_into") or hasattr(ex, "record_writes"):  # each result straight into what it replaces
        route = _dispatch.route_of(functional)
        targets = [None if pos in skip else args[pos] if pos < len(args) else kwargs.get(name)
                   for pos, name in mutated]
        if route[0] == "op" and not route[3] and run_writing(functional, args, kwargs, route, targets):
            return args[0] if returns_self else None
    results = _dispatch._route(functional, args, kwargs)
    _write_back(mutated, results, args, kwargs, skip)
    return args[0] if returns_self else None


def mutating(functional: Any, mutated: tuple[tuple[int, str], ...], n_returns: int, args: tuple,
              kwargs: dict) -> Any:
    """An op that writes into arguments other than ``self`` (``rrelu_with_noise`` fills ``noise``)
    through its ``<op>_functional`` twin, which returns the op's outputs and then the new value of
    each mutated argument. An argument whose new value has another shape is resized first, as the op's kernel
    resizes it (a fresh ``FusedMovingAvgObsFakeQuantize`` of weights grows its empty running min / max, scales
    and zero points to one per channel)."""
    results = _dispatch._route(functional, args, kwargs)
    for (pos, name), new in zip(mutated, results[n_returns:]):
        target = args[pos] if pos < len(args) else kwargs[name]
        if isinstance(target, TpuTensor) and isinstance(new, TpuTensor) and target._spec[0] != new._spec[0]:
            resize.resize(target, new._spec[0])
    _write_back(mutated, results[n_returns:], args, kwargs)
    outs = results[:n_returns]
    return outs[0] if n_returns == 1 else tuple(outs)


def _write_back(mutated: tuple[tuple[int, str], ...], results: Any, args: tuple, kwargs: dict,
                skip: Any = ()) -> None:
    """Write each result into the argument it replaces (``mutated``: position and name, in
    order; a tensor list takes a list of results), except the positions in ``skip``."""
    for (pos, name), new in zip(mutated, results):
        if pos in skip:
            continue
        target = args[pos] if pos < len(args) else kwargs[name]
        if isinstance(target, (list, tuple)):
            assign_each(target, new)
        elif target is not None:
            assign(target, new)


def assign_each(dsts: Any, srcs: Any) -> None:
    """Write each tpu tensor of ``srcs`` into the tensor of ``dsts`` at its position."""
    for dst, src in zip(dsts, srcs):
        if dst is not src:
            assign(dst, src)


def assign(dst: TpuTensor, src: TpuTensor) -> None:
    """Write ``src`` (a tpu tensor) into ``dst``, casting its dtype as in-place ops do."""
    assign_value(dst, read(src), src._spec)


def out_variant(functional: Any, out_names: list, args: tuple, kwargs: dict, func: Any = None) -> Any:
    """An ``out=`` variant (``func``): its ``functional`` twin's results written into the ``out_names`` tensors; an
    ``out=`` tensor of a dtype the CPU refuses there (``argmax(out=int32)``, ``mm(out=float64)`` of floats) raises its
    error (asked of the CPU once per call signature)."""
    if func is not None:
        _check_out_dtypes(func, args, kwargs)
    for n in out_names:
        refuse_overlap(kwargs[n], args, func in NO_OVERLAP)
    kw = {k: v for k, v in kwargs.items() if k not in out_names}
    if "dtype" not in kw and any(a.name == "dtype" and _factory_kwarg(a) for a in functional._schema.arguments) \
            and isinstance(kwargs[out_names[0]], torch.Tensor):  # a factory (linspace.out): the out's dtype
        kw["dtype"] = kwargs[out_names[0]].dtype
    res = _dispatch._route(functional, args, kw)
    results = res if isinstance(res, (tuple, list)) else (res,)
    outs = [kwargs[n] for n in out_names]
    for o, r in zip(outs, results):
        if isinstance(o, torch.Tensor) and isinstance(r, torch.Tensor) and o.dtype != r.dtype:
            check_cast(r.dtype, o.dtype)  # (torch.add(float_t, 1, out=int64_t): the CPU raises, as in place)
        if not isinstance(o, TpuTensor):
            o.copy_(to_cpu(r))
        else:
            resized = o._spec[0] != r._spec[0]
            if resized:
                resize.resize_out(o, r._spec[0], functional)
            assign(o, r)
            if resized and type(r) is TpuTensor and r._opaque and not o._chain:  # (a fresh storage: it takes the
                resize.rebind(o, opaque_tensor(o._storage, o._spec, tuple(r.stride())))  # result's layout, as torch)
    return outs[0] if len(outs) == 1 else tuple(outs)


#: Call signatures of ``out=`` variants whose out dtypes the CPU has accepted (see :func:`_check_out_dtypes`).
_OUT_ACCEPTED: set = set()


def _signature(a: Any) -> Any:
    if isinstance(a, torch.Tensor):
        return (tuple(a.shape), a.dtype, a.device.type)
    if type(a) in (list, tuple):
        return tuple(_signature(x) for x in a)
    return a if type(a) in (int, float, bool, str, type(None)) else repr(a)


def _check_out_dtypes(func: Any, args: tuple, kwargs: dict) -> None:
    """Raise the CPU's error when it refuses this ``out=`` call for its out tensors' dtypes (torch requires an exact
    dtype for most non-elementwise ops, and a safe cast for the others)."""
    key = (func, _signature(args), _signature(tuple(kwargs.items())))
    if key in _OUT_ACCEPTED:
        return
    from tpu_runtime.cpu_refusals import raise_cpu_refusal

    raise_cpu_refusal(func, args, kwargs, False,
                      keep=lambda m: any(w in m for w in ("dtype", "cast", "out type", "Expected out")))
    if len(_OUT_ACCEPTED) > 4096:
        _OUT_ACCEPTED.clear()
    _OUT_ACCEPTED.add(key)
