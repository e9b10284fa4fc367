"""Reading and writing tpu tensors: storages, view chains, host transfers.

A view's value is its chain of view plans replayed on the storage value (cached
until the storage's version changes). Writing through a view scatters the new
value into the storage: the chain is replayed on an index array
(``arange(numel).reshape(base shape)``) with the lowerings' own view functions,
which yields, for every element of the view, the flat position it aliases;
``base.ravel().at[positions].set(value)`` is then correct for any chain of
slicing, selecting, permuting, reshaping, diagonal or unfolding views, in any
order. A write through an expanded view (several elements aliasing one location)
is refused, as PyTorch refuses it.

Replay and scatter are plans like any op: cached executables in strict mode,
recorded nodes in fused mode.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.dtypes import numpy_to_tensor, tensor_to_numpy, to_jax_dtype, to_torch_dtype
from converter.lowering.ops.convert import lower_view_dtype
from tpu_runtime._x64 import x64
from tpu_runtime.bounds import _PENDING as _PENDING_CHECKS
from tpu_runtime.bounds import raise_pending
from tpu_runtime.cache import CACHE
from tpu_runtime.eager import executor
from tpu_runtime.eager.lazy import LazyRef, concrete, concrete_all, run
from tpu_runtime.layout import LAYOUT_VIEWS, meta_layouts
from tpu_runtime.plans import OpPlan, _Slot, custom_plan
from tpu_runtime.tensor import Storage, TpuTensor, dense_strides, view_tensor, wrap

_PLANS: dict[tuple, OpPlan] = {}
CACHE.on_clear(_PLANS.clear)
_DEVICE = jax.devices()[0]

#: View ops whose elements alias each other: writes through them are refused.
_OVERLAPPING = (torch.ops.aten.expand.default,)


def _zeros_plan(spec: tuple) -> OpPlan:
    key = ("zeros", spec)
    plan = _PLANS.get(key)
    if plan is None:
        shape, dtype = spec
        jdt = to_jax_dtype(dtype)
        plan = _PLANS[key] = custom_plan(key, "empty (zeros)", lambda: (jnp.zeros(shape, jdt),), (spec,))
    return plan


def storage_value(s: Storage) -> Any:
    """The storage's value (an uninitialized storage becomes zeros)."""
    v = s.value
    if v is None:
        v = s.value = executor().run(_zeros_plan(s.spec), [])[0]
    elif type(v) is LazyRef and v.concrete is not None:
        v = s.value = v.concrete
    return v


def read(t: TpuTensor) -> Any:
    """``t``'s value: a ``jax.Array``, or a pending :class:`LazyRef` in fused mode."""
    s = t._storage
    if not t._chain:
        return storage_value(s)
    if t._seen == s.version and t._cached is not None:
        v = t._cached
        if type(v) is LazyRef and v.concrete is not None:
            v = t._cached = v.concrete
        return v
    plan = _replay_plan(t._chain, s.spec)
    v = executor().run(plan, [storage_value(s)])[0]
    t._cached, t._seen = v, s.version
    if type(v) is LazyRef and v.graph is not None:
        v.graph.cache_view(t, v)
    return v


def write(t: TpuTensor, value: Any, uniform: bool = False) -> None:
    """Replace ``t``'s value with ``value`` (same shape and dtype), through its view chain.

    ``uniform``: every element of ``value`` is the same (``fill_``, ``zero_``), so a write through a view
    whose elements overlap is well defined, and allowed, as on the CPU (``x.expand(2, 3).fill_(1)``).

    Raises:
        RuntimeError: the chain contains a view whose elements overlap (expand, or an ``as_strided`` with a
            zero stride: a compiled function's expanded output) and ``value`` is not uniform.
    """
    s = t._storage
    if not t._chain:
        if type(value) is LazyRef and value.concrete is None and value.graph is not None:  # (not a packed one)
            value.graph.replaced(value, s.value)
        s.value = value
        s.version += 1
        return
    culprit = None if uniform else _overlap(t)
    if culprit is not None:
        raise RuntimeError(f"unsupported operation: in-place write into a tpu tensor created by {culprit.name}: "
                           "more than one element of the written-to tensor refers to a single memory "
                           "location. Please clone() the tensor before performing the operation.")
    plan = _scatter_plan(t._chain, s.spec)
    old = storage_value(s)
    s.value = executor().run(plan, [old, value])[0]
    if type(s.value) is LazyRef and s.value.graph is not None:
        s.value.graph.replaced(s.value, old)
    del old  # not held past the write: a graph may write into its buffer (fused._donation)
    s.version += 1
    t._cached, t._seen = value, s.version
    if type(value) is LazyRef and value.concrete is None and value.graph is not None:
        value.graph.cache_view(t, value)


