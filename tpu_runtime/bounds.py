"""Out-of-range indices: the CPU's ``IndexError``/``RuntimeError`` instead of XLA's clamped reads and dropped writes.

XLA clamps a gather's out-of-range index and drops a scatter's, so ``x[idx]``, ``index_select``, ``gather``,
``scatter*``, ``index_add``/``index_copy``/``index_fill``/``index_reduce``, ``take``/``put``, ``embedding``,
``embedding_bag`` (its indices, and its offsets' first and last), ``one_hot``, ``max_unpool2d``/``3d``,
``searchsorted``'s ``sorter``, the targets of ``nll_loss``, ``multi_margin_loss`` and ``multilabel_margin_loss``,
and ``masked_scatter`` with a source shorter than the mask's count, gave a wrong value silently. Each such
call (and a call of the op's ``out=`` overload) is checked here first, as its CPU kernel checks it, with
its message:

* an index on the CPU (``x[torch.tensor([7])]``): at once, on the host;
* an index on the device whose values are known on the host and not written since (uploaded from a CPU tensor of up
  to :data:`~tpu_runtime.values._MAX_RANGED` elements, an int64 ``arange``: the storage keeps their smallest and largest), or a
  view of it of the same dtype: passed at once when that range is inside the bounds (a training loop's token ids,
  targets and position ids; no check on the device); otherwise checked as below;
* in debug eager mode: at once (a sync, as every debug op);
* an index on the device in strict and fused eager: a small check that runs with the op (an executable in strict,
  a node of the graph in fused) finds whether an index is out of range and the first one; the error is raised at
  the next sync point (``.cpu()``, ``.item()``, ``print``, ``tpu_runtime.sync()``), as CUDA reports a device-side
  assert, naming the op and the user's line that called it. Only the flags are read then: no extra sync.

Compiled graphs (``torch.compile``) run the same checks inside the compiled program
(:mod:`tpu_runtime.graph_checks`).
"""

from __future__ import annotations

from typing import Any, Callable

import jax.numpy as jnp
import numpy as np
import torch

from converter.errors import caller_location
from tpu_runtime._x64 import x64
from tpu_runtime.cache import CACHE
from tpu_runtime.tensor import TpuTensor
from tpu_runtime.value_checks import VALUE_CHECKS

aten = torch.ops.aten

#: A check of one index tensor: ``(index, lowest allowed, size (None: no upper bound), error type,
#: message(first bad value, its position)[, a value always allowed (or None)[, the part checked (see _part)[,
#: whether a floating tensor is checked (its values, not an index: bounds inclusive, NaN out of range)]]])``; an
#: exception in a list of checks is raised at once (a python argument the CPU refuses).
Check = tuple
#: ``message(value, position)`` of a check: the CPU's error message for the first index out of range.
Message = Callable[[int, int], str]


def _dim_message(dim: int, size: int) -> Message:
    return lambda v, i: f"index {v} is out of bounds for dimension {dim} with size {size}"


def _range_message(v: int, i: int) -> str:
    return "index out of range in self"


def _target_message(v: int, i: int) -> str:
    return f"Target {v} is out of bounds."


def _indexing(a: dict) -> list[Check]:
    """``index.Tensor``/``index_put``: each integer index of ``indices`` against its dimension (negative ones
    count from the end; a k-d mask takes k dimensions); the CPU names the index's position among the tensor
    indices, a mask counting as its k index tensors."""
    checks, dim, k = [], 0, 0
    for idx in a["indices"]:
        if idx is None:
            dim += 1
            continue
        if idx.dtype in (torch.bool, torch.uint8):
            dim, k = dim + max(idx.dim(), 1), k + max(idx.dim(), 1)
            continue
        n = a["self"].shape[dim]
        message = _dim_message(k, n) if n else (lambda v, i: "index is out of bounds for dimension with size 0")
        checks.append((idx, -n, n, IndexError, message))
        dim, k = dim + 1, k + 1
    return checks


def _along(error: type, message: Callable[[int, int], Message],
           negative: bool = False) -> Callable[[dict], list[Check]]:
    """A check of ``index`` against ``self.size(dim)`` (a 0-d ``self``: one element), no negative index unless
    ``negative`` (then counting from the end, as ``index_fill``); ``message(dim, size)`` gives the message."""
    def checks(a: dict) -> list[Check]:
        x, dim = a["self"], a["dim"]
        n, d = (x.shape[dim], dim % x.dim()) if x.dim() else (1, 0)
        return [(a["index"], -n if negative else 0, n, error, message(d, n))]
    return checks


