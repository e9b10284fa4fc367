"""Fused eager: ops are recorded and run later as one jitted graph.

Each op appends a node (its :class:`~tpu_runtime.plans.OpPlan` and where its
inputs come from) and returns :class:`~tpu_runtime.eager.lazy.LazyRef` placeholders with the output's
shape and dtype. At a sync point — ``.cpu()``, ``.item()``, ``print``,
:func:`tpu_runtime.sync`, the end of ``loss.backward()`` or of an optimizer's ``step()`` and the start of
``loss.backward()`` after a forward with enough work (:data:`SPLIT_FLOPS`) (not waited for: the graph runs
while Python records what follows), a mode switch, or the graph reaching its size limit —
the graph becomes one JAX function whose inputs are the concrete arrays it read
(weights, data, python floats, RNG counters) and whose outputs are the pending
values still referenced from Python; everything else is dead and XLA never
materializes it. An input that an in-place op of the graph replaced and that
nothing else holds (an optimizer's old parameters and moments) is donated: XLA
may write the output that replaced it into its buffer (:func:`_donation`). Small outputs come back packed, one flat
array per dtype, which later graphs read as one leaf (:mod:`tpu_runtime.eager.packing`).

A graph that fails to compile or run (out of memory) is rerun op by op (:mod:`tpu_runtime.eager.recover`): the pending
values that do not depend on the failing op get their values, the others raise its error when read (a
leaf the failed run had already been given as a donated buffer is lost with it).

The compile-cache key is the graph's structure: the plans (by their serial
number: one plan per call signature), how nodes connect, which leaves are
shared and which outputs are live. A training loop
records the same structure every iteration, so from the second iteration on each
sync is a cache hit that runs one executable.

The structure is interned while it is recorded: each op steps down a trie of
``(plan uid, input refs)`` edges, so a graph is named by the trie node it ends
on (a small integer token) and the sync looks up ``(token, live outputs,
number of leaves)`` instead of hashing and comparing the whole graph (measured
on the MLP training step of ``examples/train.py``: ~90 µs per sync for the
71-op key, against one small-tuple dict lookup per op while recording).
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import weakref
from typing import Any

import jax
import jax.numpy as jnp

from converter.lowering.dtypes import JAX_TO_TORCH, to_jax_dtype
from tpu_runtime._x64 import restore, swap_on
from tpu_runtime.cache import CACHE, CacheMissError, donation_order, misses_allowed
from tpu_runtime.eager.fused_stats import REPORT
from tpu_runtime.eager.lazy import LazyRef, concrete
from tpu_runtime.eager.packing import SLICE, leaf_value, packed_dtypes, plan_packing, slice_cuts, small
from tpu_runtime.eager.recover import recover
from tpu_runtime.eager.work import work_of

_ref = weakref.ref
_refcount = sys.getrefcount
_ARRAY = type(jnp.zeros(()))  # jaxlib's ArrayImpl

#: Flush the graph when its ops reach this many tensor outputs in all (``TPU_FUSED_MAX_OPS``): a foreach
#: op over six tensors counts six. XLA's compile time and memory grow with the graph (measured: ~2.5 ms
#: and ~1 MB per elementwise output; a loop of 20000 six-tensor foreach ops with no sync point, flushed
#: by op count, took 18 GB to compile), so an unsynced loop is cut into graphs of this size, each
#: compiled once.
MAX_OPS = int(os.environ.get("TPU_FUSED_MAX_OPS", "4000"))


def _split_flops() -> float:
    """:data:`SPLIT_FLOPS` as ``TPU_FUSED_SPLIT_FLOPS`` sets it (read at import); unset: never split."""
    env = os.environ.get("TPU_FUSED_SPLIT_FLOPS", "").strip()
    return float(env) if env else float("inf")


#: When ``loss.backward()`` begins, the ops recorded so far (the forward) run as a graph of their own if they do at
#: least this many multiply-adds (estimated: :mod:`tpu_runtime.eager.work`): the device then computes the forward
#: while Python records the backward, instead of starting only when the backward ends. Off unless
#: ``TPU_FUSED_SPLIT_FLOPS`` sets it, because it is a trade whose sign depends on the model: a graph of its own costs
#: a flush (~0.1 ms), writes out the activations the backward reads, and on the CPU backend computes on the cores
#: Python records on. Measured on this project's 2-core CPU (fused eager, split at every backward vs never, 41
#: alternating rounds of 5 steps, median ratio of times, >1: the split is faster): a minGPT of 35M forward
#: multiply-adds 1.15, a conv net without BatchNorm (27M) 1.08, the 4.2M-parameter MLP (34M) 1.12 (rounds spread
#: 0.90-1.25), a 128-512-128 MLP (8.8M) 1.00, the same conv net with BatchNorm (28M) 0.88, examples' minGPT (1.1M)
#: 0.96. No accelerator was measured (there the device does not share the host's cores).
SPLIT_FLOPS = _split_flops()


class _Trie:
    """One recorded prefix of ops: ``token`` names it, ``next`` maps an op's
    ``(plan uid, refs)`` to the prefix one op longer."""

    __slots__ = ("token", "next")
    _tokens = itertools.count()

    def __init__(self) -> None:
        self.token = next(_Trie._tokens)
        self.next: dict[tuple, "_Trie"] = {}


#: The empty graph; every recorded graph is a path from here (cleared with the compile cache).
_ROOT = [_Trie()]


def _clear_trie() -> None:
    _ROOT[0] = _Trie()


CACHE.on_clear(_clear_trie)


#: A graph's ops name their inputs by refs, plain ints (hashed and compared at C speed each time an op steps down the
#: trie): a leaf's is ``~position`` (negative), an op's output's ``node << _SHIFT | output``.
_SHIFT = 32
_OUTPUT = (1 << _SHIFT) - 1


class FusedGraph:
    """The ops recorded since the last sync.

    Threads share it (autograd may run backward on a thread of its own, and user threads may
    record at the same time): recording, flushing and noting replaced values hold one reentrant
    lock, so a flush never runs between an op reading its inputs' nodes and appending its own."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._reset()

    def _reset(self) -> None:
        self.nodes: list[tuple] = []   # (plan, refs); a ref: see _SHIFT
        self.size = 0  # tensor outputs of the nodes (see MAX_OPS)
        self.flops = 0  # their estimated multiply-adds (see SPLIT_FLOPS)
        self.trie: _Trie = _ROOT[0]   # the interned structure of ``nodes``
        self.leaves: list[Any] = []
        self._leaf_ids: dict[int, int] = {}  # id of a leaf array → its ref (~position in leaves)
        self._float_ids: dict[float, int] = {}  # a dynamic python float → its ref
        self.refs: list = []  # every LazyRef handed out (those only this list holds at the sync are dead: _LIVE)
        self.view_caches: list = []  # (weakref to a view tensor, id of the pending value it caches)
        self.replaces: dict = {}  # an output's ref → the position of the leaf whose storage it overwrote (see replaced)
        self.slices: list = []  # a slice leaf (see SLICE): (ref of the packed array it is cut from, offset, shape)
        self._slice_ids: dict[int, int] = {}  # id of a packed LazyRef read → its slice leaf's ref
        self._sliced: list = []  # those LazyRefs (their ids stay theirs until the sync)

    def __len__(self) -> int:
        return len(self.nodes)

    def record(self, plan: Any, values: list) -> tuple:
        """Append one op; return a :class:`LazyRef` per tensor output."""
        with self._lock:
            if plan.flops is None:
                _check(plan, values)
            self.flops += plan.flops
            refs = []
            add = refs.append
            leaf_ids = self._leaf_ids
            for v in values:
                t = type(v)
                if t is LazyRef:
                    if v.graph is self and v.concrete is None and v.error is None:
                        add(v.ref)
                        continue
                    if v.packed is not None:
                        add(self._slice_leaf(v))
                        continue
                    v = concrete(v)
                    t = type(v)
                if t is _ARRAY:  # the common leaf, inlined from _leaf: one per array
                    r = leaf_ids.get(id(v))
                    if r is None:
                        r = leaf_ids[id(v)] = ~len(self.leaves)
                        self.leaves.append(v)
                    add(r)
                elif t is float and v and v == v:  # a dynamic python float: one leaf per value (not 0.0/-0.0, NaN)
                    r = self._float_ids.get(v)
                    if r is None:
                        r = self._float_ids[v] = ~len(self.leaves)
                        self.leaves.append(v)
                    add(r)
                else:
                    add(self._leaf(v))
            node = len(self.nodes)
            refs = tuple(refs)
            self.nodes.append((plan, refs))
            edge = (plan.uid, refs)
            trie = self.trie.next.get(edge)
            if trie is None:
                trie = self.trie.next[edge] = _Trie()
            self.trie = trie
            specs = plan.out_specs
            base = node << _SHIFT
            if len(specs) == 1:
                r = LazyRef(self, base, specs[0])
                self.refs.append(r)
                outs = (r,)
            else:
                outs = tuple([LazyRef(self, base | i, spec) for i, spec in enumerate(specs)])
                self.refs.extend(outs)
            self.size += len(specs)
            if self.size >= MAX_OPS:
                self.flush("size limit")
            return outs

    def record_writes(self, plan: Any, values: list, dsts: Any) -> None:
        """:meth:`record` for an in-place op over lists (a foreach op, a fused optimizer step): its ``i``-th
        output becomes the value of ``dsts[i]`` (``None``: written nowhere), a base tensor of that output's
        shape and dtype (the caller checked), as :func:`~tpu_runtime.values.write` would make it, in one loop
        (an optimizer's step writes every parameter and moment this way: per element, one write and one
        replaced-leaf note, no calls)."""
        with self._lock:
            outs = self.record(plan, values)
            if outs and outs[0].concrete is not None:  # (the size limit ran the graph: plain writes)
                for dst, r in zip(dsts, outs):
                    if dst is None:
                        continue
                    s = dst._storage
                    s.value = r.concrete
                    s.version += 1
                return
            leaf_ids, replaces = self._leaf_ids, self.replaces
            for dst, r in zip(dsts, outs):
                if dst is None:  # (an output written nowhere: dead unless something else reads it)
                    continue
                s = dst._storage
                old = s.value
                t = type(old)
                if t is _ARRAY:
                    leaf = leaf_ids.get(id(old))
                    if leaf is not None:
                        replaces[r.ref] = ~leaf
                elif t is LazyRef and old.graph is self and old.concrete is None:
                    leaf = replaces.pop(old.ref, None)
                    if leaf is not None:
                        replaces[r.ref] = leaf
                s.value = r
                s.version += 1

    def _slice_leaf(self, v: LazyRef) -> int:
        """The ref of the slice leaf that reads the packed value ``v`` (see :data:`SLICE`)."""
        r = self._slice_ids.get(id(v))
        if r is None:
            flat, offset = v.packed
            r = self._slice_ids[id(v)] = SLICE - len(self.slices)
            self.slices.append((self._leaf(flat), offset, v.shape))
            self._sliced.append(v)
        return r

    def _leaf(self, v: Any) -> tuple:
        """The ref (``~position``) of the leaf ``v``: one per ``jax.Array``, a new one for anything else."""
        if type(v) is _ARRAY or (hasattr(v, "shape") and hasattr(v, "devices")):  # a jax.Array: one leaf per array
            r = self._leaf_ids.get(id(v))
            if r is None:
                r = self._leaf_ids[id(v)] = ~len(self.leaves)
                self.leaves.append(v)
            return r
        self.leaves.append(v)
        return -len(self.leaves)  # (~(len - 1))

    def replaced(self, ref: LazyRef, old: Any) -> None:
        """Note that the pending value ``ref`` replaced ``old`` as a storage's value (an in-place op).

        When ``old`` is a leaf (or a pending value that replaced one), ``ref`` may be written into that
        leaf's buffer: see :func:`_donation`."""
        with self._lock:
            if ref.concrete is not None:  # another thread ran the graph in between: nothing to pair
                return
            t = type(old)
            if t is _ARRAY:
                leaf = self._leaf_ids.get(id(old))  # a live leaf: its id is its own
                leaf = None if leaf is None else ~leaf
            elif t is LazyRef and old.graph is self and old.concrete is None:
                leaf = self.replaces.pop(old.ref, None)
            else:
                return
            if leaf is not None:
                self.replaces[ref.ref] = leaf

    def cache_view(self, view: Any, ref: LazyRef) -> None:
        """Note that ``view`` caches the pending value ``ref`` (its view chain replayed on its storage)."""
        self.view_caches.append((_ref(view), id(ref)))  # not the ref itself: that would keep it live

    def flush(self, cause: str = "sync") -> None:
        """Run the recorded ops as one jitted graph and resolve every live :class:`LazyRef`; ``cause`` (one of
        :data:`~tpu_runtime.eager.fused_stats.CAUSES`) is counted in the fused report.

        A view's cached value (:meth:`cache_view`) is dropped first, not made an output: the
        view recomputes it from its storage if it is read again (keeping its cache live would
        make the graph write a second copy of the viewed data, e.g. a transposed one).
        """
        with self._lock:
            for w, ref_id in self.view_caches:
                view = w()
                if view is not None and id(view._cached) == ref_id:
                    view._cached = None
            self.view_caches = []
            if not self.nodes:
                return
            live = [r for r in self.refs if _refcount(r) > _LIVE and r.concrete is None]
            nodes, token, leaves, replaces, slices = self.nodes, self.trie.token, self.leaves, self.replaces, self.slices
            self._reset()
            if not live:
                return
            outs = [r.ref for r in live]  # (unique and in order: one ref per output, made in order)
            ordered, donate = _donation(leaves, nodes, outs, replaces, token)
            key = ("fused", token, tuple(ordered), len(leaves), donate, tuple(slices))
            packing = _PACKINGS.get(key)
            if packing is None:
                if len(_PACKINGS) > 4096:
                    _PACKINGS.clear()
                packing = _PACKINGS[key] = plan_packing(_specs(nodes, ordered), len(donate))
            prev = swap_on()  # x64(), without a context manager's cost
            miss = None
            try:
                exe = CACHE.lookup(key)
                REPORT.note(cause, len(nodes), exe is None)
                if exe is None:
                    fn = _graph_fn(nodes, ordered, slices, packing)
                    try:
                        results = CACHE.compile(key, fn, tuple(leaves),
                                                describe=lambda: f"fused graph of {len(nodes)} ops", donate=donate)
                    except CacheMissError as e:  # raised once the graph ran: its pending values are not lost
                        miss = e
                        with misses_allowed():
                            results = CACHE.compile(key, fn, tuple(leaves), donate=donate)
                else:
                    results = exe(*leaves)
            except Exception as e:
                if not recover(nodes, leaves, slices, live, e):
                    raise
                return
            except BaseException as e:  # (Ctrl-C while it compiled: its values are lost, and say so when read)
                for r in live:
                    r.error = e
                raise
            finally:
                restore(prev)
            self._resolve(live, outs, ordered, packing, results)
            if miss is not None:
                raise miss

    @staticmethod
    def _resolve(live: list, outs: list, ordered: list, packing: tuple, results: tuple) -> None:
        """Give each live :class:`LazyRef` its value: an output of the graph's ``results``, or a packed one (cut
        from its array when read)."""
        slots = packing[2]
        if ordered is outs and not packing[1]:
            for r, value in zip(live, results):
                r.concrete = value
            return
        where = None if ordered is outs else {o: i for i, o in enumerate(ordered)}
        for i, (r, o) in enumerate(zip(live, outs)):
            slot = slots[i if where is None else where[o]]
            if type(slot) is int:
                r.concrete = results[slot]
            else:  # a packed output: cut from its array when read (see plan_packing)
                r.graph = None
                r.packed = (results[slot[0]], slot[1])


