"""Route every ATen call on tpu tensors to the lowering table.

For each op overload the route is decided once and cached:

1. a handful of ops the runtime implements itself: device transfers (``_to_copy``,
   ``copy_``), scalars (``item``), aliases (``detach``), view spellings that map
   onto table ops (``t``/``transpose`` → ``permute``, ``_unsafe_view`` → ``view``),
   in-place view ops (``unsqueeze_``: the tensor becomes the view), the fused
   transformer inference fast paths (:mod:`tpu_runtime.fastpath`), the ops with a
   data-dependent output shape (:mod:`tpu_runtime.dynamic`; boolean-mask indexing is
   routed there from the indexing ops' table rows) and those that give a tensor another
   shape in place (``resize_``, ``set_``: :mod:`tpu_runtime.resize`);
2. ops with a row in the lowering table, or a runtime kernel built from rows
   (:mod:`tpu_runtime.kernels`): an :class:`~tpu_runtime.plans.OpPlan` run by the
   current eager mode (:mod:`tpu_runtime.execute`, the per-op hot path). View ops (``view``, ``slice``, ``permute``…) return views
   that share the storage;
3. in-place ops (``add_``) and ``out=`` variants: the functional op is routed, then
   its result is written back (through the view chain if the target is a view); ops
   that write into another argument (``rrelu_with_noise``'s ``noise``) run their
   ``<op>_functional`` twin and write its extra results back (:mod:`tpu_runtime.inplace`);
4. torch's decompositions (``torch._decomp`` first, then CompositeImplicitAutograd,
   then ``torch._refs``), traced once per signature into one plan when possible
   (:mod:`tpu_runtime.traced`), else run piece by piece through this dispatcher;
5. otherwise :class:`~converter.errors.UnsupportedOpError` naming the op, or the
   opt-in, reported CPU fallback (:mod:`tpu_runtime.fallback`).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np
import torch
from torch._decomp import core_aten_decompositions, decomposition_table

from converter.lowering import registry
from tpu_runtime import compile_tensors, dynamic, fastpath, kernels, lazy, memory_format, optim_kernels, resize, rng
from tpu_runtime import adjusted, attention, bounds, index_checks, serialization, strided, view_cache
from tpu_runtime import inplace, module_moves
from tpu_runtime import tensor as tensor_module
from tpu_runtime._x64 import restore, swap_on
from tpu_runtime.cache import CACHE
from tpu_runtime.device import HOST_FACTORIES, aten_overload, check_index
from tpu_runtime.eager import executor
from tpu_runtime.execute import _PLANS, _execute, _run, execute_following, run_op
from tpu_runtime.fallback import cpu_fallback, defer_backward_error, empty_results, fallback_enabled, missing
from tpu_runtime.foreach import is_foreach, run_foreach
from tpu_runtime.other_device import DEVICE_ARG_OPS, on_other_device
from tpu_runtime.cpu_refusals import raise_unsupported_dtype
from tpu_runtime.plans import DYNAMIC_FLOAT_OPS, INDEXING_OPS, META_FUNCTIONS, ShapeInferenceError, flatten
from tpu_runtime.tensor import TpuTensor, alias, dense_strides, new_tensor
from tpu_runtime.traced import traced_plan
from tpu_runtime.values import convert_plan, materialize, read, to_cpu, upload, upload_into, write

aten = torch.ops.aten
#: id(op) → route: ``(kind, ..., op)``; the op itself is last, checked on each hit (an id can be reused
#: once an op object is gone). Keyed by ``id`` because an op overload's ``__hash__`` is a python call.
_ROUTES: dict[int, tuple] = {}
_TAGS = itertools.count()  # per-op key tags (see plans.flatten)
CACHE.on_clear(_ROUTES.clear)
_CORE_DECOMP = core_aten_decompositions()
META_FUNCTIONS.update(kernels.META_FUNCTIONS)
_UNTRACED = object()


def dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """Run one ATen call whose tensors are on the tpu device (the ``__torch_dispatch__`` body)."""
    if func is _DETACH and type(x := args[0]) is TpuTensor and x.is_inference() is _INFERENCE():
        return alias(x)  # (autograd detaches every gradient it accumulates: no route, key or recipe needed)
    if func.is_view and (out := view_cache.lookup(func, args, kwargs)) is not None:  # (a view seen before)
        return out
    token = swap_on()
    try:
        if id(func) in _BOUNDED:  # an index argument: checked first (tpu_runtime.bounds; no view op)
            mark = len(bounds._PENDING)
            bounds.check(func, args, kwargs)
            try:
                return _route(func, args, kwargs)
            except BaseException:
                bounds.drop_since(mark)  # (the op's own error is the one to see)
                raise
        if func.is_view and args and isinstance(args[0], torch.Tensor):
            return _view(func, args, kwargs)
        return _route(func, args, kwargs)
    except Exception as e:
        if torch._C._current_graph_task_id() < 0:  # not inside a backward pass (see defer_backward_error)
            raise
        return defer_backward_error(func, args, kwargs, e)
    finally:
        restore(token)


_INFERENCE = torch.is_inference_mode_enabled
_BOUNDED = bounds.CHECKED_IDS
_DETACH = aten.detach.default


def _view(func: Any, args: tuple, kwargs: dict) -> Any:
    """A view op: its output is made in inference mode exactly when its input is an inference tensor, as on
    the CPU (in inference mode, a view of a normal tensor is a normal view, which torch links to its base's
    version counter; outside it, a view of an inference tensor is one too, and refuses in-place updates)."""
    inference = args[0].is_inference()
    if inference is _INFERENCE():
        return view_cache.routed(func, args, kwargs, _route)
    with torch.inference_mode(inference):
        return _route(func, args, kwargs)


def route_of(func: Any) -> tuple:
    """``func``'s route (decided on its first call, then cached)."""
    route = _ROUTES.get(id(func))
    if route is None or route[-1] is not func:
        route = _ROUTES[id(func)] = _generator_route(func) + (func,)
    return route