def _overlap(t: TpuTensor) -> Any:
    """The view op that makes elements of the view ``t`` share memory, or ``None``.

    With its layout known (``t._strides``), as the CPU decides: a zero stride on a longer dimension
    (``x.expand(2, 3)``, an ``as_strided`` of an expand); ``x.expand(2, 3)[0]`` does not overlap. Else any
    expand in its chain."""
    strides = t._strides
    if strides is None:
        return next((plan for plan, _ in t._chain if plan.op in _OVERLAPPING), None)
    if any(not st and n > 1 for n, st in zip(t._spec[0], strides)):
        return next((plan for plan, _ in reversed(t._chain) if plan.op in _OVERLAPPING), t._chain[-1][0])
    return None


def materialize(t: TpuTensor, cause: str = "value read") -> jax.Array:
    """``t``'s concrete value (a sync point in fused mode, counted for ``cause`` in the fused report, where the
    index checks waiting for one raise: :mod:`tpu_runtime.bounds`)."""
    v = concrete(read(t), cause)
    if _PENDING_CHECKS:
        raise_pending()
    return v


def materialize_all(ts: list, cause: str = "value read") -> list:
    """:func:`materialize` of each tpu tensor of ``ts``, the values fused graphs returned packed cut out together: one
    call per packed array (:func:`~tpu_runtime.eager.packing.unpack_many`)."""
    out = concrete_all([read(t) for t in ts], cause)
    if _PENDING_CHECKS:
        raise_pending()
    return out


def ready_array(t: TpuTensor) -> jax.Array:
    """An array that is ready once ``t``'s value is (a sync point in fused mode, as :func:`materialize`): its value,
    or for a value a fused graph returned packed the packed array, which waiting for does not cut the value out
    (:mod:`tpu_runtime.eager.packing`)."""
    v = read(t)
    if type(v) is LazyRef:
        run(v)  # (runs its graph if pending: the value may come back packed, and stays so)
    if _PENDING_CHECKS:
        raise_pending()
    return v.packed[0] if type(v) is LazyRef and v.packed is not None else concrete(v)


def _chain_key(chain: tuple) -> tuple:
    # a plan's uid stands for its key (one plan per key), and hashes as one int
    return tuple((p.uid, i) for p, i in chain)


def _replay_plan(chain: tuple, spec: tuple) -> OpPlan:
    key = ("view", _chain_key(chain))
    plan = _PLANS.get(key)
    if plan is None:
        steps = [(p.fn, i) for p, i in chain]

        def replay(base: Any) -> tuple:
            x = base
            for fn, i in steps:
                x = fn(x)[i]
            return (x,)

        last, idx = chain[-1]
        plan = _PLANS[key] = custom_plan(key, "view " + " → ".join(p.name for p, _ in chain), replay,
                                         (last.out_specs[idx],))
    return plan


#: Views that change values (or dtype), and how a value written into one maps back to its source:
#: element positions cannot be traced through them, so a write goes through them by value.
#: Each maps ``(the view's new value, its source's old value)`` to the source's new value.
_VALUE_VIEWS = {
    torch.ops.aten.view_as_real.default: lambda x, src: jax.lax.complex(x[..., 0], x[..., 1]),
    torch.ops.aten.view_as_complex.default: lambda x, src: jnp.stack([jnp.real(x), jnp.imag(x)], -1),
    torch.ops.aten._conj.default: lambda x, src: jnp.conj(x),
    torch.ops.aten._neg_view.default: lambda x, src: jnp.negative(x),
    # the bits reinterpreted back as the source's dtype
    torch.ops.aten.view.dtype: lambda x, src: lower_view_dtype(None, x, to_torch_dtype(src.dtype)),
}


def _scatter_plan(chain: tuple, spec: tuple) -> OpPlan:
    key = ("scatter", _chain_key(chain), spec)
    plan = _PLANS.get(key)
    if plan is None:
        steps = [(p.op, p.fn, p.raw, i) for p, i in chain]

        def scatter(base: Any, value: Any) -> tuple:
            return (_written(base, steps, value),)

        plan = _PLANS[key] = custom_plan(key, "write through " + " → ".join(p.name for p, _ in chain), scatter,
                                         (spec,))
    return plan


