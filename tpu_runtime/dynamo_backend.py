"""``torch.compile(model, backend="tpu")``: AOTAutograd graphs compiled with jax.jit.

Registered through PyTorch's ``torch_dynamo_backends`` entry point (pyproject),
so nothing is patched at import time. Forward and backward graphs from
AOTAutograd are decomposed to core ATen (the capture preserve-list kept whole),
checked against the lowering table, and compiled once per input signature in
the runtime's shared compile cache (:mod:`tpu_runtime.cache`: the same counters,
``cache_only()`` and on-disk cache as the eager modes); graph breaks are handled
by dynamo itself (each piece comes here separately); a custom op whose implementation writes into its own
buffers runs eagerly between compiled pieces of its graph (:mod:`tpu_runtime.compile_split`).

Models and inputs may live on the CPU (each call moves the inputs to the device
and the outputs back) or on the ``tpu`` device (``model.to("tpu")``): then dynamo
and AOTAutograd trace the tpu tensors through their flatten protocol
(:mod:`tpu_runtime.compile_tensors`), the compiled graph runs on the ``jax.Array``
each tpu tensor holds and returns tpu tensors, with no host round trip; gradients
land on the tpu parameters, ready for an eager optimizer step.
"""

from __future__ import annotations


import contextlib
import itertools
import sys
import weakref
from typing import Any, Callable, Iterator

import jax
import numpy as np
import sympy
import torch
from torch._dynamo.backends.common import aot_autograd
from torch._prims_common import make_contiguous_strides_for
from torch.fx.experimental.symbolic_shapes import guard_int

from converter.capture import DECOMPOSITIONS as CAPTURE_DECOMPOSITIONS, PRESERVED_OPS
from converter.lowering import rng_ops
from converter.lowering.dtypes import to_torch_dtype
from converter.lowering.fx_runner import check_supported, run_graph_module
from tpu_runtime import fastpath, foreach, graph_checks, rng
from tpu_runtime._x64 import restore, swap_on
from tpu_runtime.cache import CACHE, donation_order
from tpu_runtime.compile_aliases import resolve_outputs, split_shared_views
from tpu_runtime.compile_rewrites import rewrite
from tpu_runtime.compile_tensors import TpuPayload, end_tracing
from tpu_runtime.compile_writes import donatable, input_writes, write_back
from tpu_runtime.eager.fused import _ARRAY
from tpu_runtime.module import host_array, to_jax, to_torch
from tpu_runtime.tensor import DEVICE, TpuTensor, wrap_strided
from tpu_runtime.values import array_to_tpu, host_operand, materialize_all

#: Compile statistics: the shared cache's counters (eager modes included).
STATS = CACHE.stats
_GRAPH_IDS = itertools.count()
_TENSOR = "<tensor>"  # a tensor argument's place among a call's static arguments (None is a value: an effect token)


aten = torch.ops.aten
#: Ops with no lowering that torch decomposes outside its core set: the eager dispatcher falls back to the same
#: table for them, so a compiled graph runs what eager runs (random fills; ``batch_norm_backward``, the backward of
#: ``_batch_norm_with_update``, the batch norm of torch.export's training graphs).
_NON_CORE = (aten.cauchy.default, aten.cauchy_.default, aten.log_normal.default, aten.log_normal_.default,
             aten.batch_norm_backward.default)


#: Ops the table lowers whole where torch's decomposition would refuse inputs the CPU takes (``nan_to_num`` of a
#: complex tensor: torch's reference calls ``isneginf``, which refuses complex tensors) or lose what the graph's
#: checks need (``max_unpool``: its decomposition adds each plane's offset to the indices, so an index past its
#: plane lands in the next one and passes the check; whole, its own check sees the index).
_KEPT_WHOLE = (aten.nan_to_num.default, aten.max_unpool2d.default, aten.max_unpool3d.default)


def _decompositions() -> dict:
    table = dict(torch._decomp.core_aten_decompositions())
    for op in (*PRESERVED_OPS, *_KEPT_WHOLE):
        table.pop(op, None)
    for op in _NON_CORE:
        table[op] = torch._decomp.decomposition_table[op]
    table.update(CAPTURE_DECOMPOSITIONS)  # (convert's: torch.export and torch.compile decompose alike)
    table.update(foreach.decompositions())
    table.update(fastpath.decompositions())
    return table


