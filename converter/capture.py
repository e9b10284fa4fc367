"""Capture: torch.export → core ATen, keeping a declared list of high-level ops whole."""

from __future__ import annotations

import contextlib
import copy
import functools
import os
import re
import traceback
from typing import Any, Iterator

import torch
from torch._prims_common import ELEMENTWISE_TYPE_PROMOTION_KIND, elementwise_dtypes
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor
from torch.export import ExportedProgram
from torch.utils._pytree import tree_leaves, tree_map

from converter.errors import CaptureError, InputError, exception_chain, traceback_location

aten = torch.ops.aten

#: High-level ops that targets map better whole (TFLite builtins, Pallas kernels).
#: They are kept out of the decomposition table and lowered as composites.
PRESERVED_OPS: tuple = (
    aten.scaled_dot_product_attention.default,
    aten.layer_norm.default,
    aten.rms_norm.default,
    aten.group_norm.default,
    aten.linear.default,
    aten.gelu.default,
    aten.silu.default,
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.mish.default,
    aten.softmax.int,
    aten.log_softmax.int,
    aten._softmax.default,
    aten._log_softmax.default,
    aten.pixel_shuffle.default,
    aten.upsample_nearest2d.vec,
    aten.upsample_bilinear2d.vec,
    aten.embedding.default,
    aten.embedding_bag.padding_idx,
    aten._embedding_bag.default,
    # kept whole: LiteRT emits SLICE + CONCATENATION instead of index arithmetic + GATHER
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
    # kept whole: one scatter per plane, not torch's index arithmetic over the flattened output
    aten.max_unpool2d.default,
    aten.max_unpool3d.default,
    # kept whole: torch's decomposition counts the positions after a target list's -1 as targets of class 0
    aten.multilabel_margin_loss_forward.default,
    # kept whole: torch's decomposition traces a Python loop per layer (most of a small RNN's capture time)
    aten.lstm.input,
    aten.gru.input,
    aten.rnn_tanh.input,
    aten.rnn_relu.input,
)


#: The recurrent layers :data:`PRESERVED_OPS` keeps: their output shapes come from :func:`recurrent_shape_rules`.
_RECURRENT = (aten.lstm.input, aten.gru.input, aten.rnn_tanh.input, aten.rnn_relu.input)


def _recurrent_shapes(fake_mode: Any, input: Any, hx: Any, *rest: Any, **kwargs: Any) -> tuple:
    """A preserved recurrent layer's outputs under fake tensors (a fake-tensor rule for symbolic sizes), from the
    shapes alone: ``output`` is the input's shape with its features replaced by ``directions × hidden`` (``hidden``
    as the initial state has it: the projection size where there is one), the final states are shaped as the
    initial ones. ``rest``: params, has_biases, num_layers, dropout, train, bidirectional, batch_first."""
    bidirectional = rest[5] if len(rest) > 5 else kwargs["bidirectional"]
    states = list(hx) if isinstance(hx, (list, tuple)) else [hx]
    with fake_mode:
        out = input.new_empty((*input.shape[:-1], (2 if bidirectional else 1) * states[0].shape[-1]))
        return (out, *[s.new_empty(s.shape) for s in states])


@contextlib.contextmanager
def recurrent_shape_rules() -> Iterator[None]:
    """Fake-tensor rules for the preserved recurrent layers while torch.export traces them whole.

    With a symbolic size, fake tensors ran torch's Python decomposition of these ops, whose loop over time made
    torch.export specialize the sequence length (a dynamic length was refused: "Constraints violated"); the rule
    here computes the shapes directly, so the length may be dynamic (the lowering's time loop is then a
    ``lax.scan``). Fake tensors consult it first for symbolic sizes (their "fast" rules); it is registered only
    for the capture and removed after, so no other fake-tensor run sees it."""
    from torch._subclasses import fake_impls

    table = fake_impls.get_fast_op_impls()
    saved = {op: table.get(op) for op in _RECURRENT}
    for op in _RECURRENT:
        table[op] = _recurrent_shapes
    try:
        yield
    finally:
        for op, rule in saved.items():
            if rule is None:
                table.pop(op, None)
            else:
                table[op] = rule