def _embedding(a: dict) -> list[Check]:
    return [(a["indices"], 0, a["weight"].shape[0], IndexError, _range_message)]


def _embedding_bag(a: dict) -> list[Check]:
    """``_embedding_bag``/``_embedding_bag_forward_only``: the offsets' first (0) and last (at most the number of
    indices), then each index, with the CPU's messages (a ``max`` bag's kernel words it differently)."""
    indices, offsets, n = a["indices"], a["offsets"], a["weight"].shape[0]
    length = indices.numel()
    checks = []
    if offsets.dim() == 1 and indices.dim() == 1:
        kind = {torch.int64: "Long", torch.int32: "Int"}.get(offsets.dtype, "")
        checks += [(offsets, 0, 1, RuntimeError, lambda v, i: "offsets[0] has to be 0, i.e., the first sequence in "
                    f"the mini-batch has to start from position 0. However, got {v}\n[ torch.{kind}Tensor{{}} ]",
                    None, (0, 1)),
                   (offsets, None, length + 1, RuntimeError, lambda v, i: "offsets[-1] can not be greater than "
                    f"input's length {length} but got offsets[-1] of {v}", None, (-1, None))]
    if a.get("mode", 0) == 2:
        message = lambda v, i: f"embedding_bag: Expected idx >= 0 && idx < num_embeddings but found idx to be {v}"  # noqa: E731
    else:
        message = lambda v, i: f"Index {i} of input takes value {v} which is not in the valid range [0, {n})"  # noqa: E731
    return checks + [(indices, 0, n, RuntimeError, message)]


def _nll(a: dict) -> list[Check]:
    x, target = a["self"], a["target"]
    classes = x.shape[0] if x.dim() == 1 else x.shape[1]
    return [(target, 0, classes, IndexError, _target_message, a["ignore_index"])]


def _one_hot(a: dict) -> list[Check]:
    n = a.get("num_classes", -1)  # (-1: the class count is the largest value, nothing is out of range above)
    return [(a["self"], 0, n if n >= 0 else None, RuntimeError, _class_message)]


def _unpool(a: dict) -> list[Check]:
    """``max_unpool2d``/``3d``: each index into its plane of the output (``output_size``'s elements)."""
    size = [int(s) for s in a["output_size"]]
    n = 1
    for s in size:
        n *= s
    shape = "x".join(map(str, size))
    return [(a["indices"], 0, n, RuntimeError,
             lambda v, i: f"Found an invalid max index: {v} (output volumes are of size {shape})")]


def _margin_target(a: dict) -> list[Check]:
    """``multi_margin_loss``: each target a class of ``self``'s last dimension."""
    x = a["self"]
    classes = x.shape[-1] if x.dim() else 1
    return [(a["target"], 0, classes, RuntimeError, lambda v, i: "target out of range")]


def _multilabel_target(a: dict) -> list[Check]:
    """``multilabel_margin_loss``: each target a class of ``self``'s last dimension or -1 (the end of the row's
    labels)."""
    x = a["self"]
    classes = x.shape[-1] if x.dim() else 1
    return [(a["target"], -1, classes, RuntimeError, lambda v, i: "argument #2 'target' is out of range")]


def _sorter(a: dict) -> list[Check]:
    """``searchsorted``'s ``sorter``: positions along the sorted sequence's last dimension."""
    sorter, seq = a.get("sorter"), a["sorted_sequence"]
    if sorter is None or seq.dim() == 0:
        return []
    return [(sorter, 0, seq.shape[-1], RuntimeError, lambda v, i: "torch.searchsorted(): sorter index out of range")]


def _masked_scatter(a: dict) -> list[Check]:
    """``masked_scatter``: the mask (as broadcast to the result) has no more ones than the source has elements; the
    count is checked on the mask itself, each of its elements standing for ``result / mask`` elements."""
    x, mask, n = a["self"], a["mask"], a["source"].numel()
    size = torch.broadcast_shapes(tuple(x.shape), tuple(mask.shape)).numel()
    if not mask.numel() or not size:
        return []
    per = size // mask.numel()
    return [(mask, 0, n // per + 1, RuntimeError, lambda v, i: "Number of elements of source < number of ones in mask",
             None, "count")]