def _route(func: Any, args: tuple, kwargs: dict, route: tuple | None = None) -> Any:
    if route is None:
        route = _ROUTES.get(id(func))
        if route is None or route[-1] is not func:  # (route_of, inlined: the per-op path)
            route = _ROUTES[id(func)] = _generator_route(func) + (func,)
    kind = route[0]
    if kind == "op":
        if route[3] and dynamic.needs_masks(func, args):  # x[mask]: the mask becomes indices (a sync)
            return dynamic.masked_indexing(func, args, kwargs)
        try:
            return _run(func, args, kwargs, route)
        except ShapeInferenceError:
            if not fallback_enabled():
                raise
            return cpu_fallback(func, args, kwargs)
    if kind == "special":
        return route[1](func, args, kwargs)
    if kind == "inplace":
        return inplace.inplace(route[1], args, kwargs)
    if kind == "inplace_multi":
        return inplace.inplace_multi(route[1], route[2], route[3], route[4], args, kwargs)
    if kind == "out":
        return inplace.out_variant(route[1], route[2], args, kwargs, route[-1])
    if kind == "mutating":
        return inplace.mutating(route[1], route[2], route[3], args, kwargs)
    if kind == "decomp":
        return _decomposed(func, args, kwargs, route[1], route[2])
    if kind == "generator":
        return _with_generator(func, args, kwargs, route)
    if kind == "device":
        device = kwargs.get("device")
        if device is not None and torch.device(device).type != "tpu":
            return on_other_device(func, args, kwargs)
        return memory_format.like(func, args, kwargs, _route(func, args, kwargs, route[1]))
    return missing(func, args, kwargs)


def _generator_route(func: Any) -> tuple:
    """The route of ``func``; for an op taking a ``generator``, one that first looks at it; for an op
    making a tensor like its input on a ``device=`` it names (:data:`~tpu_runtime.other_device.DEVICE_ARG_OPS`), one that first
    looks at that device."""
    inner = _classify(func) + (func,)
    pos = next((i for i, a in enumerate(func._schema.arguments) if a.name == "generator"), None)
    route = inner[:-1] if pos is None else ("generator", pos, inner)
    if func._schema.name.split("::", 1)[1] in DEVICE_ARG_OPS:
        return ("device", route + (func,))
    return route