def _arrays(tensors: list, device: Any, host: bool) -> list:
    """The JAX arrays behind a graph's inputs: read from a tpu tensor or its payload (all at once: values a fused graph
    returned packed are cut out together, :func:`~tpu_runtime.values.materialize_all`); from a CPU tensor, with
    ``host`` its array as :func:`~tpu_runtime.module.host_array` gives it, else (an optimizer's step count) a NumPy
    copy the executable uploads itself on the default device (~5 µs against ~25 µs for ``jax.device_put``; a copy:
    the graph may run after torch writes to the tensor), or one uploaded to another ``device``."""
    on_tpu = [t.tensor if isinstance(t, TpuPayload) else t for t in tensors if isinstance(t, (TpuTensor, TpuPayload))]
    values = iter(materialize_all(on_tpu, "compiled call") if on_tpu else ())
    return [next(values) if isinstance(t, (TpuTensor, TpuPayload)) else host_array(t) if host
            else host_operand(t) if device == _DEFAULT_DEVICE else to_jax(t, device) for t in tensors]


_DEFAULT_DEVICE = jax.devices()[0]


#: A CPU output of at least this many bytes is handed to torch without a copy (DLPack); below it a
#: copy is cheaper than the handoff (measured: 64 KiB copy ~20 µs vs ~37 µs; 1 MiB ~100 vs ~67 µs).
HANDOFF_BYTES = 1 << 20


def _handoff(outs: list, out_fns: list, inputs: list) -> list:
    """Per output of a compiled graph: a CPU torch tensor sharing the memory of a large output array
    that nothing else holds, or ``None`` (converted as usual). A fresh output buffer becomes the
    torch tensor's own (a copy of megabytes into fresh memory cost more than the graph's compute);
    an output JAX forwarded from an input (the same buffer) or one listed twice is copied."""
    handed: list = [None] * len(outs)
    big, o = [], None
    for i in range(len(outs)):
        o = outs[i]
        if out_fns[i] is to_torch and type(o) is _ARRAY and o.nbytes >= HANDOFF_BYTES \
                and _refcount(o) == _ONLY_LISTED:
            big.append(i)
    del o
    if not big:
        return handed
    taken = {x.ctypes.data if isinstance(x, np.ndarray) else x.unsafe_buffer_pointer()
             for x in inputs if isinstance(x, np.ndarray) or type(x) is _ARRAY}
    for i in big:
        o = outs[i]
        pointer = o.unsafe_buffer_pointer()
        if pointer in taken:
            continue
        taken.add(pointer)
        o.block_until_ready()  # the graph has read its inputs (NumPy views of torch memory)
        try:
            handed[i] = torch.from_dlpack(o)
        except (BufferError, RuntimeError, TypeError):  # a dtype DLPack does not carry (float8)
            continue
        outs[i] = None
    return handed


_refcount = sys.getrefcount
_ONLY_LISTED = 3  # the outputs list, the local variable, getrefcount's argument


def _unpermute(outs: Any, order: list) -> list:
    """The outputs of an executable that returned them in ``order`` (see :func:`~tpu_runtime.cache.donation_order`),
    in graph order."""
    every = [None] * len(outs)
    for pos, i in enumerate(order):
        every[i] = outs[pos]
    return every


def _scalar(a: Any) -> Any:
    """A graph output that stands for a SymInt/SymFloat, as the python number AOTAutograd expects."""
    return np.asarray(a).item() if hasattr(a, "dtype") else a


def _view_layout(val: Any) -> tuple | None:
    """``(stride, storage_offset)`` of a traced graph output that is laid out as a view (strides not
    the contiguous ones, or an offset); symbolic ones (dynamic shapes) stay SymInts, resolved per call
    by :func:`_resolve`. ``None``: a dense output."""
    if not isinstance(val, torch.Tensor):
        return None
    stride, offset = tuple(val.stride()), val.storage_offset()
    if not all(type(v) is int for v in (*stride, offset)):
        return stride, offset
    if offset == 0 and stride == tuple(make_contiguous_strides_for(tuple(val.shape))):
        return None
    return stride, offset


