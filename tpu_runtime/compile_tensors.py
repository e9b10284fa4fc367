"""How tpu tensors look to ``torch.compile``: the traceable wrapper subclass protocol.

Dynamo and AOTAutograd trace a tensor subclass only through
``__tensor_flatten__`` / ``__tensor_unflatten__``: the subclass is taken apart into
*inner* tensors, the graph is traced and run on those, and outputs are put back
together. For a :class:`~tpu_runtime.tensor.TpuTensor` the one inner tensor is a
:class:`TpuPayload`: a tpu-device tensor of the same shape and dtype that stands
for the outer tensor (hence for its ``jax.Array``) and does not flatten itself,
so it is a leaf for PyTorch's tracing.

While tracing, the payload is a ``FakeTensor`` on the tpu device and the outer
tensor a *tracing* ``TpuTensor`` (AOTAutograd checks that the traced type is the
run-time type, so it is the same class) that holds the fake as ``_fake`` and no
storage. Creating one installs :func:`tracing_dispatch` as the class's
dispatcher: ops on tracing tensors are re-issued on their fakes (so they are
recorded into the graph; nothing runs), every other op goes to the runtime's
dispatcher as usual. The plain dispatcher (no per-op check) is put back when
the backend has compiled the traced graph (:func:`end_tracing`) or once no
tracing tensor is alive, whichever comes first; a later trace installs it again.

At run time the compiled graph (:mod:`tpu_runtime.dynamo_backend`) receives
payloads or tpu tensors, reads their JAX arrays directly and returns tpu
tensors: no host round trip.
"""

from __future__ import annotations

import weakref
from typing import Any, NamedTuple

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false, make_contiguous_strides_for
from torch.utils._python_dispatch import return_and_correct_aliasing
from torch.utils._pytree import tree_leaves, tree_map

from converter.lowering.ops.linalg import GROUPED_MM
from tpu_runtime import graph_checks, tensor as tensor_module
from tpu_runtime.layout import LAYOUT_VIEWS, meta_layouts
from tpu_runtime.tensor import (DEVICE, Storage, TpuTensor, _storage_size, alias, compiling, opaque_tensor,
                                 storage_handle, view_tensor)
from tpu_runtime.values import to_cpu

_MAKE = torch.Tensor._make_wrapper_subclass
#: Tracing tensors alive now; while there is one, :func:`tracing_dispatch` is installed.
_TRACING: weakref.WeakSet = weakref.WeakSet()
_PLAIN: list = []  # the runtime's dispatcher while tracing_dispatch stands in for it
_RESHAPES = frozenset({torch.ops.aten.view.default, torch.ops.aten._unsafe_view.default,
                       torch.ops.aten._reshape_alias.default})
#: Ops recorded as another with the same schema: torch's meta kernel for ``_grouped_mm`` makes
#: CUDA's checks (bfloat16 only), the device runs every dtype (its twin has a plain fake kernel).
_TRACED_AS = {torch.ops.aten._grouped_mm.default: GROUPED_MM}


def storage_twin(storage: Storage) -> torch.UntypedStorage:
    """A second storage object at :func:`~tpu_runtime.tensor.storage_handle`'s address, of its size: what the
    :class:`TpuPayload` a tpu tensor flattens into reports. Code that looks for shared storages by address (Hugging
    Face's ``id_tensor_storage`` flattens a tensor subclass and reads its inner tensors') sees the tensor's;
    PyTorch's fake-tensor conversion (``torch.export`` of a model on the device), which tells storages apart by
    object, sees one the outer tensor does not share: with the same object it took the payload for an alias of the
    outer tensor and failed to set a meta storage on it."""
    if storage.twin is None:
        handle = storage_handle(storage)
        storage.twin = torch._C._construct_storage_from_data_pointer(handle.data_ptr(), DEVICE, handle.nbytes())
    return storage.twin