def _generator_arg(pos: int, args: tuple, kwargs: dict) -> Any:
    return args[pos] if pos < len(args) else kwargs.get("generator")


def _with_generator(func: Any, args: tuple, kwargs: dict, route: tuple) -> Any:
    """An op given ``generator=``: without it, its random ops drawing from the generator (see
    :func:`tpu_runtime.rng.generator_stream`); with ``None``, as it is."""
    pos, inner = route[1], route[2]
    g = _generator_arg(pos, args, kwargs)
    if g is None:
        return _route(func, args, kwargs, inner)
    if pos < len(args):
        args = args[:pos] + (None,) + args[pos + 1:]
    else:
        kwargs = {**kwargs, "generator": None}
    with rng.generator_stream(g, func):
        return _route(func, args, kwargs, inner)


def _classify(func: Any) -> tuple:
    if func in _SPECIAL:
        return ("special", _SPECIAL[func])
    if torch.Tag.inplace_view in func.tags:
        functional = inplace.functional_of_inplace(func)
        if functional is not None:
            return ("special", lambda f, a, k: _inplace_view(functional, a, k))
    if registry.find(func) is not None:
        return _op_route(func)
    if func in kernels.KERNELS:
        return ("op", kernels.KERNELS[func], func in kernels.DYNAMIC, func in INDEXING_OPS, next(_TAGS))
    if func.namespace not in ("aten", "prims") and _has_device_kernel(func):
        return ("special", _custom_kernel)
    if is_foreach(func):
        return ("special", run_foreach)
    schema = func._schema
    first = schema.arguments[0] if schema.arguments else None
    mutated = tuple((i, a.name) for i, a in enumerate(schema.arguments) if a.alias_info is not None
                    and a.alias_info.is_write and not a.is_out)
    if first is not None and first.alias_info is not None and first.alias_info.is_write and not first.kwarg_only:
        functional = inplace.functional_of_inplace(func)
        several = isinstance(first.type, torch.ListType) or len(mutated) > 1
        if functional is not None and several:  # (rrelu_with_noise_: rrelu_with_noise itself writes noise)
            functional = inplace.pure_twin(functional)
        if functional is not None and several:
            return ("inplace_multi", functional, mutated, optim_kernels.UNCHANGED.get(functional),
                    bool(schema.returns))
        if functional is not None and func in inplace.INPLACE_TWINS:
            return ("special", lambda f, a, k: inplace.inplace(functional, *inplace.positional_defaults(f, a, k)))
        if functional is not None:
            return ("inplace", functional)
    twin = getattr(aten, func._schema.name.split("::", 1)[1] + "_functional", None) if mutated else None
    if twin is not None and func._overloadname in twin.overloads():
        return ("mutating", getattr(twin, func._overloadname), mutated, len(schema.returns))
    outs = [a.name for a in schema.arguments if a.is_out]
    if outs:
        functional = inplace.functional_of_out(func, outs)
        if functional is not None:
            return ("out", functional, outs)
    return _decomp_route(func)


def _decomp_route(func: Any) -> tuple:
    """``func``'s route through a decomposition (``("missing",)`` when it has none)."""
    fn = _CORE_DECOMP.get(func) or decomposition_table.get(func)
    # torch._refs decompositions may emit prims.* ops (not ATen, not in the table):
    # prefer torch._decomp's ATen-to-ATen ones, then CompositeImplicitAutograd, then refs.
    if fn is not None and not fn.__module__.startswith("torch._refs"):
        return ("decomp", fn, next(_TAGS))
    if func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
        return ("decomp", func.decompose, next(_TAGS))
    if fn is not None:
        return ("decomp", fn, next(_TAGS))
    return ("missing",)


_PRIVATEUSE1 = torch._C.DispatchKeySet(torch._C.DispatchKey.PrivateUse1)