def _multilabel_margin_loss(self: Any, target: Any, reduction: int = 1) -> Any:
    """multilabel_margin_loss(Tensor self, Tensor target, int reduction=Mean) -> Tensor, as its forward op (torch's
    entry computes the loss with the decomposition :data:`PRESERVED_OPS` keeps out)."""
    return aten.multilabel_margin_loss_forward.default(self, target, reduction)[0]


def _addcmul(self: Any, tensor1: Any, tensor2: Any, *, value: Any = 1) -> Any:
    """addcmul(Tensor self, Tensor tensor1, Tensor tensor2, *, Scalar value=1) -> Tensor, as the CPU kernel computes
    it: the three inputs in their common dtype (float32 for a half type), an integer result taking ``value``
    truncated. torch's reference multiplies ``tensor1`` by ``tensor2`` in their own dtype (a uint8 product into an
    int32 result wrapped) and scales by a float ``value`` an integer result truncates only once."""
    compute, result = elementwise_dtypes(self, tensor1, tensor2,
                                         type_promotion_kind=ELEMENTWISE_TYPE_PROMOTION_KIND.DEFAULT)
    if not (compute.is_floating_point or compute.is_complex) and type(value) is float:
        value = int(value)
    s, a, b = (t.to(compute) for t in (self, tensor1, tensor2))
    return (s + value * a * b).to(result)


def _max_pool1d(self: Any, kernel_size: Any, stride: Any = (), padding: Any = 0, dilation: Any = 1,
                ceil_mode: bool = False) -> Any:
    """max_pool1d(Tensor self, int[1] kernel_size, int[1] stride=[], int[1] padding=0, int[1] dilation=1,
    bool ceil_mode=False) -> Tensor, as its indices variant's values. torch's C++ entry reads the length as a plain
    int, which made torch.export specialize a dynamic length ("Constraints violated ... specialized it to be a
    constant"); the indices variant keeps it symbolic (and its unused indices are dead code)."""
    return aten.max_pool1d_with_indices.default(self, kernel_size, stride, padding, dilation, ceil_mode)[0]


#: Decompositions of ours: into an op :data:`PRESERVED_OPS` keeps, where torch's entry goes around it, in place
#: of torch's where its reference computes another value than the CPU kernel, or where torch's entry would
#: specialize a dynamic size.
DECOMPOSITIONS = {aten.multilabel_margin_loss.default: _multilabel_margin_loss, aten.addcmul.default: _addcmul,
                  aten.max_pool1d.default: _max_pool1d}


@functools.lru_cache(maxsize=1)
def _base_table() -> Any:
    table = torch.export.default_decompositions()
    for op in PRESERVED_OPS:
        if op in table:
            table.pop(op)
    table.update(DECOMPOSITIONS)
    return table


def decomposition_table() -> Any:
    """torch.export's default core-ATen decompositions minus :data:`PRESERVED_OPS`.

    Building the table costs ~0.2 s, so it is built once and copied per capture.
    """
    return _base_table().copy()


@functools.lru_cache(maxsize=1)
def _decomposition_plan() -> tuple[dict, dict] | None:
    """``run_decompositions``' two tables, computed once: (CIA overrides, post-autograd table).

    ``ExportedProgram.run_decompositions`` re-derives them on every call (materializing
    the table and listing every CompositeImplicitAutograd op: ~0.5 s) and then
    overrides the CIA kernel of ~500 ops, ~470 of them only to ask for their own C++
    CIA kernel, which runs anyway without an override; those are left out (same
    graphs: checked on every examples/models.py family and the OpInfo samples).
    ``None`` when this torch lacks the private helpers; :func:`decompose_program`
    then takes the public path.
    """
    try:
        from torch.export.exported_program import (_decompose_exported_program,  # noqa: F401
                                                    _split_decomp_table_to_cia_and_python_decomp)
    except ImportError:
        return None
    cia, python = _split_decomp_table_to_cia_and_python_decomp(dict(decomposition_table()))
    return {op: fn for op, fn in cia.items() if not _is_own_cia_kernel(op, fn)}, python