def _written(base: Any, steps: list, value: Any) -> Any:
    """``base`` with ``value`` written into the view that ``steps`` (``(op, fn, raw fn, output)``) make of it.

    Position-preserving views are traced on element positions and the value scattered there; through a view
    that changes values (:data:`_VALUE_VIEWS`: ``c.real``, ``c.imag`` are ``view_as_real`` then ``select``) the
    written view's source is rebuilt from the updated view, then written into its own source the same way."""
    k = max((j for j, step in enumerate(steps) if step[0] in _VALUE_VIEWS), default=None)
    if k is None:
        return _scattered(base, [(raw, i) for _, _, raw, i in steps], value)
    src = base
    for _, fn, _, i in steps[:k]:
        src = fn(src)[i]
    op, fn, _, i = steps[k]
    inner = fn(src)[i]
    inner = _scattered(inner, [(raw, j) for _, _, raw, j in steps[k + 1:]], value)
    src = _VALUE_VIEWS[op](inner, src).astype(src.dtype)
    return _written(base, steps[:k], src) if k else src


def _scattered(base: Any, steps: list, value: Any) -> Any:
    """``base`` with ``value`` written at the element positions the view ``steps`` (``(raw fn, output)``) select."""
    if not steps:
        return jnp.broadcast_to(value, base.shape).astype(base.dtype)
    size = int(np.prod(base.shape, dtype=np.int64))
    pos = jnp.arange(size, dtype=jnp.int32 if size < 2**31 else jnp.int64).reshape(base.shape)
    for fn, i in steps:
        pos = fn(pos)[i]
    return base.reshape(-1).at[pos.reshape(-1)].set(value.reshape(-1).astype(base.dtype)).reshape(base.shape)


def make_view(src: TpuTensor, plan: OpPlan, index: int, spec: tuple) -> TpuTensor:
    """A view of ``src`` produced by output ``index`` of the view op ``plan`` (value computed lazily).

    When ``src``'s layout in its storage is known (its storage itself, or such a view), the view
    reports the strides and storage offset the CPU would (:mod:`tpu_runtime.layout`): autograd picks
    its matmul gradient formulas by strides (a linear layer's weight gradient comes out in the
    weight's layout, no transposed copy), AOTAutograd and dynamo rebuild and check input views by
    them. So do views of an opaque tensor (channels-last: ``x[:, :, 1:]``), from the layout it
    reports. A view that ends in the storage's own layout (``w.t().t()``) gives the storage itself,
    with no view step to replay. Other views (of a view whose layout is not known) report the dense
    strides of their shape."""
    chain = src._chain
    storage = src._storage
    if chain:
        if src._strides is None:
            return view_tensor(storage, spec, chain + ((plan, index),))
        key = (plan.uid, index, src._strides, src._offset)
    elif src._opaque:  # reports a layout its dense value does not have (channels-last, a compiled output)
        key = (plan.uid, index) + storage.placed
    else:
        key = (plan.uid, index)
    layout = _LAYOUTS.get(key, _UNKNOWN)
    if layout is _UNKNOWN:
        strides, offset = (src._strides, src._offset) if chain else \
            storage.placed if src._opaque else (dense_strides(src._spec[0]), 0)
        layout = _LAYOUTS[key] = _view_layout(plan, index, src._spec, strides, offset)
    if layout is None:
        return view_tensor(storage, spec, chain + ((plan, index),))
    strides, offset = layout
    if not offset and spec == storage.spec and strides == dense_strides(spec[0]) and storage.placed is None:
        return TpuTensor(storage, spec[0], spec[1])
    return view_tensor(storage, spec, chain + ((plan, index),), strides, offset)


_VIEW_DTYPE = torch.ops.aten.view.dtype
#: (plan uid, output index[, source strides, source offset]) → the view's (strides, offset), or None.
_LAYOUTS: dict[tuple, tuple | None] = {}
CACHE.on_clear(_LAYOUTS.clear)
_UNKNOWN = object()


def _view_layout(plan: OpPlan, index: int, spec: tuple, strides: tuple, offset: int) -> tuple | None:
    """The CPU's layout of ``plan``'s output ``index`` for a source of ``spec`` laid out as given."""
    targs, tkwargs = plan.extra.get("targs"), plan.extra.get("tkwargs", {})
    if plan.op is _VIEW_DTYPE and targs and type(targs[0]) is _Slot and strides != dense_strides(spec[0]):
        meta_layouts(plan.op, tuple(targs[1:]), dict(tkwargs), spec[0], spec[1], strides, offset)  # (the CPU's refusal)
        return None  # (it reports the dense strides of its shape)
    if plan.op not in LAYOUT_VIEWS or not targs or type(targs[0]) is not _Slot \
            or any(type(a) is _Slot for a in (*targs[1:], *tkwargs.values())):
        return None
    layouts = meta_layouts(plan.op, tuple(targs[1:]), dict(tkwargs), spec[0], spec[1], strides, offset)
    return layouts[index] if layouts is not None and index < len(layouts) else None