def _class_message(v: int, i: int) -> str:
    return "Class values must be non-negative." if v < 0 else "Class values must be smaller than num_classes."


def _index_select(a: dict) -> list[Check]:
    """``index_select``: the CPU's message and error type differ off dimension 0 of a tensor of several."""
    x = a["self"]
    if x.dim() > 1 and a["dim"] % x.dim():
        n = x.shape[a["dim"]]
        return [(a["index"], 0, n, RuntimeError, lambda v, i: f"INDICES element is out of DATA bounds, id={v} "
                                                           f"axis_dim={n}")]
    return _RANGE(a)


def _index_add(a: dict) -> list[Check]:
    """``index_add``: the CPU's 1-d kernel words its error as ``embedding``'s (an ``IndexError``)."""
    return _RANGE(a) if a["self"].dim() <= 1 else _ALONG(a)


def _flat(a: dict) -> list[Check]:
    """``take``/``put``: flat indices, negative ones counting from the end."""
    n = a["self"].numel()
    return [(a["index"], -n, n, IndexError,
             lambda v, i: f"out of range: tried to access index {v} on a tensor of {n} elements.")]


def _index_copy_message(dim: int, size: int) -> Message:
    return lambda v, i: "index_copy_(): " + _dim_message(dim, size)(v, i)


_ALONG = _along(RuntimeError, _dim_message)
_RANGE = _along(IndexError, lambda dim, n: _range_message)
_INDEX_COPY = _along(IndexError, _index_copy_message)
_INDEX_FILL = _along(IndexError, _dim_message, negative=True)

#: op → the checks of its index arguments, given the call's arguments by name.
CHECKS: dict[Any, Callable[[dict], list[Check]]] = {
    aten.index.Tensor: _indexing,
    aten.index_put.default: _indexing,
    aten.index_put_.default: _indexing,
    aten._index_put_impl_.default: _indexing,
    aten.index_select.default: _index_select,
    aten.gather.default: _ALONG,
    aten.embedding.default: _embedding,
    aten._embedding_bag.default: _embedding_bag,
    aten._embedding_bag_forward_only.default: _embedding_bag,
    aten.nll_loss_forward.default: _nll,
    aten.nll_loss2d_forward.default: _nll,
    aten.one_hot.default: _one_hot,
    aten.max_unpool2d.default: _unpool,
    aten.max_unpool3d.default: _unpool,
    aten.multi_margin_loss.default: _margin_target,
    aten.multilabel_margin_loss_forward.default: _multilabel_target,
    aten.searchsorted.Tensor: _sorter,
    aten.searchsorted.Scalar: _sorter,
    aten.masked_scatter.default: _masked_scatter,
    aten.masked_scatter_.default: _masked_scatter,
    aten.take.default: _flat,
    aten.put.default: _flat,
    aten.put_.default: _flat,
    aten.index_add.default: _index_add,
    aten.index_add_.default: _index_add,
    aten.index_copy.default: _INDEX_COPY,
    aten.index_copy_.default: _INDEX_COPY,
    aten.index_fill.int_Scalar: _INDEX_FILL,
    aten.index_fill_.int_Scalar: _INDEX_FILL,
    aten.index_fill.int_Tensor: _INDEX_FILL,
    aten.index_fill_.int_Tensor: _INDEX_FILL,
    aten.index_reduce.default: _RANGE,
    aten.index_reduce_.default: _RANGE,
    **{op: _ALONG for op in (aten.scatter.src, aten.scatter.value, aten.scatter.reduce, aten.scatter.value_reduce,
                             aten.scatter_.src, aten.scatter_.value, aten.scatter_.reduce, aten.scatter_.value_reduce,
                             aten.scatter_add.default, aten.scatter_add_.default, aten.scatter_reduce.two,
                             aten.scatter_reduce_.two)},
    **VALUE_CHECKS,
}


