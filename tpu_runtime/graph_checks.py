"""Index and value checks inside ``torch.compile(backend="tpu")`` graphs: the CPU's error, not XLA's clamped read.

Eager mode checks every call of an op of :data:`tpu_runtime.bounds.CHECKS` as it runs. A compiled graph holds the
same ops (after AOTAutograd's decompositions: ``cross_entropy``'s target is checked as the index of the
``gather`` it decomposes to), so each checked argument's flags — the same small computation eager mode runs:
whether a value is out of range, the first one, its position (:func:`tpu_runtime.bounds.flags`) — are computed
inside the compiled program as extra outputs (:func:`observers`, called by the lowering interpreter with the
node's argument values) and read after the run (:func:`report`):

* a graph of CPU tensors ends on the host (its outputs are copied back): the call raises, as on the CPU;
* a graph of tpu tensors runs asynchronously: the error is raised at the next sync point, as eager mode's (and a
  CUDA device-side assert), with a note naming the op and the user's line.

The checks are asked with the concrete shapes of each compiled signature, so a graph with dynamic sizes
(``dynamic=True``) checks against this call's sizes. A python argument the CPU refuses (``uniform_(from > to)``)
raises on every call of the graph; so does a call whose input dtypes the CPU refuses (``softmax`` of ints: eager
mode's probe, :func:`tpu_runtime.cpu_refusals.dtype_refusal`), asked of each graph node (:func:`_refused_dtypes`) and,
for tpu tensors, of each call AOTAutograd traces before torch's decompositions (:func:`note_traced_call`).
"""

from __future__ import annotations

import contextlib
import functools
from operator import itemgetter
from types import SimpleNamespace
from typing import Any, NamedTuple

import jax.numpy as jnp
import numpy as np
import torch
from torch.utils._python_dispatch import _disable_current_modes
from torch.utils._pytree import tree_leaves, tree_map

from converter.errors import SourceLocation, source_location
from tpu_runtime import bounds, cpu_refusals, plans
from tpu_runtime.tensor import TpuTensor


class Check(NamedTuple):
    """The ``op`` of an index check's entry in ``ctx.checks`` (``(flags, Check, (), {})``): what to raise."""

    error: type
    message: Any  # message(value, position) -> str
    func: Any
    where: SourceLocation


aten = torch.ops.aten


def _shaped(rank: int, dim: int, size: int) -> torch.Tensor:
    """A meta tensor of ``rank`` dimensions whose dimension ``dim`` has ``size`` elements (the others one)."""
    return torch.empty([size if d == dim else 1 for d in range(max(rank, dim + 1))], device="meta")


def _checked_as(op: Any, named: Any) -> Any:
    """``(rank, size, dim, index) → check``: ``op``'s own check in :data:`tpu_runtime.bounds.CHECKS` (its error,
    message and lowest allowed index), asked with ``named(rank, size, dim, index)``, the arguments of an ``op`` call
    that indexes the same way."""
    return lambda rank, size, dim, idx: bounds.CHECKS[op](named(rank, size, dim, idx))[0]


def _along(rank: int, size: int, dim: int, idx: Any) -> dict:
    return {"self": _shaped(rank, dim, size), "dim": dim, "index": idx}


def _classes(rank: int, size: int, dim: int, idx: Any) -> dict:
    return {"self": _shaped(2, 1, size), "target": idx, "ignore_index": None}


#: Ops decomposed into a checked op (by name: a node's ``original_aten`` may be another object for the same
#: overload) → ``(rank of the decomposed op's self, size, dim of the checked index, index) → check``: the original
#: op's own check, so the index is refused and worded as its CPU kernel does (``cross_entropy``'s
#: ``nll_loss_forward`` → ``gather`` of the target: ``IndexError: Target 7 is out of bounds.``; ``index_copy`` →
#: ``index_put``, which would take a negative index).
_WORDED_AS = {
    **{str(op): _checked_as(op, _classes) for op in (aten.nll_loss_forward.default, aten.nll_loss2d_forward.default)},
    str(aten.take.default): _checked_as(aten.take.default, lambda rank, size, dim, idx: {
        "self": _shaped(1, 0, size), "index": idx}),
    **{str(op): _checked_as(op, _along) for op in (aten.index_add.default, aten.index_copy.default,
                                                   aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)},
    # decomposed while dynamo traces (no ATen op of their own is recorded): known by the name of the torch function
    # or module class dynamo recorded the node under
    **{name: _checked_as(aten.multi_margin_loss.default, _classes)
       for name in ("multi_margin_loss", "MultiMarginLoss")},
    **{name: _checked_as(aten.multilabel_margin_loss_forward.default, _classes)
       for name in ("multilabel_margin_loss", "MultiLabelMarginLoss")},
}