def _bindings(placeholders: list, args: list) -> dict:
    """The value of each size symbol of a dynamic graph in this call: from the int arguments and from the
    sizes and strides of the tensor arguments that the traced placeholders name by a bare symbol."""
    bound: dict = {}
    for val, a in zip(placeholders, args):
        if isinstance(val, torch.SymInt) and isinstance(val.node.expr, sympy.Symbol):
            bound[val.node.expr] = a
        elif isinstance(val, torch.Tensor) and isinstance(a, torch.Tensor):
            for traced, actual in ((val.shape, a.shape), (val.stride(), a.stride())):
                for t, n in zip(traced, actual):
                    if isinstance(t, torch.SymInt) and isinstance(t.node.expr, sympy.Symbol):
                        bound[t.node.expr] = n
    return bound


def _resolve(layout: tuple, shape: tuple, bound: dict) -> tuple | None:
    """A symbolic :func:`_view_layout` as ints for this call's ``bound`` symbols (``None``: dense, or a
    symbol no argument names: then the output reports the dense layout, as before)."""
    try:
        stride = tuple(int(v.node.expr.xreplace(bound)) if isinstance(v, torch.SymInt) else v for v in layout[0])
        offset = layout[1]
        offset = int(offset.node.expr.xreplace(bound)) if isinstance(offset, torch.SymInt) else offset
    except TypeError:  # (an unbound symbol: int() of an expression)
        return None
    if offset == 0 and stride == tuple(make_contiguous_strides_for(shape)):
        return None
    return stride, offset