class TpuPayload(torch.Tensor):
    """The inner tensor of a flattened :class:`TpuTensor` (see the module docstring).

    Attributes:
        tensor: the tpu tensor it stands for.
    """

    __torch_function__ = torch._C._disabled_torch_function_impl

    @staticmethod
    def __new__(cls, tensor: TpuTensor) -> "TpuPayload":
        strides, offset = tensor._payload_stride, 0
        if type(strides) is TracedLayout:
            strides, offset = strides.strides or tensor.stride(), strides.offset
        if strides is None:  # the tensor's own layout (the CPU's, for a view whose layout is known)
            strides, offset = tensor.stride(), tensor.storage_offset()
        r = _MAKE(cls, tensor.shape, dtype=tensor.dtype, device=DEVICE, strides=strides, storage_offset=offset,
                  storage_size=_storage_size(tensor._spec[0], tensor.dtype))  # see tensor._storage_size
        r.tensor = tensor
        return r

    def untyped_storage(self) -> torch.UntypedStorage:
        """A storage at the address of the tpu tensor's it stands for (checkpoint code looks into the flattened
        tensor), not the same object (:func:`~tpu_runtime.tensor.storage_twin`); its own while torch.compile fakes
        it (a storage apart from the outer tensor's)."""
        if compiling() or self.tensor._fake is not None:
            return torch.Tensor.untyped_storage(self)
        return storage_twin(self.tensor._storage)

    def data_ptr(self) -> int:
        """The tpu tensor's :meth:`~tpu_runtime.tensor.TpuTensor.data_ptr` (see :meth:`untyped_storage`)."""
        if compiling():
            return torch.Tensor.data_ptr(self)
        return self.tensor.data_ptr()

    @classmethod
    def __torch_dispatch__(cls, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        # Rare: AOTAutograd's runtime touching an inner tensor. Run the op on the tpu
        # tensors the payloads stand for; hand payloads back.
        unwrap = lambda x: x.tensor if isinstance(x, TpuPayload) else x  # noqa: E731
        out = func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))
        return tree_map(lambda x: TpuPayload(x) if isinstance(x, TpuTensor) else x, out)

    def __coerce_same_metadata_as_tangent__(self, expected_meta: Any, expected_type: Any = None) -> "TpuPayload":
        # A gradient's payload stands where the traced graph had a plain (fake) tensor.
        return self

    def __repr__(self, *, tensor_contents: Any = None) -> str:
        return f"TpuPayload({self.tensor!r})"


def payload(t: TpuTensor) -> torch.Tensor:
    """``t``'s inner tensor for ``torch.compile``: its fake while tracing, else a :class:`TpuPayload`, marked
    as ``t`` is (``torch._dynamo.mark_dynamic`` and the like: dynamo makes the inner tensor's dims dynamic by
    its own marks)."""
    fake = t._fake
    if fake is not None:
        return fake
    p = TpuPayload(t)
    d = t.__dict__
    for k, v in d.items():
        if k.startswith("_dynamo_"):
            setattr(p, k, v)
    if "_static_dims" in d or "_is_param" in d:  # (a property of the tpu tensor: a parameter's dims are static)
        p._dynamo_static_indices = t._dynamo_static_indices
    return p


class TracedLayout(NamedTuple):
    """The flattening context of a traced tensor that has a storage offset (``payload_stride``)."""

    strides: tuple | None  # as payload_stride's plain context: None for the contiguous ones
    offset: int