def _worded(node: torch.fx.Node) -> Any:
    """The :data:`_WORDED_AS` entry of a checked node, by the ATen op it came from or the torch function that
    dynamo recorded it under (``F.multi_margin_loss``); ``None``: the node's own check."""
    worded = _WORDED_AS.get(str(node.meta.get("original_aten")))
    if worded is None and node.meta.get("source_fn_stack"):
        worded = _WORDED_AS.get(getattr(node.meta["source_fn_stack"][-1][1], "__name__", None))
    return worded


class Refusal(NamedTuple):
    """The ``op`` of a ``ctx.checks`` entry for a python argument the CPU refuses (``uniform_(2, 1)``)."""

    error: BaseException


def observers(gm: torch.fx.GraphModule) -> dict:
    """The checks of ``gm``'s nodes: ``{node: observe(args, kwargs, ctx)}``, each observer adding the flags of its
    node's checked arguments to ``ctx.checks`` (see :func:`_observe`), or a :class:`Refusal` where the CPU refuses
    the dtypes of its inputs (:func:`_refused_dtypes`)."""
    found = {}
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        observe = [functools.partial(f, node) for f, asks in ((_observe, node.target in bounds.CHECKS),
                                                             (_refused_dtypes, _probed(node))) if asks]
        if observe:
            found[node] = observe[0] if len(observe) == 1 else functools.partial(_each, observe)
    return found


def _each(observe: list, args: tuple, kwargs: dict, ctx: Any) -> None:
    for fn in observe:
        fn(args, kwargs, ctx)


def _probed(node: torch.fx.Node) -> bool:
    """Whether the CPU is asked about the dtypes of ``node``'s inputs, as eager mode asks about a call's
    (:func:`tpu_runtime.cpu_refusals.raise_unsupported_dtype`: an integer, bool or complex input, not a backward op's
    indices)."""
    return _asks(node.target, [v.dtype for v in (a.meta.get("val") for a in node.all_input_nodes)
                               if isinstance(v, torch.Tensor)])


def _asks(func: Any, dtypes: list) -> bool:
    """Whether eager mode's dtype probe asks the CPU about a call of ``func`` with inputs of ``dtypes``."""
    if not isinstance(func, torch._ops.OpOverload) or func in cpu_refusals._ACCELERATOR_DTYPES:
        return False
    if func._schema.name.endswith("_backward") and not any(d.is_complex for d in dtypes):
        return False
    return any(d in cpu_refusals._PROBED for d in dtypes)


def _ask_cpu(func: Any, args: tuple, kwargs: dict) -> Exception | None:
    """:func:`tpu_runtime.cpu_refusals.dtype_refusal` of ``func`` on ``args`` / ``kwargs`` (device tensors as meta
    stand-ins), on real CPU tensors: outside a tracer's modes (which would make them fake) and Python dispatcher;
    a random op with the CPU generator's state put back (the probe draws)."""
    random = torch.Tag.nondeterministic_seeded in func.tags
    with _disable_current_modes(), torch._C._DisablePythonDispatcher(), \
            torch.random.fork_rng(devices=[]) if random else contextlib.nullcontext():
        return cpu_refusals.dtype_refusal(func, meta_templates(args, kwargs))


def meta_templates(args: tuple, kwargs: dict) -> tuple:
    """:func:`tpu_runtime.plans._templates`'s form for a call whose device tensors are meta stand-ins (a compiled
    graph's node, or a traced call, at the shapes of the signature being compiled), for
    :func:`~tpu_runtime.cpu_refusals.dtype_refusal`."""
    ins: list = []
    _tensors_in((*args, *kwargs.values()), ins)
    counter = [0, False]
    return plans._template(tuple(args), counter), plans._template(dict(kwargs), counter), ins