def _strided(value: Any, layout: tuple) -> TpuTensor:
    """A graph output (a JAX array, the view's values) as a tpu tensor that reports the traced view's
    strides and offset: AOTAutograd rebuilds an output that aliases an input (or an intermediate)
    as ``base.as_strided(out.size(), out.stride(), out.storage_offset())`` from this tensor's layout."""
    return wrap_strided(value, (tuple(value.shape), to_torch_dtype(value.dtype)), *layout)


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """Compile one AOTAutograd graph (forward or backward) for the TPU runtime.

    Each output is returned on the device its traced value has (tpu tensors from a graph of tpu
    tensors, CPU tensors from a CPU graph, and tpu tensors a CPU graph makes on the device).
    """
    end_tracing()  # AOTAutograd traced fw and bw before compiling either: tpu ops need no tracing check now
    refused = graph_checks.take_traced_refusals()  # calls of the traced function the CPU refuses: each call raises
    writes = input_writes(gm)  # inputs an inference graph writes in place: extra outputs, written back here
    check_supported(gm, "tpu")
    device = jax.devices()[0]
    on_tpu = any(isinstance(a, torch.Tensor) and a.device == DEVICE for a in example_inputs)
    graph_id = next(_GRAPH_IDS)  # graphs with equal code may close over different constants
    # random ops draw from the device generator (torch.manual_seed reproduces them); a graph
    # without any takes a constant, so it leaves the generator's counter alone
    # (activation checkpointing's forward saves the key it drew with run_and_save_rng_state)
    draws = any(n.target is rng_ops.RUN_AND_SAVE or isinstance(n.target, torch._ops.OpOverload)
                and torch.Tag.nondeterministic_seeded in n.target.tags
                for n in gm.graph.nodes if n.op == "call_function")
    no_draw = np.zeros(2, np.uint32)
    # outputs that are sizes (a symbolic batch saved for backward) or python numbers the graph returns as
    # constants (``int(b) + 1`` of a python float argument, guarded on) go back as python numbers
    out_node = next(n for n in gm.graph.nodes if n.op == "output")
    leaves = torch.utils._pytree.tree_leaves(out_node.args[0])
    leaves = leaves[:len(leaves) - len(writes)]
    scalars = [type(a) in (int, float, bool) or
               isinstance(getattr(a, "meta", {}).get("val"), (int, float, torch.SymInt, torch.SymFloat))
               for a in leaves]
    # each output goes where its traced value is (a graph without tpu inputs may make tpu tensors:
    # torch.ones(3, device="tpu"), a module moved .to("tpu") inside the compiled code)
    vals = [getattr(a, "meta", {}).get("val") for a in leaves]
    to_tpu = [v.device == DEVICE if isinstance(v, torch.Tensor) else on_tpu for v in vals]
    out_fns = [array_to_tpu if t else to_torch for t in to_tpu]
    layouts = [_view_layout(v) if t else None for v, t in zip(vals, to_tpu)]
    symbolic = {i for i, v in enumerate(layouts) if v is not None and not all(type(x) is int for x in (*v[0], v[1]))}
    placeholders = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
    # a CPU graph reads its inputs as NumPy views (its outputs are copied to torch, or handed over
    # after waiting, before returning: the call is done); a tpu graph's CPU inputs are uploaded first
    host = device == jax.devices()[0] and not on_tpu
    wait = host and any(to_tpu)  # tpu outputs of such a graph: done before its inputs' memory may change
    n_out = len(scalars)
    # error checks (torch.linalg's with_effects, _assert_async, index checks): their values are extra outputs,
    # checked after the run
    checks: list = []
    checks_of: dict = {}  # signature → the checks its trace made (their messages hold that signature's sizes)
    observers = graph_checks.observers(gm)
    positions = list(itertools.accumulate((isinstance(v, torch.Tensor) for v in placeholders), initial=-1))[1:]
    orders: dict = {}  # signature with donated inputs → the order its executable returns the outputs in
    keys: list = []  # this graph's cache entries (its graph_id makes them its own), dropped when ``run`` is freed

    def run(args: list) -> list:
        if refused:
            graph_checks.report(None, graph_checks.Refusal(refused[0]), True)
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        statics = tuple(a if not isinstance(a, torch.Tensor) else _TENSOR for a in args)
        sig = ("dynamo", graph_id, statics, tuple((tuple(t.shape), t.dtype) for t in tensors))
        prev = swap_on()  # x64, without a context manager's cost
        try:
            bound = _bindings(placeholders, args) if symbolic else None
            arrays = _arrays(tensors, device, host)
            key = rng.next_input() if draws else no_draw
            pairs = donatable(args, arrays, positions, writes, n_out) if writes else ()
            if pairs:  # (the executable returns its outputs in the order that pairs them with their inputs)
                sig = sig + (pairs,)
            fn = CACHE.lookup(sig)
            if fn is None:

                def traced(k: Any, *xs: Any) -> tuple:
                    it = iter(xs)
                    full = [next(it) if s is _TENSOR else s for s in statics]
                    checks.clear()
                    outs = run_graph_module(gm, tuple(full), rng=jax.random.fold_in(jax.random.key(k[0]), k[1]),
                                            checks=checks, observers=observers)
                    every = tuple(outs) + tuple(c[0] for c in checks)
                    if not pairs:
                        return every
                    order = orders[sig] = donation_order(list(pairs), list(range(len(every))))[1]
                    return tuple(every[i] for i in order)

                outs = CACHE.compile(sig, traced, (key, *arrays), describe=lambda: f"torch.compile graph {graph_id}",
                                     donate=tuple(sorted(p[0] for p in pairs)))
                checks_of[sig] = list(checks)
                keys.append(sig)
            else:
                outs = fn(key, *arrays)
            if pairs:
                outs = _unpermute(outs, orders[sig])
            if writes:  # (before the checks: a donated input's storage must hold its new value if they raise)
                write_back(args, writes, outs[n_out:n_out + len(writes)], to_torch)
            args.clear()
            if wait:
                jax.block_until_ready(outs)
            graph_checks.run(outs[n_out + len(writes):], checks_of.get(sig, checks), host)
            outs = list(outs[:n_out])
            handoff = _handoff(outs, out_fns, arrays)
            now = layouts if bound is None else [
                _resolve(v, tuple(o.shape), bound) if i in symbolic else v for i, (v, o) in enumerate(zip(layouts, outs))]
            return [_scalar(o) if sym else _strided(o, layout) if layout is not None
                    else handed if handed is not None
                    else out_fn(o) if hasattr(o, "dtype") and not isinstance(o, torch.Tensor) else o
                    for o, sym, layout, out_fn, handed in zip(outs, scalars, now, out_fns, handoff)]
        finally:
            restore(prev)

    run._boxed_call = True  # AOTAutograd's boxed calling convention: args list is consumed
    # once dynamo lets the graph go (torch._dynamo.reset(), a recompile that replaces it, the compiled function
    # freed), so do its executables and the graph they close over: each compiled graph had kept ~4 MB for good
    weakref.finalize(run, CACHE.discard, keys)
    return run