def _has_device_kernel(func: Any) -> bool:
    """Whether a custom op (``torch.library``) has a kernel for the tpu device or a device-agnostic one."""
    name = func.name()
    return any(torch._C._dispatch_has_kernel_for_dispatch_key(name, key)
               for key in ("PrivateUse1", "CompositeExplicitAutograd"))


def _custom_kernel(func: Any, args: tuple, kwargs: dict) -> Any:
    """A custom op without a row: its kernel for the tpu device (``register_kernel("tpu", ...)``) or its
    device-agnostic implementation (``torch.library.custom_op`` without ``device_types``), run below this
    dispatcher; the torch ops it calls on tpu tensors come back here one by one."""
    return func.redispatch(_PRIVATEUSE1, *args, **kwargs)


def _decomposed(func: Any, args: tuple, kwargs: dict, decomp: Callable, tag: int) -> Any:
    """Run a decomposition: as one traced plan when possible, else piece by piece."""
    try:
        key, ins = flatten(func, args, kwargs, False, func in INDEXING_OPS, tag)
    except RuntimeError:  # e.g. CPU tensors the decomposition will move: run it as written
        key = None
    plan = _PLANS.get(key, _UNTRACED) if key is not None else None
    if plan is _UNTRACED:
        if torch.Tag.nondeterministic_seeded not in func.tags:  # (a first call: the CPU's dtype refusals)
            raise_unsupported_dtype(func, args, kwargs, False)
        plan = _PLANS[key] = traced_plan(func, key, args, kwargs, decomp)
    if plan is not None:
        return execute_following(plan, ins)
    try:
        out = decomp(*args, **kwargs)
    except ZeroDivisionError:  # python arithmetic on an empty input's numel (mse_loss_backward's mean)
        out = empty_results(func, args, kwargs)
    if out is NotImplemented and func.has_kernel_for_dispatch_key(torch._C.DispatchKey.CompositeImplicitAutograd):
        out = func.decompose(*args, **kwargs)
    if out is NotImplemented:
        return missing(func, args, kwargs)
    return out


# --------------------------------------------------------------------------- ops the runtime implements


def _alias(func: Any, args: tuple, kwargs: dict) -> Any:
    t = args[0]
    return alias(t) if type(t) is TpuTensor else lazy.keep_class(t, alias(t))


def _empty(func: Any, args: tuple, kwargs: dict) -> Any:
    dtype = kwargs.get("dtype") or torch.get_default_dtype()
    shape = tuple(int(s) for s in args[0])
    if 0 in shape:  # perhaps an uninitialized parameter's ``.to("tpu")``: it stays one (tpu_runtime.lazy)
        return lazy.adopt_if_uninitialized(new_tensor(None, shape, dtype))
    return memory_format.empty_layout(func, args, kwargs, new_tensor(None, shape, dtype))


def _to_copy(func: Any, args: tuple, kwargs: dict) -> Any:
    x, fmt = args[0], kwargs.get("memory_format")
    if (fmt is None or fmt is torch.preserve_format) and not (type(x) is TpuTensor and (x._opaque or x._strides)):
        return _copy_to(x, kwargs)
    return memory_format.in_format(_copy_to(x, kwargs), fmt, x)


def _copy_to(x: Any, kwargs: dict) -> Any:
    """``_to_copy`` without its memory format: to another device, or a tpu copy of ``x`` (another dtype)."""
    device, dtype = kwargs.get("device"), kwargs.get("dtype")
    if device is not None:
        device = torch.device(device)
        if device.type != "tpu":
            lazy.refuse_move(x, device)
            if device.type == "meta":  # shape and dtype only (forward AD compares metadata this way)
                return torch.empty(tuple(x.shape), dtype=dtype or x.dtype, device=device)
            cpu = to_cpu(x)
            cpu = cpu.to(dtype) if dtype is not None and dtype != cpu.dtype else cpu
            return cpu if device.type == "cpu" else cpu.to(device)
        check_index(device)
    if type(x) is not TpuTensor and type(x) in lazy.LAZY_CLASSES:  # no data, no shape: a new one of the dtype
        return lazy.keep_class(x, new_tensor(None, x._spec[0], dtype or x._spec[1]))
    module_moves.check_move(x)  # (a tpu model's ``.half()``: the swap of each parameter that follows)
    if dtype is None or dtype == x.dtype:
        return new_tensor(read(x), x._spec[0], x._spec[1])
    return run_op(aten._to_copy.default, (x,), {"dtype": dtype})