def _out_variants(checks: dict) -> dict:
    """The ``out=`` overloads of the ops of ``checks`` (the same arguments, names and types, plus ``out``), each
    checked as its op: ``torch.gather(x, 1, i, out=o)``, ``torch.floor_divide(a, b, out=o)``."""
    found = {}
    for op, fn in checks.items():
        signature = [(a.name, str(a.type)) for a in op._schema.arguments]
        packet = op.overloadpacket
        for name in packet.overloads():
            other = getattr(packet, name)
            arguments = other._schema.arguments
            if (other not in checks and any(a.is_out for a in arguments)
                    and [(a.name, str(a.type)) for a in arguments if not a.is_out] == signature):
                found[other] = fn
    return found


CHECKS.update(_out_variants(CHECKS))
#: ``id`` of each checked op (the dispatcher's per-op test: an op overload hashes by a python call).
CHECKED_IDS = frozenset(id(op) for op in CHECKS)

#: Checks waiting for the next sync point: ``(flags, error type, message, op, where)``.
_PENDING: list[tuple] = []
#: Pending checks past this many are read at once (a loop that never syncs keeps no unbounded list).
_MAX_PENDING = 256


#: ``id`` of a checked op → its argument names (the ops are the module-level overloads of CHECKS: never freed).
_NAMES: dict[int, tuple] = {}


def check(func: Any, args: tuple, kwargs: dict) -> None:
    """Check the index arguments of ``func(*args, **kwargs)`` (see the module docstring).

    Raises:
        IndexError, RuntimeError: an index out of range on the CPU or in debug mode (the CPU's message).
    """
    names = _NAMES.get(id(func))
    if names is None:  # (an op's argument names, read from its schema once: the schema makes new objects per read)
        names = _NAMES[id(func)] = tuple(a.name for a in func._schema.arguments)
    named = dict(zip(names, args), **kwargs)
    try:
        checks = CHECKS[func](named)
    except (IndexError, RuntimeError, TypeError, KeyError):  # a bad call (a dim out of range): the op says so
        return
    for c in checks:
        if isinstance(c, BaseException):
            raise c
        idx, low, size, error, message = c[:5]
        ignore, part, values = (c + (None, None, False))[5:8]
        if not isinstance(idx, torch.Tensor) or idx.numel() == 0 or (idx.is_floating_point() and not values):
            continue
        if size == 0 and ignore is None:  # every index is out of range (the op itself would fail otherwise)
            raise error(message(int(idx.reshape(-1)[0].item()), 0))
        if type(idx) is not TpuTensor or idx._fake is not None:
            if type(idx) is TpuTensor or idx.device.type != "cpu":
                continue  # (a traced tensor: the compiled graph checks it, see tpu_runtime.graph_checks)
            host = idx.float() if idx.dtype in (torch.float16, torch.bfloat16) else idx
            bad, first, at = _host_flags(host.numpy(force=True), low, size, ignore, part)
            if bad:
                raise error(message(first, at))
            continue
        known = idx._storage.known_range()  # (any view of the storage's values of its dtype lies within)
        if (known is not None and idx._spec[1] is idx._storage.spec[1] and part is None
                and (low is None or known[0] >= low) and (size is None or known[1] < size)):
            continue
        from tpu_runtime.eager import executor
        from tpu_runtime.values import read

        ex = executor()
        found = ex.run(_flags_plan(idx._spec, low, size, ignore, part), [read(idx)])[0]
        if ex.name == "debug":
            bad, first, at = np.asarray(found).tolist()
            if bad:
                raise error(message(first, at))
            continue
        queue(found, error, message, func, caller_location())


def queue(flags: Any, error: type, message: Message, func: Any, where: Any) -> None:
    """Keep a check's ``flags`` (see :func:`flags`, computed on the device) for the next sync point, which raises
    ``error(message(value, position))`` if they found a value out of range (``func``, ``where``: the op and the
    user's line, for the error's note)."""
    _PENDING.append((flags, error, message, func, where))
    if len(_PENDING) > _MAX_PENDING:
        raise_pending()


def one_hot(self: Any, num_classes: int = -1) -> Any:
    """``aten::one_hot(Tensor self, int num_classes=-1) -> Tensor`` for tpu tensors (registered at the
    AutogradPrivateUse1 key: torch's composite skips its range checks on this device, and decomposes before
    the dispatcher sees the call): the values are checked, then torch's composite runs."""
    if self.dtype != torch.int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if self.numel() == 0 and num_classes < 0:
        raise RuntimeError("Can not infer total number of classes from empty tensor.")
    with x64():
        check(aten.one_hot.default, (self, num_classes), {})
    return aten.one_hot.default.decompose(self, num_classes)