def payload_stride(t: TpuTensor) -> Any:
    """The context of ``t``'s flattening: the strides of its inner tensor when they are not the
    contiguous ones (``None`` otherwise, and when they are symbolic).

    A tracing tensor's fake keeps the strides of the op that made it, which a marked view's outer
    tensor does not report (:func:`_view_layout`); a concrete tensor's payload has the tensor's own
    layout (its context is ``None``: dynamo guards on the tensor's strides themselves). AOTAutograd
    compares the contexts for the gradient of a compiled graph's output (:func:`coerce_tangent`).
    Dynamo guards on the context of inputs, so a dense tensor's is ``None`` whatever its shape (no
    recompilation when only the shape changes).

    A traced tensor with a static storage offset (an output that views an input ``b[1:]``) also
    carries the offset (a :class:`TracedLayout`): the protocol passes the outer sizes and strides
    back to :func:`unflatten` but no offset, and AOTAutograd rebuilds an output that aliases an input
    as ``input.as_strided(out.size(), out.stride(), out.storage_offset())`` from the run-time output."""
    if type(t._payload_stride) is TracedLayout:
        return t._payload_stride
    inner = t._fake if t._fake is not None else t._payload_stride
    strides = None
    if inner is not None:
        strides = tuple(inner.stride()) if isinstance(inner, torch.Tensor) else tuple(inner)
        if not all(type(s) is int for s in strides) or strides == tuple(make_contiguous_strides_for(t._spec[0])):
            strides = None
    if t._fake is not None:
        offset = t.storage_offset()
        if type(offset) is int and offset:
            return TracedLayout(strides, offset)
    elif t._opaque and not t._chain and t.storage_offset():
        # a concrete tensor at an offset that is no view of another (a compiled graph's output that views one of
        # its intermediates: a KV cache's window ``cat([k, new])[:, :, 1:]`` fed to the next call): its fake gets
        # the offset too (dynamo's fakeification otherwise re-points a fake of another layout at a meta storage,
        # which a tpu tensor refuses)
        return TracedLayout(tuple(t.stride()) if strides is None else strides, t.storage_offset())
    return strides


def coerce_tangent(t: TpuTensor, expected_meta: Any, expected_type: Any) -> torch.Tensor:
    """``__coerce_same_metadata_as_tangent__``: the gradient ``t`` of a compiled graph's output,
    as the traced backward expects it. A tpu tensor's value stands for any layout: a dense alias
    of it reports the traced strides through its payload (AOTAutograd would otherwise re-stride it
    with ``empty_strided`` + ``copy_``, or make a laid-out gradient contiguous, a copy that drops
    the payload's layout); where the graph had a plain tensor, the payload itself."""
    if expected_type is not None and expected_type is not TpuTensor:
        return TpuPayload(t)
    if t._opaque or t._strides is not None:  # (a laid-out gradient: ``y.pow(2)`` of a strided output ``y``)
        r = view_tensor(t._storage, t._spec, t._chain) if t._chain else TpuTensor(t._storage, *t._spec)
    else:
        r = alias(t)
    if expected_meta is not None:
        r._payload_stride = expected_meta if type(expected_meta) is TracedLayout else tuple(expected_meta)
    return r


def tracing_tensor(fake: torch.Tensor, outer_size: Any = None, outer_stride: Any = None,
                   outer_offset: Any = 0) -> TpuTensor:
    """A tracing ``TpuTensor`` around the fake inner tensor ``fake`` (installs :func:`tracing_dispatch`)."""
    size = tuple(fake.shape if outer_size is None else outer_size)
    stride = make_contiguous_strides_for(size) if outer_stride is None else outer_stride
    r = _MAKE(TpuTensor, size, strides=stride, storage_offset=outer_offset, dtype=fake.dtype, device=DEVICE,
              requires_grad=fake.requires_grad)
    r._fake = fake
    r._spec = (size, fake.dtype)
    _TRACING.add(r)
    if tensor_module._DISPATCH[0] is not tracing_dispatch:
        _PLAIN[:] = [tensor_module._DISPATCH[0]]
        tensor_module._DISPATCH[0] = tracing_dispatch
    return r