def _check(plan: Any, values: list) -> None:
    """Trace ``plan``'s function once on abstract inputs like ``values`` (its first use in fused eager):
    an op its lowering refuses (a reduction of an empty tensor, an unsupported argument) raises its
    error at the op, as in strict eager, instead of failing the whole graph at the next sync; the trace
    gives the op's estimated work too (``plan.flops``: :func:`~tpu_runtime.eager.work.work_of`)."""
    traced = jax.make_jaxpr(plan.fn)(*[jax.ShapeDtypeStruct(v.shape, to_jax_dtype(v.dtype))
                                       if type(v) is LazyRef else v for v in values])
    plan.flops = work_of(traced)


#: Reference count of a leaf array that only the graph's leaf list holds, as :func:`_donation` sees it
#: (the list and ``getrefcount``'s argument).
_UNHELD = 2


def _donation(leaves: list, nodes: list, outs: list, replaces: dict, token: int | None = None) -> tuple[list, tuple]:
    """The graph's outputs in the order that pairs them with the leaves it may write them into, and
    those leaves' positions (``donate_argnums``); ``outs`` itself when nothing is donated.

    An in-place op of the graph replaced a storage's value, a leaf, with an output
    (:meth:`FusedGraph.replaced`): an optimizer's parameters and moments. When nothing but the
    graph holds that leaf any more it is dead once the graph has run, so XLA may write the output
    into its buffer instead of a fresh one (on the CPU a fresh buffer of megabytes costs more than
    the elementwise pass that fills it; on an accelerator it doubles an optimizer step's memory).
    The outputs are ordered for JAX's pairing (:func:`~tpu_runtime.cache.donation_order`).

    What depends on the graph's structure alone (``token``: its interned ops; the live outputs; which
    output replaced which leaf) — the pairs whose shapes and dtypes agree, and the order each set of
    donated pairs gives — is worked out once per structure (a training loop's graph is the same every
    step) and kept in one entry; each call only checks which of those leaves nothing else holds.
    """
    entry = None
    if token is not None:
        key = (token, tuple(outs), tuple(replaces.items()))
        entry = _STRUCTURES.get(key)
    if entry is None:
        candidates, taken = [], set()
        specs = _specs(nodes, outs)
        packed = packed_dtypes(specs)  # (a small output of these is packed, not written into its leaf)
        for out, spec in zip(outs, specs):
            leaf = replaces.get(out)
            if leaf is None or leaf in taken or (spec[1] in packed and small(spec[0])):
                continue
            v = leaves[leaf]
            if type(v) is _ARRAY and (v.shape, JAX_TO_TORCH.get(v.dtype)) == spec:
                candidates.append((leaf, out))
                taken.add(leaf)
        v = None
        entry = (tuple(candidates), {})  # the candidates; donated pairs → their order
        if token is not None:
            if len(_STRUCTURES) > 4096:
                _STRUCTURES.clear()
            _STRUCTURES[key] = entry
    candidates, orders = entry
    if not candidates:
        return outs, ()
    pairs = tuple([pair for pair in candidates if _refcount(leaves[pair[0]]) == _UNHELD])
    if not pairs:
        return outs, ()
    order = orders.get(pairs)
    if order is None:
        order = orders[pairs] = donation_order(list(pairs), outs)
    donate, ordered = order
    return ordered, donate