def _copy_(func: Any, args: tuple, kwargs: dict) -> Any:
    dst, src = args[0], args[1]
    if not isinstance(dst, TpuTensor):
        dst.copy_(to_cpu(src))
        return dst
    if isinstance(src, TpuTensor):
        inplace.refuse_overlap(dst, (src,))
        value = read(src)
        if src._spec != dst._spec:
            value = executor().run(convert_plan(src._spec, dst._spec), [value])[0]
        write(dst, value)
    else:
        module_moves.check_move(src)  # (``model.to("tpu")``: the swap of each parameter that follows)
        upload_into(dst, src.detach().to(dst.dtype).expand(dst._spec[0]))
    return dst


#: dtypes whose numpy scalar ``.item()`` is the python value torch's ``item()`` returns.
_ITEM_DTYPES = frozenset({torch.float32, torch.float64, torch.int32, torch.int64, torch.bool})


def _item(func: Any, args: tuple, kwargs: dict) -> Any:
    t = args[0]
    if type(t) is TpuTensor and t._spec[1] in _ITEM_DTYPES:  # no CPU tensor in between (once per step)
        return np.asarray(materialize(t)).item()
    return to_cpu(t).item()


def _equal(func: Any, args: tuple, kwargs: dict) -> bool:
    a, b = (to_cpu(x) if isinstance(x, TpuTensor) else x for x in args[:2])
    return torch.equal(a, b)


def _copy_from_and_resize(func: Any, args: tuple, kwargs: dict) -> Any:
    src, dst = args[0], args[1]
    if isinstance(dst, TpuTensor) and dst._spec[0] != tuple(src.shape):
        resize.resize(dst, src.shape)
    return _copy_(func, (dst, src), {})