def _skip_runtime_frames() -> None:
    """Keep dynamo out of the runtime's own Python frames.

    Ops that run eagerly inside a compiled function (after a graph break, or in
    modules dynamo skips such as ``nn.LSTM``) enter ``__torch_dispatch__`` while
    dynamo's frame hook is active; dynamo would try to compile the dispatcher itself.
    Marking the entry points' code SKIP (recursively) makes those frames, and every
    frame they call, run as plain Python; the mark is consulted only by dynamo's hook,
    so eager dispatch pays nothing for it.
    """
    from torch._dynamo.eval_frame import set_code_exec_strategy
    from torch._dynamo.types import FrameAction, FrameExecStrategy

    from tpu_runtime import device, dynamic

    skip = FrameExecStrategy(FrameAction.SKIP, FrameAction.SKIP)
    # the kernels registered with torch.library (called from C++); below, every method, property and
    # static method of the tensor classes (their dispatchers; AOTAutograd's runtime reads ``_payload``
    # and unflattens while the hook is on) and of the device hooks C++ calls back
    entries = [device._factory, device._pin_memory, device._is_pinned, dynamic.ctc_loss_lengths]
    for cls in (TpuTensor, TpuPayload, device._Guard, device._Hooks):
        for v in vars(cls).values():
            v = v.fget if isinstance(v, property) else getattr(v, "__func__", v)
            if hasattr(v, "__code__"):
                entries.append(v)
    for fn in entries:
        set_code_exec_strategy(fn.__code__, skip)


_skip_runtime_frames()

#: ``torch.tpu`` functions that read or change host-side state (the device generator, pending
#: work, memory counters). Inside a compiled function (``torch.manual_seed``, ``fork_rng``,
#: ``freeze_rng_state``) dynamo must call them where the code does, not trace into them:
#: tracing ``set_rng_state`` failed on its CPU state tensor, and a traced seed would be baked in.
_HOST_STATE = ("manual_seed", "manual_seed_all", "seed", "initial_seed", "get_rng_state", "set_rng_state",
               "get_rng_state_all", "set_rng_state_all", "synchronize", "memory_stats", "memory_allocated",
               "max_memory_allocated", "memory_reserved", "empty_cache")


def _host_state_runs_eagerly() -> None:
    """Wrap the :data:`_HOST_STATE` functions of ``torch.tpu`` in ``torch._dynamo.disable`` (a
    graph break around each call; outside torch.compile they run as before)."""
    from tpu_runtime import torch_tpu

    for name in _HOST_STATE:
        fn = getattr(torch_tpu, name)
        if not hasattr(fn, "_torchdynamo_disable"):
            setattr(torch_tpu, name, torch._dynamo.disable(fn, reason=f"torch.tpu.{name} changes host state"))


_host_state_runs_eagerly()

_DECOMPOSITIONS = _decompositions()
_AOT = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=_DECOMPOSITIONS,
                    keep_inference_input_mutations=True)  # (written back by the runner: tpu_runtime.compile_writes)


def _fma(a: Any, b: Any, c: Any) -> Any:
    return a * b + c


def _late_decompositions() -> None:
    """Decompose ops that exist only once another part of torch has loaded: dynamo itself
    rewrites ``addcmul_``/``addcdiv_``/``add_`` with a ``value``/tensor ``alpha`` (an optimizer
    step) into inductor's ``prims.fma``, registered when ``torch._inductor`` is imported."""
    fma = getattr(torch.ops.prims, "fma", None)
    if fma is not None:
        _DECOMPOSITIONS.setdefault(fma.default, _fma)