def _is_own_cia_kernel(op: Any, fn: Any) -> bool:
    """True when ``fn`` only asks for ``op``'s C++ CompositeImplicitAutograd kernel.

    Ops whose override is a Python kernel (``py_kernels``, e.g. the upsample and RNN
    ops) keep it: installing that kernel changes what export records (it kept
    ``upsample_nearest2d.default`` whole where the C++ kernel decomposes it).
    """
    del op
    return getattr(getattr(fn, "func", None), "__name__", "") == "_special_op_to_decompose_cia"


def decompose_program(ep: ExportedProgram) -> ExportedProgram:
    """``ep.run_decompositions(decomposition_table())``, without its per-call setup cost."""
    plan = _decomposition_plan()
    if plan is None:
        return ep.run_decompositions(decomposition_table())
    from torch._subclasses.fake_tensor import unset_fake_temporarily
    from torch.export.exported_program import _decompose_exported_program
    cia, python = plan
    with unset_fake_temporarily(), recurrent_shape_rules():  # as run_decompositions does
        return _decompose_exported_program(ep, cia_to_decomp=dict(cia), python_decomp_table=dict(python),
                                           joint_loss_index=None, decompose_custom_triton_ops=False)


#: What a guard on a tensor's values means in the model's code, and what exports instead.
_DATA_DEPENDENT = (" (a Python branch, loop or size on a tensor's values: an exported program holds one path for "
                   "every input; compute both with torch.where, branch with torch.cond, or move the test out of "
                   "forward)")


#: What converts a model that returns (or takes) a transformers KV cache, a type torch.export cannot flatten.
_CACHE_TYPE = (" (a transformers cache, returned with use_cache=True: pass sample_kwargs={'use_cache': False} for the "
               "model without it, or export it with transformers' exporter, "
               "transformers.exporters.exporter_dynamo.DynamoExporter().export_program(model, inputs, DynamoConfig()), "
               "and convert the ExportedProgram it returns)")


#: torch.ao's ``FakeQuantize.forward`` branches on its enable flags (tensors): what converts instead.
_FAKE_QUANTIZE_FILE = os.path.join("torch", "ao", "quantization", "fake_quantize.py")
_FAKE_QUANTIZE_BRANCH = (" (torch.ao's FakeQuantize, of default_qat_qconfig, branches on its observer_enabled and "
                         "fake_quant_enabled tensors: a model prepared with "
                         "torch.ao.quantization.get_default_qat_qconfig('x86' / 'qnnpack'), whose fused observer takes "
                         "them as inputs, converts)")


def _raised_in(exc: BaseException, path: str) -> bool:
    """Whether a frame of ``exc``'s traceback (or of the exceptions it was raised from) is in a file ending with
    ``path``."""
    return any(f.filename.endswith(path) for raised in exception_chain(exc)
               for f in traceback.extract_tb(raised.__traceback__))


#: The modules of torch.ao's quantized form (``torch.ao.quantization.convert`` / ``quantize_dynamic``'s output).
_QUANTIZED_MODULES = ("torch.ao.nn.quantized.", "torch.ao.nn.intrinsic.quantized.")


def _quantized_hint(model: torch.nn.Module) -> str:
    """What to do where ``model`` holds torch.ao's quantized form, which torch.export cannot trace (its packed int8
    weights, quantized tensors): its first such module or tensor, and the forms that convert; else ``""``."""
    part = next((f"module {name or '(root)'} ({type(m).__module__}.{type(m).__qualname__})"
                 for name, m in model.named_modules() if type(m).__module__.startswith(_QUANTIZED_MODULES)
                 and ".reference." not in type(m).__module__), None)
    part = part or next((f"tensor {name} ({t.dtype})" for name, t in (*model.named_parameters(),
                                                                      *model.named_buffers()) if t.is_quantized), None)
    if part is None:
        return ""
    return (f" ({part} is torch.ao's quantized form, int8 weights packed for the CPU's quantized kernels or quantized "
            "tensors, which torch.export cannot trace: convert the model before torch.ao.quantization.convert or "
            "quantize_dynamic; a model prepared for QAT converts with its fake quantization, and quantize='int8' "
            "gives a LiteRT model int8 weights)")