def tracing_dispatch(func: Any, args: tuple, kwargs: dict) -> Any:
    """The dispatcher while tracing tensors exist: ops on them run on their fakes."""
    plain = _PLAIN[0]
    leaves = tree_leaves((args, kwargs))
    if not any(type(x) is TpuTensor and x._fake is not None for x in leaves):
        if not _TRACING:
            tensor_module._DISPATCH[0] = plain
        return plain(func, args, kwargs)
    for x in leaves:
        if type(x) is TpuTensor and x._fake is None:
            raise RuntimeError(f"torch.compile(backend='tpu'): {func} mixes a traced tpu tensor with a concrete "
                               "one captured from outside the compiled function; pass it as an argument")
    graph_checks.note_traced_call(func, args, kwargs)  # (the CPU's dtype refusals, before any decomposition)
    unwrap = lambda x: x._fake if type(x) is TpuTensor else x  # noqa: E731
    fake_args, fake_kwargs = tree_map(unwrap, args), tree_map(unwrap, kwargs)
    func = _TRACED_AS.get(func, func)
    try:
        out = func(*fake_args, **fake_kwargs)
    except (RuntimeError, ValueError):
        if func not in _RESHAPES:
            raise
        x = args[0]
        if func is torch.ops.aten.view.default and _static((x.shape, x.stride(), x.storage_offset(), args[1])):
            # the layout the tensor reports refuses the view too (``x.t().view(-1)``): the CPU's error
            meta_layouts(func, (args[1],), {}, tuple(x.shape), x.dtype, tuple(x.stride()), x.storage_offset())
        # The outer tensor is viewable (as every dense tpu tensor is) but its fake may not be (an
        # expanded view): torch's reshape saw a viewable tensor and asked for a view, which on
        # that layout PyTorch itself would have made a copy. Record that reshape.
        out = torch.ops.aten.reshape.default(fake_args[0], fake_args[1])
    if isinstance(out, torch.Tensor) and out.device != DEVICE:  # moved off the device (``t.to("meta")`` in
        return out  # forward-mode AD, ``.cpu()``): another device's tensor, no alias of a tpu one to correct
    layout = _view_layout(func, args, kwargs, out)
    layouts = iter(layout[1] or ())

    def wrap(x: Any) -> Any:
        if not isinstance(x, torch.Tensor):
            return x
        strided = next(layouts, None)
        if x.device != DEVICE:
            return x
        if strided is None and layout[1] is None and not layout[0]:  # not a view: laid out as torch lays it
            strided = _laid_out(x)
        w = tracing_tensor(x, None, *strided) if strided is not None else tracing_tensor(x)
        if x.is_conj():  # (a lazy conjugate, ``_conj``'s: torch resolves it where the wrapper says so)
            torch._C._set_conj(w, True)
        if x.is_neg():
            torch._C._set_neg(w, True)
        return w

    if torch.Tag.inplace_view not in func.tags:  # (return_and_correct_aliasing replays those on the wrapper)
        _follow_resizes(args, kwargs)
    wrapped = tree_map(wrap, out)
    if layout[0]:
        for w in tree_leaves(wrapped):
            if type(w) is TpuTensor:
                w._traced_view = True
    return return_and_correct_aliasing(func, args, kwargs, wrapped)


def _follow_resizes(args: tuple, kwargs: dict) -> None:
    """Give each tracing tensor argument whose fake the op resized (``resize_``, an ``out=`` tensor of another
    size) its fake's sizes, as eager ``resize_`` does (:func:`tpu_runtime.resize.rebind`): AOTAutograd then sees
    the input's metadata mutation and replays it on the concrete input after the graph (a copy into the old
    size failed)."""
    for x in tree_leaves((args, kwargs)):
        if type(x) is TpuTensor and x._fake is not None and x._fake.shape != x.shape:
            fake = x._fake
            with torch._C._DisableTorchDispatch():
                torch._C.TensorBase.data.__set__(x, tracing_tensor(fake))
            x._fake, x._spec = fake, (tuple(fake.shape), fake.dtype)


def replay_view(view: Any, new_base: Any, symint_visitor_fn: Any, tensor_visitor_fn: Any) -> Any:
    """``view`` (a concrete tpu view: an input of a compiled function) made again from ``new_base``, its
    base's fake, as ``new_base.as_strided`` of the sizes, strides and offset it reports.

    Dynamo fakes an input that is a view by faking its base and replaying the view on it (a plain
    tensor's view as ``as_strided``; a tensor subclass's through ``_view_func_unsafe``, by default
    its chain of view ops), each int of the replay (``sizes`` here) a symbol of its own that it
    equates with the input's symbolic sizes, strides and offset. A chain replayed op by op leaves
    sizes that are functions of the base's (``src[::2]`` has ``(s0 + 1) // 2`` rows), which the shape
    environment cannot solve for: its guards then named the input's own size symbol with no source
    (an error, or not, depending on the python hash seed), and a dtype view's chain fails on its
    base, which torch has already cast (``view_as_real`` of a real base). As ``as_strided``, each
    replayed int is simply the input's. ``new_base`` has the view's dtype (torch casts it first);
    ``symint_visitor_fn`` makes those symbols (``None``: static sizes)."""
    if new_base.dtype == view.dtype:
        sym = symint_visitor_fn or (lambda s: s)
        return new_base.as_strided([sym(s) for s in view.shape], [sym(s) for s in view.stride()],
                                   sym(view.storage_offset()))
    return torch._C.TensorBase._view_func_unsafe(view, new_base, symint_visitor_fn, tensor_visitor_fn)