def _t(func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    if x.dim() > 2:
        raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but self is {x.dim()}D")
    return _route(aten.permute.default, (x, [1, 0]), {}) if x.dim() == 2 else alias(x)


def _transpose(func: Any, args: tuple, kwargs: dict) -> Any:
    x, d0, d1 = args[0], args[1], args[2]
    n = max(x.dim(), 1)
    d0, d1 = d0 % n, d1 % n
    if x.dim() < 2 or d0 == d1:
        return alias(x)
    perm = list(range(x.dim()))
    perm[d0], perm[d1] = perm[d1], perm[d0]
    return _route(aten.permute.default, (x, perm), {})


def _reshape_view(func: Any, args: tuple, kwargs: dict) -> Any:
    view_args = (args[0], list(args[1]))  # (a view op's fast path too: autograd reshapes many gradients so)
    out = view_cache.lookup(aten.view.default, view_args, {})
    return out if out is not None else _view(aten.view.default, view_args, {})


def _squeeze(func: Any, args: tuple, kwargs: dict) -> Any:
    x = args[0]
    if len(args) > 1:
        dims = [args[1]] if isinstance(args[1], int) else list(args[1])
    else:
        dims = [i for i, s in enumerate(x.shape) if s == 1]
    return _route(aten.squeeze.dims, (x, dims), {})


def _inplace_view(functional: Any, args: tuple, kwargs: dict) -> Any:
    """``x.transpose_(0, 1)`` and friends: ``x`` becomes the view the functional op returns."""
    self = args[0]
    view = _route(functional, args, kwargs)
    shape = view._spec[0]
    strides = list(view._strides if view._strides is not None else dense_strides(shape))
    with torch._C._DisableTorchDispatch():  # torch's own metadata update of the wrapper
        torch.ops.aten.as_strided_.default(self, list(shape), strides, view._offset)
    self._storage, self._chain, self._spec = view._storage, view._chain, view._spec
    self._cached, self._seen, self._strides, self._offset = view._cached, view._seen, view._strides, view._offset
    return self


def _host_factory(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """A factory with no tensor input (a window function, ``tril_indices``): torch makes it on
    the CPU, exactly as it defines it, and it is uploaded, as ``torch.tensor(data, device=...)`` is."""
    cpu = func(*args, **{**kwargs, "device": torch.device("cpu")})
    return new_tensor(upload(cpu), tuple(cpu.shape), cpu.dtype)


def _batch_norm(func: Any, args: tuple, kwargs: dict) -> Any:
    """``native_batch_norm`` in training mode with running statistics (``nn.BatchNorm*.train()``):
    its functional form as one plan, the updated statistics written back (torch's decomposition
    mutates them, so it could not be traced and ran as ~20 ops); other calls decompose as before."""
    mean, var, training = args[3], args[4], args[5]
    if training and type(mean) is TpuTensor and type(var) is TpuTensor and len(args) == 8:
        out = _route(aten._native_batch_norm_legit_functional.default, args, kwargs)
        inplace.assign(mean, out[3])
        inplace.assign(var, out[4])
        return out[0], out[1], out[2]
    return _decomposed(func, args, kwargs, decomposition_table[func], func)


def _op_route(func: Any) -> tuple:
    """The ``op`` route of ``func``'s row of the lowering table (kernel, flags, key tag)."""
    return ("op", None, func in DYNAMIC_FLOAT_OPS, func in INDEXING_OPS, next(_TAGS))


_SPECIAL: dict[Any, Callable] = {
    aten.is_pinned.default: lambda func, args, kwargs: False,  # no pinned tpu memory (as a CUDA tensor answers)
    aten.record_stream.default: lambda func, args, kwargs: None,  # one stream; a buffer lives while referenced
    aten.detach.default: _alias,
    aten.alias.default: _alias,
    aten.lift_fresh.default: compile_tensors.lift_fresh,
    aten.empty.memory_format: _empty,
    aten._efficientzerotensor.default: _empty,  # a storage never written reads as zeros
    aten.empty_strided.default: _empty,
    aten._to_copy.default: _to_copy,
    aten.clone.default: memory_format.clone,
    aten.copy_.default: _copy_,
    aten._copy_from.default: lambda func, args, kwargs: _copy_(func, (args[1], args[0]), {}),
    aten._copy_from_and_resize.default: _copy_from_and_resize,
    aten._local_scalar_dense.default: _item,
    aten.equal.default: _equal,
    aten.t.default: _t,
    aten.transpose.int: _transpose,
    aten._unsafe_view.default: _reshape_view,
    aten._reshape_alias.default: _reshape_view,
    # views of the input, as the CPU's (only not tracked as views by autograd): a write into a chunk reaches it
    aten.unsafe_split.Tensor: lambda func, args, kwargs: aten.split.Tensor(*args, **kwargs),
    aten.unsafe_split_with_sizes.default: lambda func, args, kwargs: aten.split_with_sizes.default(*args, **kwargs),
    aten.squeeze.default: _squeeze,
    aten.squeeze.dim: _squeeze,
    aten.native_batch_norm.default: _batch_norm,
    **strided.HANDLERS,
    **adjusted.HANDLERS,
    **attention.HANDLERS,
    **index_checks.HANDLERS,
    **fastpath.HANDLERS,
    **dynamic.HANDLERS,
    **resize.HANDLERS,
    **serialization.HANDLERS,
    **{aten_overload(name): _host_factory for name in HOST_FACTORIES},
}


def handles(func: Any) -> bool:
    """Whether ``func`` has a route here (a call mixing tpu tensors with another tensor subclass, such as
    a nested tensor, is left to that subclass when it has none: ``__torch_dispatch__``'s NotImplemented)."""
    route = _ROUTES.get(id(func))
    if route is None or route[-1] is not func:
        route = _ROUTES[id(func)] = _generator_route(func) + (func,)
    if route[0] == "device":
        route = route[1]
    if route[0] == "generator":
        route = route[2]
    return route[0] != "missing"


tensor_module._DISPATCH[0] = dispatch
tensor_module._HANDLES[0] = handles

__all__ = ["dispatch", "run_op"]