def capture(model: torch.nn.Module, sample_args: tuple, sample_kwargs: dict | None = None,
            dynamic_shapes: Any = None, *, strict: bool = False, decompose: bool = True) -> ExportedProgram:
    """Capture ``model`` with torch.export and decompose it to core ATen.

    Args:
        model: the module to capture (its train/eval mode is respected).
        sample_args: positional sample inputs.
        sample_kwargs: keyword sample inputs.
        dynamic_shapes: torch.export ``dynamic_shapes`` (e.g. ``{"x": {0: Dim("b")}}``).
        strict: use torch.export's strict (TorchDynamo) tracing.
        decompose: run the core-ATen decomposition with the preserve-list.

    Returns:
        The ExportedProgram.

    Raises:
        InputError: ``model`` is not a module or the inputs are not a tuple.
        CaptureError: torch.export failed; the message keeps torch's explanation, names the user's line that
            raised it (a non-strict trace runs ``forward`` in Python) and, for a guard on a tensor's values,
            says what exports instead.
    """
    if not isinstance(model, torch.nn.Module):
        raise InputError(f"expected a torch.nn.Module, got {type(model).__name__}")
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    if not isinstance(sample_args, (tuple, list)):
        raise InputError(f"sample_args must be a tuple of inputs, got {type(sample_args).__name__}")
    model, sample_args, sample_kwargs = on_the_host(model, tuple(sample_args), sample_kwargs)
    ep, first_pass_error = None, None
    try:
        if decompose:
            try:
                with _tracers_kept_out(model):
                    ep = _one_pass(model, tuple(sample_args), sample_kwargs, dynamic_shapes, strict)
            except Exception as e:  # torch.export's documented path below gives the error (or succeeds)
                ep, first_pass_error = None, e
        if ep is None:
            with _tracers_kept_out(model):
                try:
                    ep = torch.export.export(model, tuple(sample_args), sample_kwargs or None,
                                             dynamic_shapes=dynamic_shapes, strict=strict)
                except Exception:
                    # A dynamic dim the first pass could not keep: its reason, found with this module's
                    # decompositions (which keep dims torch's own entries specialize: max_pool1d's length).
                    if first_pass_error is not None and str(first_pass_error).startswith("Constraints violated"):
                        raise first_pass_error from None
                    raise
        if decompose and not _all_lowered(ep):
            ep = decompose_program(ep)
    except Exception as e:  # torch.export raises many types; keep its message, one line first
        first = _out_of_range(_first_line(e), dynamic_shapes)
        where = traceback_location(e)
        where = f" at {where}" if where is not None else ""
        hint = _quantized_hint(model)
        if "data-dependent" in first:
            hint = _FAKE_QUANTIZE_BRANCH if _raised_in(e, _FAKE_QUANTIZE_FILE) else _DATA_DEPENDENT
        elif "which is not a known type" in first and "Cache'>" in first:
            hint = _CACHE_TYPE
        raise CaptureError(f"torch.export failed on {type(model).__name__}{where}: {first}{hint}") from e
    finally:
        _release_traced_tensors(ep)
    return ep


def _first_line(e: BaseException) -> str:
    """torch.export's error in one line: its first line, and for a dynamic dim it could not keep ("Constraints
    violated (L)!"), the reasons and suggested fixes torch lists on the lines below it (which dim was specialized to
    which size, which guard some sizes of the declared range fail, the ``Dim`` that would hold), which are the
    error's whole content."""
    lines = [line.strip() for line in str(e).strip().splitlines()]
    if not lines or not lines[0]:
        return type(e).__name__
    first = lines[0]
    if not first.startswith("Constraints violated"):
        return first
    first = first.split(" For more information", 1)[0]
    reasons = list(dict.fromkeys(line[2:] for line in lines if line.startswith("- ")))
    fixes: list[str] = []
    if "Suggested fixes:" in lines:
        for line in lines[lines.index("Suggested fixes:") + 1:]:
            if not line:
                break
            fixes.append(line)
    return " ".join([first, *reasons] + ([f"Suggested fixes: {'; '.join(fixes)}."] if fixes else []))