_PERMUTES = frozenset({torch.ops.aten.permute.default, torch.ops.aten.t.default, torch.ops.aten.transpose.int})
#: :data:`~tpu_runtime.layout.LAYOUT_VIEWS` and the view ops the runtime computes with them (``t`` → ``permute``,
#: ``_unsafe_view`` → ``view``, ``unbind`` → ``select``…): each traced view of these reports the layout its
#: concrete twin reports (:func:`tpu_runtime.values.make_view`).
_RUNTIME_VIEWS = frozenset({*LAYOUT_VIEWS, *_PERMUTES, *_RESHAPES, torch.ops.aten.squeeze.default,
                            torch.ops.aten.squeeze.dim, torch.ops.aten.detach.default, torch.ops.aten.unbind.int})


def _view_layout(func: Any, args: tuple, kwargs: dict, out: Any) -> tuple[bool, list | None]:
    """How each traced tensor result of ``func`` (``out``: its fake results) reports its layout, as the
    concrete one would (:func:`tpu_runtime.values.make_view`): ``(marked, layouts)``, ``layouts`` a
    ``(strides, offset)`` per tensor output or ``None`` (dense). A view op applied to an unmarked tensor
    reports the CPU's layout (:mod:`tpu_runtime.layout`: dynamo replays a concrete input view on its base
    and checks that the layouts agree): with symbolic arguments (``x[i:i + n]`` over changing sizes), the
    layout of the fake results when the input reports its fake's layout; one the CPU would not make a view,
    or whose symbolic layout is not known, is marked and reports dense strides, and so does any view of a
    marked tensor; other ops (``None`` here) report their fake result's strides when dense in some order
    (:func:`_laid_out`), else dense ones."""
    x = args[0] if args else None
    if type(x) is not TpuTensor or func not in _RUNTIME_VIEWS:
        return False, None
    if x._traced_view:
        return True, None
    if func is torch.ops.aten.as_strided.default:  # its layout is its arguments', symbolic or not, whatever x's
        return False, [(tuple(o.stride()), o.storage_offset()) for o in tree_leaves(out) if isinstance(o, torch.Tensor)]
    stride, offset = tuple(x.stride()), x.storage_offset()
    rest = tuple(args[1:])
    if func in _RESHAPES:
        func, rest, kwargs = torch.ops.aten.view.default, (args[1],), {}
    if not _static((x.shape, stride, offset, rest, kwargs)):
        if func in _PERMUTES:  # a symbolic shape: permuted strides still agree with the concrete ones
            return False, [(_permuted(func, args, stride), offset)]
        if func is torch.ops.aten.detach.default:  # the same layout (dynamo detaches an autograd view's base)
            return False, [(stride, offset)]
        fake = x._fake  # the layout of a view follows from its input's (not the size's symbols)
        if func in LAYOUT_VIEWS and _same((stride, offset), (tuple(fake.stride()), fake.storage_offset())):
            return False, [(tuple(o.stride()), o.storage_offset()) for o in tree_leaves(out)
                           if isinstance(o, torch.Tensor)]
        return True, None
    layouts = meta_layouts(func, rest, kwargs, tuple(x.shape), x.dtype, stride, offset)
    return (True, None) if layouts is None else (False, layouts)


def _same(a: Any, b: Any) -> bool:
    """Whether two trees of ints and SymInts are the same values, without guarding on any symbol."""
    la, lb = tree_leaves(a), tree_leaves(b)
    if len(la) != len(lb):
        return False
    for u, v in zip(la, lb):
        if u is v or (type(u) is int and type(v) is int and u == v):
            continue
        if not (isinstance(u, torch.SymInt) and isinstance(v, torch.SymInt) and u.node.expr == v.node.expr):
            return False
    return True