def _custom_op_decompositions(gm: torch.fx.GraphModule) -> list:
    """Decompose the graph's custom ops (``torch.library.custom_op``) that have no row into their
    kernel for the tpu device, or their device-agnostic one, as eager mode runs them (AOTAutograd
    still applies their registered autograd formula above the decomposition). Returns those ops."""
    from torch._library.custom_ops import _maybe_get_opdef

    from converter.lowering import registry

    found = []
    for node in gm.graph.nodes:
        op = node.target
        if isinstance(op, torch._ops.OpOverloadPacket):
            op = getattr(op, "default", None)
        if (node.op != "call_function" or not isinstance(op, torch._ops.OpOverload)
                or op.namespace in ("aten", "prims") or registry.find(op) is not None):
            continue
        if op in _DECOMPOSITIONS:
            found.append(op)
            continue
        opdef = _maybe_get_opdef(op)
        kernel = opdef and (opdef._backend_fns.get("tpu") or opdef._backend_fns.get(None))
        if kernel:
            _DECOMPOSITIONS[op] = kernel
            found.append(op)
    return found


@contextlib.contextmanager
def _no_device_constants(example_inputs: list) -> Iterator[None]:
    """While AOTAutograd traces: the fake-tensor mode of this compilation keeps no tpu tensor as a constant.

    The mode folds a small tensor the traced function makes itself (``torch.tensor(0.5, device=t.device)``) into
    a constant: a real tensor next to its fake, and an op whose inputs are all constants runs on them for real,
    with the Python dispatch key turned off. A tpu tensor's ops need that key (a Python backend has no kernel
    below it), so a reference decomposition that calls ``log`` on such a constant (``xlogy``'s, ``heaviside``'s)
    failed with "could not find kernel ... at dispatch key PrivateUse1". Without the constant the op is traced
    like any other; CPU constants are kept. The instance attribute is removed afterwards."""
    mode = torch._guards.detect_fake_mode(example_inputs)
    if mode is None or "may_turn_const" in vars(mode):
        yield
        return
    folds = mode.may_turn_const
    mode.may_turn_const = lambda t: t.device.type != DEVICE.type and folds(t)
    try:
        yield
    finally:
        del mode.may_turn_const


def _pin_zero_one(example_inputs: list) -> None:
    """Specialize each symbolic int argument of the graph whose value now is 0 or 1 to it (a guard, as dynamo's for
    sizes): AOTAutograd specializes it itself when a check while it traces asks (``x[:k]``: is the slice
    contiguous, ``k == 1``?), after it read the outputs' symbolic sizes for the tensor subclass's wrapping, and the
    wrapper it builds then expects an output the graph no longer returns (``IndexError: list index out of range``
    at the first call: PyTorch's, for any traceable tensor subclass, ``TwoTensor`` as well)."""
    for a in example_inputs:
        if isinstance(a, torch.SymInt) and a.node.hint in (0, 1):
            guard_int(a)


def tpu_backend(gm: torch.fx.GraphModule, example_inputs: list, **kwargs: Any) -> Callable:
    """The dynamo backend (entry point ``tpu``): AOTAutograd with the decompositions above and
    :func:`compile_graph` for the forward and backward graphs."""
    from tpu_runtime.device import rescued_engine_errors

    _late_decompositions()
    _pin_zero_one(example_inputs)
    graph_checks.take_traced_refusals()  # (left by a trace that failed before its graph was compiled)
    rewrite(gm)
    custom = _custom_op_decompositions(gm)
    resolve_outputs(gm)
    views = split_shared_views(gm, example_inputs)
    try:
        # AOTAutograd traces the backward with ``torch.autograd.grad``, on the engine's thread for the tpu device,
        # where an op's exception (a data-dependent shape: ``grad[bool_mask]`` in ``index_put``'s backward) ends
        # the engine with a bare SystemError: the op's own exception is raised instead, which dynamo handles as it
        # does on the CPU (the frame runs eagerly)
        with rescued_engine_errors(), _no_device_constants(example_inputs):
            compiled = _AOT(gm, example_inputs, **kwargs)
        return compiled if views is None else views(compiled)
    except AssertionError:  # AOTAutograd's check that the traced graph is functional
        if not custom:
            raise
        from tpu_runtime.compile_split import split_at_ops

        # an implementation that writes into its buffers: the op runs eagerly between compiled pieces
        return split_at_ops(gm, custom, tpu_backend)