def _out_of_range(first: str, dynamic_shapes: Any) -> str:
    """torch.export's "16 not in range [32, 96]" (a sample input's size outside a declared ``Dim``'s range) with the
    names of the dims declared with that range and what to do; any other message as it is."""
    found = re.fullmatch(r"(-?\d+) not in range \[(\S+), (\S+)\]", first)
    if found is None:
        return first
    size, low, high = found.groups()
    leaves = torch.utils._pytree.tree_leaves(dynamic_shapes, is_leaf=lambda x: isinstance(x, torch.export.Dim))
    names = sorted({d.__name__ for d in leaves if isinstance(d, torch.export.Dim)
                    and (str(d.min), str(d.max)) == (low, high)})
    dims = f" declared for {', '.join(names)}" if names else " of a dynamic dim"
    return (f"a sample input's size {size} is outside the range [{low}, {high}]{dims}: give sample inputs whose "
            "sizes are inside their dims' declared ranges, or widen the ranges")


def _release_traced_tensors(ep: ExportedProgram | None) -> None:
    """Drop what torch.export keeps of the real tensors it traced (the model's parameters, the sample inputs):
    each fake-tensor mode's weak reference to every tensor it made a fake of, and the tracer's map of the last
    trace's fakes (a module global torch clears only at the next trace). ``torch.utils.swap_tensors`` refuses a
    tensor with a weak reference, so after a conversion ``model.to("tpu")`` (which swaps each parameter for a tpu
    tensor) raised "Couldn't swap Linear.weight", as long as the artifact (its program's fake values) lived."""
    from torch.fx.experimental import proxy_tensor

    getattr(proxy_tensor, "_FAKE_TENSOR_ID_TO_PROXY_MAP_FOR_EXPORT", {}).clear()
    if ep is None:
        return
    modes = {}
    for gm in ep.graph_module.modules():  # (control-flow branches are graphs of their own)
        for node in getattr(getattr(gm, "graph", None), "nodes", ()):
            for val in tree_leaves(node.meta.get("val")):
                if isinstance(val, FakeTensor):
                    modes[id(val.fake_mode)] = val.fake_mode
    for mode in modes.values():
        describer = getattr(getattr(getattr(mode, "fake_tensor_converter", None), "meta_converter", None),
                            "describer", None)
        if describer is not None and hasattr(describer, "lookup_tensor"):
            describer.lookup_tensor.clear()  # (its ids stay unique: the counter goes on)


def on_the_host(model: torch.nn.Module, args: tuple, kwargs: dict | None) -> tuple:
    """``(model, args, kwargs)``, or CPU copies of them when any of their tensors lives on another device
    (a model trained on the runtime's ``tpu`` device, then exported): torch.export fakes each tensor on its own
    device, and a tpu tensor's storage cannot be swapped for a fake one ("Attempted to set the storage of a
    tensor on device tpu:0 to a storage on different device meta"). The user's model is not moved."""
    tensors = [*model.parameters(), *model.buffers(), *(x for x in tree_leaves((args, kwargs))
                                                        if isinstance(x, torch.Tensor))]
    attributes = [(m, k) for m in model.modules() for k, v in vars(m).items()
                  if isinstance(v, torch.Tensor) and v.device.type not in _HOST]
    if not attributes and all(t.device.type in _HOST for t in tensors):
        return model, args, kwargs
    host = copy.deepcopy(model).cpu()
    copies = dict(zip(map(id, model.modules()), host.modules()))
    for m, k in attributes:  # plain tensor attributes (not parameters or buffers): ``.cpu()`` leaves them
        setattr(copies[id(m)], k, getattr(m, k).cpu())
    return host, tree_map(to_host, args), tree_map(to_host, kwargs) if kwargs else kwargs