#: Per graph key: how its outputs are returned (:func:`~tpu_runtime.eager.packing.plan_packing`).
_PACKINGS: dict = {}
CACHE.on_clear(_PACKINGS.clear)

#: Per graph structure (see :func:`_donation`): its donation candidates and the order of each donated set.
_STRUCTURES: dict = {}
CACHE.on_clear(_STRUCTURES.clear)


def _specs(nodes: list, outs: list) -> list:
    """The ``(shape, dtype)`` of each of the graph's outputs ``outs``."""
    return [nodes[o >> _SHIFT][0].out_specs[o & _OUTPUT] for o in outs]


def _graph_fn(nodes: list, outs: list, slices: list = (), packing: tuple | None = None) -> Any:
    """The pure function replaying ``nodes`` on the leaves (and the slice leaves ``slices``) and returning ``outs`` as
    ``packing`` says (:func:`~tpu_runtime.eager.packing.plan_packing`)."""

    def run(*leaves: Any) -> tuple:
        cuts = slice_cuts(leaves, slices)
        env: list[tuple] = []
        for plan, refs in nodes:
            ins = [leaf_value(r, leaves, cuts) if r < 0 else env[r >> _SHIFT][r & _OUTPUT] for r in refs]
            env.append(plan.fn(*ins))
        values = [env[o >> _SHIFT][o & _OUTPUT] for o in outs]
        if packing is None or not packing[1]:
            return tuple(values)
        return tuple([values[i] for i in packing[0]]
                     + [jnp.concatenate([values[i].ravel() for i in group]) for group in packing[1]])

    return run