def drop_since(mark: int) -> None:
    """Forget the checks queued after the first ``mark``: their op failed for another reason (its own error
    is the one to see)."""
    del _PENDING[mark:]


def raise_pending() -> None:
    """At a sync point: raise the error of the first pending check that found an index out of range (the rest
    are dropped, as a device-side assert stops everything after it); else forget them.

    Raises:
        IndexError, RuntimeError: the CPU's message, with the op and the user's line that called it.
    """
    if not _PENDING:
        return
    from tpu_runtime.eager.lazy import concrete

    pending = list(_PENDING)
    _PENDING.clear()
    for found, error, message, func, where in pending:
        bad, first, at = np.asarray(concrete(found)).tolist()
        if bad:
            e = error(message(first, at))
            e.add_note(f"(an index of {func} at {where}, found out of range at this sync point: the device "
                       "clamped the read or dropped the write)")
            raise e


def _host_flags(idx: np.ndarray, low: int | None, size: int | None, ignore: Any,
                part: tuple | None = None) -> tuple[bool, int, int]:
    """``(any index out of [low, size), the first such index, its position)`` of a CPU index (``part``: of
    ``idx.reshape(-1)[start:stop]`` only)."""
    flat = _part(idx, part, np)
    out = _out_of_range(flat, low, size, np)
    if ignore is not None:
        out &= flat != ignore
    if not out.any():
        return False, 0, 0
    at = int(np.argmax(out))
    return True, flat[at].item(), at


def _part(x: Any, part: Any, xp: Any) -> Any:
    """The values a check looks at (``xp``: numpy or jax.numpy): ``x`` flattened (``part`` None), a ``(start,
    stop)`` slice of that, the number of its nonzero (``"count"``) or zero (``"zeros"``) elements, or whether each
    row (along the last dimension) sums above 0 (``"positive rows"``: 1 or 0)."""
    if part is None:
        return x.reshape(-1)
    if part == "count":
        return xp.sum(x != 0, dtype=xp.int64).reshape(1)
    if part == "zeros":
        return xp.sum(x == 0, dtype=xp.int64).reshape(1)
    if part == "positive rows":
        return (x.reshape(-1, x.shape[-1]).sum(-1) > 0).astype(xp.int64)
    return x.reshape(-1)[slice(*part)]


def _out_of_range(x: Any, low: Any, size: Any, xp: Any) -> Any:
    """Where ``x`` is out of ``[low, size)`` (``None``: unbounded); floating values: out of ``[low, size]``, NaN
    included."""
    if xp.issubdtype(x.dtype, xp.floating):
        return ~((x >= low) & (x <= size))
    if low is None:
        return x >= size
    return x < low if size is None else (x < low) | (x >= size)


_PLANS: dict[tuple, Any] = {}
CACHE.on_clear(_PLANS.clear)


def _flags_plan(spec: tuple, low: int | None, size: int | None, ignore: Any, part: tuple | None = None) -> Any:
    """The plan computing ``[any index out of [low, size), the first such index, its position]`` (one int64 array:
    one output of a fused graph per check) of an index of ``spec`` (``part``: of a slice of its flattened
    elements)."""
    from tpu_runtime.plans import custom_plan

    key = ("index bounds", spec, low, size, ignore, part)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = custom_plan(key, "index bounds", lambda idx: (flags(idx, low, size, ignore, part),),
                                         (((3,), torch.int64),))
    return plan


def flags(idx: Any, low: int | None, size: int | None, ignore: Any, part: Any = None) -> Any:
    """``[any value out of [low, size), the first such value, its position]`` of the JAX array ``idx`` (``part``:
    of that part of it, see :func:`_part`) as one int64 array (traceable: eager checks and compiled graphs)."""
    flat = _part(idx, part, jnp)
    out = _out_of_range(flat, low, size, jnp)
    if ignore is not None:
        out = out & (flat != ignore)
    at = jnp.argmax(out)
    return jnp.stack([jnp.any(out).astype(jnp.int64), flat[at].astype(jnp.int64), at.astype(jnp.int64)])


__all__ = ["CHECKS", "CHECKED_IDS", "check", "drop_since", "flags", "queue", "one_hot", "raise_pending"]