def to_host(x: Any) -> Any:
    """``x`` on the CPU when it is a tensor, else ``x`` itself (for ``tree_map`` over inputs)."""
    return x.cpu() if isinstance(x, torch.Tensor) else x


#: Devices torch.export traces in place.
_HOST = ("cpu", "meta")


def _is_tracer(v: Any) -> bool:
    """Whether ``v`` is a tensor that only exists inside a trace (fake, functional, or another storage-less one)."""
    if not isinstance(v, torch.Tensor):
        return False
    if isinstance(v, (FakeTensor, FunctionalTensor)):
        return True
    try:
        v.untyped_storage().data_ptr()
    except Exception:  # (a tracing wrapper: "Cannot access data pointer")
        return True
    return False


def _holds_tracer(v: Any) -> bool:
    if isinstance(v, dict):
        return any(_is_tracer(x) for x in v.values())
    if isinstance(v, (list, tuple, set)):
        return any(_is_tracer(x) for x in v)
    return _is_tracer(v)


@contextlib.contextmanager
def _tracers_kept_out(model: torch.nn.Module) -> Iterator[None]:
    """Undo what a trace of ``model`` left of its tensors in the modules' Python state.

    A module that caches a tensor computed in ``forward`` in a plain attribute or container (LeViT's
    ``attention_bias_cache``, a dict keyed by device, filled in eval mode) keeps the trace's fake or functional
    tensor there: the model then fails in eager ("Attempting to use FunctionalTensor on its own") and in every
    later export. Each module attribute and each dict / list / set attribute's contents are noted before the trace;
    afterwards, one that changed and now holds such a tensor gets its old value back, a container that holds one
    its old contents (LeViT's ``train()`` replaces the dict: both the old and the new one were filled), and one the
    trace added is removed. (torch.export restores parameters, buffers and tensor attributes itself.)
    """
    saved = []
    for m in model.modules():
        d = m.__dict__
        saved.append((d, {k: (v, v.copy() if isinstance(v, (dict, list, set)) else None) for k, v in d.items()}))
    try:
        yield
    finally:
        for d, before in saved:
            for k in [k for k in d if k not in before and _holds_tracer(d[k])]:
                del d[k]
            for k, (v, contents) in before.items():
                now = d.get(k, v)
                if now is not v and _holds_tracer(now):
                    d[k] = v
                if contents is not None and _holds_tracer(v):
                    if isinstance(v, list):
                        v[:] = contents
                    else:
                        v.clear()
                        v.update(contents)


def _one_pass(model: torch.nn.Module, args: tuple, kwargs: dict | None, dynamic_shapes: Any,
              strict: bool) -> ExportedProgram | None:
    """torch.export straight to functional ATen in one trace, :data:`PRESERVED_OPS` kept whole.

    ``torch.export.export`` traces a training IR and ``run_decompositions`` traces the
    whole program a second time; tracing once at the ATen level under the same
    CompositeImplicitAutograd overrides gives the same program minus the Python-table
    decompositions (``transpose.int`` stays, where the second trace would write
    ``permute``), at ~2/3 of the capture time. :func:`capture` keeps this program when
    the lowering table takes every op in it, else decomposes it as usual. ``None`` when
    this torch lacks the private entry points.
    """
    plan = _decomposition_plan()
    try:
        from torch.export._trace import _export
        from torch.export.exported_program import _override_composite_implicit_decomp
    except ImportError:
        return None
    if plan is None:
        return None
    with recurrent_shape_rules(), _override_composite_implicit_decomp(dict(plan[0])):
        return _export(model, args, kwargs or None, dynamic_shapes=dynamic_shapes, strict=strict, pre_dispatch=False)


def _all_lowered(ep: ExportedProgram) -> bool:
    """Whether the lowering table has a row for every ATen op of ``ep``."""
    from converter.lowering import registry

    table = registry.registered()
    graphs = [ep.graph] + [m.graph for m in ep.graph_module.modules()
                           if isinstance(m, torch.fx.GraphModule) and m is not ep.graph_module]  # cond branches
    return all(n.target in table for g in graphs for n in g.nodes
               if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload))