#: Reference count of a pending value that only the graph's list of handed-out values holds, as :meth:`FusedGraph.flush`
#: sees it (the list, the loop's variable, ``getrefcount``'s argument): it is dead, not an output (holding the values
#: and counting references at the sync costs less than a weak reference to each).
_LIVE = 3

#: The graph being recorded (shared by every thread: autograd runs backward on its own thread).
GRAPH = FusedGraph()


class FusedExecutor:
    """Records ops into :data:`GRAPH`."""

    name = "fused"
    #: Dynamic python floats reach :attr:`run` as python floats: each distinct value becomes
    #: one input of the graph, converted inside its call (no device scalar made per new value,
    #: e.g. AdamW's per-step bias corrections).
    raw_floats = True

    def __init__(self) -> None:
        #: ``run(plan, values)``: record ``plan`` on ``values``; returns LazyRefs (bound
        #: straight to :meth:`FusedGraph.record`: one call less per op).
        self.run = GRAPH.record
        #: ``record_writes(plan, values, dsts)``: :meth:`FusedGraph.record_writes`.
        self.record_writes = GRAPH.record_writes

    def sync(self, cause: str = "sync") -> None:
        """Run the pending graph (``cause``: see :meth:`FusedGraph.flush`)."""
        GRAPH.flush(cause)

    def before_backward(self) -> None:
        """``loss.backward()`` is about to record the backward pass: start the pending graph (the forward) when it
        does at least :data:`SPLIT_FLOPS` multiply-adds, so the device runs it while Python records the backward."""
        if GRAPH.flops >= SPLIT_FLOPS:
            GRAPH.flush("forward")