def convert_plan(src_spec: tuple, dst_spec: tuple) -> OpPlan:
    """``src`` cast to ``dst``'s dtype and broadcast to its shape (``copy_`` between tpu tensors).

    Raises:
        RuntimeError: ``src``'s shape does not broadcast to ``dst``'s (torch's message, from its meta kernel).
    """
    key = ("convert", src_spec, dst_spec)
    plan = _PLANS.get(key)
    if plan is None:
        shape, dtype = dst_spec
        if src_spec[0] != shape:
            torch.empty(shape, device="meta").copy_(torch.empty(src_spec[0], device="meta"))
        jdt = to_jax_dtype(dtype)
        from converter.lowering.ops.convert import cast

        plan = _PLANS[key] = custom_plan(key, "copy_", lambda x: (jnp.broadcast_to(cast(x, jdt), shape),),
                                         (dst_spec,))
    return plan


# --------------------------------------------------------------------------- host transfers


def numpy_view(t: torch.Tensor) -> np.ndarray:
    """A torch tensor's data as a NumPy array on the host (bfloat16/float8 as ml_dtypes arrays);
    a view of its memory when it already is a contiguous CPU tensor."""
    t = t.detach()
    if t.device.type != "cpu":
        t = t.cpu()
    return tensor_to_numpy(t.contiguous())


def upload(cpu: torch.Tensor) -> jax.Array:
    """A CPU tensor → a JAX array on the device (bfloat16 kept).

    The data is copied first: on a CPU backend ``device_put`` may alias the host
    buffer, and the torch tensor can be written to after the (lazy) upload.
    """
    return jax.device_put(host_operand(cpu), _DEVICE)


#: Integer dtypes whose uploaded values are kept as a range (:func:`upload_into`).
_RANGED = frozenset({torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8})
#: Uploads of more elements than this are not scanned for their range (a host pass over the copy, on each upload).
_MAX_RANGED = 1 << 16


def upload_into(dst: TpuTensor, cpu: torch.Tensor) -> None:
    """Write the CPU tensor ``cpu`` (of ``dst``'s shape and dtype) into ``dst``, uploaded (``x.to("tpu")``). An
    integer tensor's smallest and largest values (of up to :data:`_MAX_RANGED` elements) are kept with ``dst``'s
    storage, read on the host copy: an index check of it (or of a view of it) before anything writes it again is then
    decided at once, with no check on the device and no flag to read at the next sync (:func:`tpu_runtime.bounds.check`:
    a training loop's token ids and targets, uploaded each step)."""
    host = host_operand(cpu)
    write(dst, jax.device_put(host, _DEVICE))
    if dst._spec[1] in _RANGED and 0 < host.size <= _MAX_RANGED and not dst._chain:
        dst._storage.note_range(int(host.min()), int(host.max()))


def host_operand(cpu: torch.Tensor) -> np.ndarray:
    """A CPU tensor operand of a tpu op (a wrapped scalar of a backward formula, an index
    tensor) as a NumPy copy: the executable takes it like an array on the default device,
    at ~5 µs where :func:`upload`'s ``device_put`` costs ~150 µs. Copied, because the op
    may run later (fused eager) than torch writes to the tensor."""
    return np.array(numpy_view(cpu), copy=True, order="C")


def array_to_tpu(a: Any) -> TpuTensor:
    """A JAX array → a tpu tensor holding it (no copy)."""
    return wrap(a, (tuple(a.shape), to_torch_dtype(a.dtype)))


def array_to_torch(a: Any) -> torch.Tensor:
    """A JAX array → a CPU torch tensor (bfloat16/float8 kept, data copied)."""
    return numpy_to_tensor(np.array(a, copy=True))


def to_cpu(t: TpuTensor) -> torch.Tensor:
    """``t``'s data as a CPU tensor (a sync point; callable outside dispatch, e.g. from ``repr``)."""
    with x64():
        out = array_to_torch(materialize(t))
    return out.reshape(t._spec[0]).to(t._spec[1])