def _tensors_in(args: Any, ins: list) -> None:
    """Append the tensors of ``args`` to ``ins`` in the order :func:`tpu_runtime.plans._template` gives them
    slots."""
    if isinstance(args, torch.Tensor):
        ins.append(args)
    elif type(args) in (list, tuple):
        for a in args:
            _tensors_in(a, ins)
    elif type(args) is dict:
        _tensors_in(tuple(args.values()), ins)


#: The CPU's refusals of calls seen while AOTAutograd traced tpu tensors (:func:`note_traced_call`), for the graph
#: compiled next (:func:`take_traced_refusals`).
_TRACED_REFUSALS: list = []


def note_traced_call(func: Any, args: tuple, kwargs: dict) -> None:
    """While ``torch.compile`` traces tpu tensors: ask the CPU about a call's dtypes as eager mode does
    (:func:`tpu_runtime.cpu_refusals.dtype_refusal`), before torch's decompositions turn the call into ops the CPU takes
    (``logaddexp`` or ``softplus`` of ints, ``xlogy`` of complex numbers: the graph's nodes pass the check of
    :func:`_refused_dtypes`). A refusal is kept, with a note naming the op and the user's line, for the graph
    being compiled. Calls with symbolic sizes are not asked."""
    tensors = [x for x in tree_leaves((args, kwargs)) if isinstance(x, torch.Tensor)]
    if not _asks(func, [x.dtype for x in tensors]) or any(not all(type(d) is int for d in x.shape) for x in tensors):
        return
    stand_in = lambda x: torch.empty(tuple(x.shape), dtype=x.dtype, device="meta") \
        if isinstance(x, TpuTensor) else x  # noqa: E731
    e = _ask_cpu(func, tree_map(stand_in, args), tree_map(stand_in, kwargs))
    if e is not None:
        where = source_location(SimpleNamespace(meta=torch.fx.traceback.get_current_meta() or {}))
        e.add_note(f"(raised for {func} at {where}, in a function compiled by torch.compile(backend='tpu'): the "
                   "CPU refuses the dtypes of its inputs)")
        _TRACED_REFUSALS.append(e)


def take_traced_refusals() -> list:
    """The refusals :func:`note_traced_call` kept since the last call (and forget them)."""
    found = _TRACED_REFUSALS[:]
    _TRACED_REFUSALS.clear()
    return found