def _laid_out(fake: torch.Tensor) -> tuple | None:
    """``(strides, 0)`` of a traced op's result that torch lays out densely in another order than the contiguous
    one (an elementwise op of a channels-last input), as eager's results report
    (:func:`tpu_runtime.memory_format.laid_out`); ``None``: contiguous, or symbolic sizes (dense, as before)."""
    shape, stride = tuple(fake.shape), tuple(fake.stride())
    if fake.storage_offset() != 0 or not _static((shape, stride)) \
            or stride == tuple(make_contiguous_strides_for(shape)):
        return None
    return (stride, 0) if is_non_overlapping_and_dense_or_false(fake) else None


def _static(tree: Any) -> bool:
    return not any(isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)) for v in tree_leaves(tree))


def _permuted(func: Any, args: tuple, stride: tuple) -> list:
    n = len(stride)
    if func is torch.ops.aten.permute.default:
        dims = [d % n for d in args[1]]
    else:
        dims = list(range(n))
        if n >= 2:
            d0, d1 = (0, 1) if func is torch.ops.aten.t.default else (args[1] % n, args[2] % n)
            dims[d0], dims[d1] = dims[d1], dims[d0]
    return [stride[d] for d in dims]


def lift_fresh(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """``aten.lift_fresh`` of a tpu tensor: ``torch.tensor(data, device="tpu")`` inside a function
    ``torch.compile`` traces.

    ``torch.tensor`` builds its value outside every dispatch mode (a concrete tpu tensor), then
    lifts it; under the fake mode of a trace, that constant becomes a tracing tensor whose fake
    is the constant's CPU value moved to the device (``lift_fresh_copy`` then ``_to_copy``, both
    recorded by the trace), so it mixes with traced tensors and the compiled graph holds it as a
    constant. Outside a trace the tensor is returned as an alias, as ``lift_fresh`` does.
    """
    t = args[0]
    if torch._C._get_dispatch_mode(torch._C._TorchDispatchModeKey.FAKE) is None:
        return alias(t)
    cpu = torch.ops.aten.lift_fresh_copy.default(to_cpu(t))
    return tracing_tensor(torch.ops.aten._to_copy.default(cpu, device=DEVICE))


def end_tracing() -> None:
    """Put the plain dispatcher back (tracing is over: the backend got the traced graph)."""
    if tensor_module._DISPATCH[0] is tracing_dispatch:
        tensor_module._DISPATCH[0] = _PLAIN[0]


def unflatten(inner: dict, ctx: Any, outer_size: Any, outer_stride: Any) -> TpuTensor:
    """``TpuTensor.__tensor_unflatten__``: a tpu tensor back from its inner tensor.

    The inner tensor is a payload (run time), a tpu tensor (the compiled graph's
    output, already whole) or a fake tensor (tracing: a tracing tensor).
    """
    x = inner["_payload"]
    if isinstance(x, TpuPayload):
        return x.tensor
    if type(x) is TpuTensor and x._fake is None:
        if type(ctx) is TracedLayout and not x._chain:  # a compiled output traced at an offset (payload_stride)
            return opaque_tensor(x._storage, x._spec, tuple(outer_stride), ctx.offset)
        return x
    if getattr(x, "constant", None) is not None:
        # A constant the fake mode folded (``torch.tensor(3).to("tpu")`` inside the compiled
        # function): it stays the fake mode's own constant tensor, as on any other device.
        return x
    # The protocol passes no outer storage offset: a tensor whose inner tensor has its layout (a payload, or
    # its fake: a view of an input's storage) reports the inner one's, as AOTAutograd regenerates an output
    # that views an input (``v.add_(1); return v[0]`` for ``v = b[1:]``) at the traced offset.
    offset = 0
    if type(ctx) is TracedLayout:
        offset = ctx.offset
    elif outer_stride is not None and _same(tuple(outer_stride), tuple(x.stride())):
        offset = x.storage_offset()
    return tracing_tensor(x, outer_size, outer_stride, offset)


__all__ = ["TpuPayload", "payload", "payload_stride", "coerce_tangent", "tracing_tensor", "tracing_dispatch",
           "lift_fresh", "end_tracing", "unflatten"]