def _refused_dtypes(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> None:
    """A :class:`Refusal` in ``ctx.checks`` when the CPU refuses the dtypes of ``node``'s inputs (``softmax`` of an
    int tensor, ``sign`` of a complex one: XLA would compute them): asked once per compiled signature, with CPU
    tensors of ones of this call's shapes (:func:`tpu_runtime.cpu_refusals.dtype_refusal`); every call of the graph then
    raises the CPU's error, as eager mode does."""
    def stand_in(v: Any, traced: Any) -> Any:
        val = traced.meta.get("val") if isinstance(traced, torch.fx.Node) else None
        if isinstance(val, torch.Tensor) and hasattr(v, "shape"):
            return torch.empty(tuple(v.shape), dtype=val.dtype, device="meta")
        if isinstance(v, (list, tuple)) and isinstance(traced, (list, tuple)):
            return type(v)(stand_in(e, t) for e, t in zip(v, traced))
        return v

    e = _ask_cpu(node.target, tuple(stand_in(v, t) for v, t in zip(args, node.args)),
                 {k: stand_in(v, node.kwargs.get(k)) for k, v in kwargs.items()})
    if e is not None:
        e.add_note(f"(raised for {node.target} at {source_location(node)}, in a graph compiled by "
                   "torch.compile(backend='tpu'): the CPU refuses the dtypes of its inputs)")
        ctx.checks.append((jnp.zeros((), jnp.int32), Refusal(e), (), {}))


def _observe(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: Any) -> None:
    """Add the flags of one node's checked arguments (their JAX values: ``args``, ``kwargs``) to ``ctx.checks``.

    The checks are those eager mode makes (:data:`tpu_runtime.bounds.CHECKS`), asked of meta tensors of this
    call's concrete shapes (so sizes that are symbolic in the graph, a dynamic batch, are numbers here) and the
    dtypes torch traced; a python argument the CPU refuses is a :class:`Refusal` (raised after the run)."""
    func = node.target
    names = [a.name for a in func._schema.arguments]
    values: dict[int, tuple] = {}  # id of a stand-in meta tensor → (the argument's JAX value, its place in a list)

    def stand_in(v: Any, traced: Any, at: int = 0) -> Any:
        val = traced.meta.get("val") if isinstance(traced, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or not hasattr(v, "shape"):
            return v
        meta = torch.empty(tuple(v.shape), dtype=val.dtype, device="meta")
        values[id(meta)] = (v, at)
        return meta

    named = {}
    for (name, v), traced in zip([*zip(names, args), *kwargs.items()], [*node.args, *node.kwargs.values()]):
        named[name] = ([stand_in(e, t, k) for k, (e, t) in enumerate(zip(v, traced))] if isinstance(v, (list, tuple))
                       and isinstance(traced, (list, tuple)) else stand_in(v, traced))
    try:
        checks = bounds.CHECKS[func](named)
    except (IndexError, RuntimeError, TypeError, KeyError, AttributeError):  # the op reports a bad call itself
        return
    where = source_location(node)
    worded = _worded(node)
    for c in checks:
        if isinstance(c, BaseException):
            ctx.checks.append((jnp.zeros((), jnp.int32), Refusal(c), (), {}))
            continue
        idx, low, size, error, message = c[:5]
        ignore, part, values_checked = (c + (None, None, False))[5:8]
        v, at = values.get(id(idx), (None, 0))
        if v is None or not np.prod(v.shape) or (idx.is_floating_point() and not values_checked):
            continue
        if worded is not None:  # (``at``: the index's dimension, in an ``index_put``'s list of indices)
            low, error, message = itemgetter(1, 3, 4)(worded(named["self"].dim() if "self" in named else 0, size,
                                                             at, idx))
        if size == 0 and ignore is None:  # every index is out of range (and the op's lowering cannot take it)
            raise error(message(0, 0))
        ctx.checks.append((bounds.flags(v, low, size, ignore, part), Check(error, message, func, where), (), {}))


def report(flags: Any, check: Check | Refusal, at_once: bool) -> None:
    """After a run: raise ``check``'s error if ``flags`` found a value out of range (``at_once``: now, the graph
    is done; else at the next sync point, see :func:`tpu_runtime.bounds.queue`); a :class:`Refusal`'s error now
    (a fresh one each call).

    Raises:
        IndexError, RuntimeError: the CPU's error for the first value out of range, or for a python argument.
    """
    if type(check) is Refusal:
        e = type(check.error)(*check.error.args)
        for note in getattr(check.error, "__notes__", ()):
            e.add_note(note)
        raise e
    if not at_once:
        bounds.queue(flags, check.error, check.message, check.func, check.where)
        return
    bad, first, at = np.asarray(flags).tolist()
    if bad:
        e = check.error(check.message(first, at))
        e.add_note(f"(an index of {check.func} at {check.where}, in a graph compiled by torch.compile(backend='tpu'))")
        raise e


def run(infos: tuple, checks: list, at_once: bool) -> None:
    """Run a program's error checks on their computed values (``checks``: ``(value, op, args, kwargs)`` as the
    lowering recorded them): ``torch.linalg``'s ``info`` and ``_assert_async`` conditions through torch's own
    kernel (read back: a sync, as the check is on any device), index checks through :func:`report`. Raises
    torch's own errors."""
    for info, (_, op, rest, kwargs) in zip(infos, checks):
        if type(op) in (Check, Refusal):
            report(info, op, at_once)
        else:
            op(torch.from_numpy(np.array(info)), *rest, **kwargs)


__all__ = ["Check", "Refusal", "note_traced_call", "observers", "report", "run", "take_traced_refusals"]
