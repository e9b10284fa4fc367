"""An ``ExportedProgram`` in place of a module: what ``torch.export.export`` made, ``torch.export.load`` read back,
or an exporter built on them gave (transformers' ``DynamoExporter``, which exports a language model with its KV
cache), converts and validates as the module it came from would.

The program is decomposed to core ATen as a captured one is (:func:`~converter.capture.decompose_program`); its
sample inputs are the ones it was exported with (``ep.example_inputs``) unless others are given, which must fit its
inputs (structure, dtypes, static sizes, the ranges of its dynamic dims). Its dynamic dims and tracing mode were
fixed when it was exported: ``dynamic_shapes=`` and ``strict=`` are refused. Its training mode is read from its
graph: a dropout that runs or a batch norm that updates its statistics makes it a training program (the
weight-folding passes then do not run), as ``model.training`` decides for a module.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind
from torch.utils._pytree import keystr, tree_flatten_with_path, tree_map, tree_structure

from converter.capture import decompose_program, to_host
from converter.errors import CaptureError, InputError, first_line

aten = torch.ops.aten

#: Ops a program records only when its module was exported in training mode (eval-mode dropout records
#: nothing, and eval-mode batch norm is ``_native_batch_norm_legit_no_training``).
_TRAINING_OPS = frozenset({
    aten.native_dropout.default, aten.dropout.default, aten.feature_dropout.default, aten.alpha_dropout.default,
    aten.feature_alpha_dropout.default, aten._native_batch_norm_legit_functional.default,
    aten._native_batch_norm_legit.default, aten._native_batch_norm_legit.no_stats,
    aten._batch_norm_with_update.default, aten._batch_norm_with_update_functional.default,
})


def is_exported(model: Any) -> bool:
    """Whether ``model`` is a ``torch.export.ExportedProgram``."""
    return isinstance(model, ExportedProgram)


def sample_inputs(ep: ExportedProgram, sample_args: Any = (), sample_kwargs: dict | None = None) -> tuple[tuple, dict]:
    """The sample inputs of ``ep``: ``sample_args`` / ``sample_kwargs`` when given (checked against its inputs), else
    the ones it was exported with.

    Raises:
        InputError: none given and ``ep`` holds none (a program made without them), or the given ones do not fit
            its inputs (torch's message: which input, which size or dtype).
    """
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    if not isinstance(sample_args, (tuple, list)):
        raise InputError(f"sample_args must be a tuple of inputs, got {type(sample_args).__name__}")
    # (tpu tensors: on the CPU, as capture takes them)
    args, kwargs = tree_map(to_host, tuple(sample_args)), tree_map(to_host, dict(sample_kwargs or {}))
    if not args and not kwargs:
        if ep.example_inputs is None:
            raise InputError("the ExportedProgram holds no example inputs: pass sample inputs, as convert(ep, (x,))")
        args, kwargs = ep.example_inputs
        return tuple(args), dict(kwargs)
    try:
        from torch.export._unlift import _check_inputs_match

        _check_inputs_match(args, kwargs, ep.call_spec.in_spec)
    except (ValueError, RuntimeError, AssertionError, TypeError) as e:
        what = _differing(ep, args, kwargs) or (f"it takes {_signature(ep)}, got {len(args)} positional and keywords "
                                                f"{sorted(kwargs)}")
        raise InputError(f"the sample inputs do not fit the ExportedProgram's inputs: {what}") from e
    flat = tree_flatten_with_path((args, kwargs))[0]
    try:
        ep._check_input_constraints(flat)
    except (ValueError, RuntimeError, AssertionError, TypeError) as e:
        raise InputError(f"the sample inputs do not fit the ExportedProgram's inputs: {first_line(e)}") from e
    for (path, value), node in zip(flat, _user_inputs(ep)):
        want = node.meta.get("val")
        if isinstance(want, torch.Tensor) and isinstance(value, torch.Tensor) and value.dtype != want.dtype:
            where = ("args" if path[0].idx == 0 else "kwargs") + keystr(path[1:])
            raise InputError(f"the sample inputs do not fit the ExportedProgram's inputs: input {where} is "
                             f"{value.dtype}, exported as {want.dtype}")
    return args, kwargs


def _user_inputs(ep: ExportedProgram) -> list[torch.fx.Node]:
    """The placeholders of ``ep``'s user inputs, in the order of its flattened inputs."""
    placeholders = [n for n in ep.graph.nodes if n.op == "placeholder"]
    return [n for n, spec in zip(placeholders, ep.graph_signature.input_specs) if spec.kind == InputKind.USER_INPUT]


def _signature(ep: ExportedProgram) -> str:
    """What ``ep`` takes, in words: ``"2 positional and keywords ['mask']"``."""
    spec = ep.call_spec.in_spec
    try:
        positional, keywords = spec.children_specs
        return f"{positional.num_children} positional and keywords {sorted(keywords.context)}"
    except (AttributeError, ValueError, TypeError):
        return str(spec)


def _differing(ep: ExportedProgram, args: tuple, kwargs: dict) -> str | None:
    """The input of the same name and position whose structure is not the one ``ep`` was exported with, in words
    (a cache whose structure holds its length); ``None`` when the names or counts differ."""
    try:
        positional, keywords = ep.call_spec.in_spec.children_specs
        if len(args) != positional.num_children or sorted(kwargs) != sorted(keywords.context):
            return None
        pairs = [(f"args[{i}]", a, spec) for i, (a, spec) in enumerate(zip(args, positional.children_specs))]
        pairs += [(f"kwargs[{k!r}]", kwargs[k], spec) for k, spec in zip(keywords.context, keywords.children_specs)]
    except (AttributeError, ValueError, TypeError):
        return None
    for where, value, spec in pairs:
        if tree_structure(value) != spec:
            return (f"input {where} ({type(value).__name__}) is not of the structure it was exported with (its "
                    "tensors, or the Python values its structure holds, differ)")
    return None


def prepared(ep: ExportedProgram, sample_args: Any = (), sample_kwargs: dict | None = None, *,
             dynamic_shapes: Any = None, strict: bool = False) -> tuple[ExportedProgram, bool]:
    """``ep`` as :func:`~converter.capture.capture` would have captured its module: decomposed to core ATen, with
    its sample inputs (:func:`sample_inputs`) as example inputs; and whether it is an inference program (see the
    module docstring). ``ep`` itself is not changed.

    Raises:
        InputError: ``dynamic_shapes`` or ``strict`` given, or bad sample inputs.
        CaptureError: the decomposition failed.
    """
    if dynamic_shapes is not None:
        raise InputError("an ExportedProgram's dynamic dims were fixed when it was exported: export it with "
                         "dynamic_shapes= instead of passing them to convert")
    if strict:
        raise InputError("strict= chooses how a module is traced; an ExportedProgram was traced already")
    args, kwargs = sample_inputs(ep, sample_args, sample_kwargs)
    try:
        program = decompose_program(ep)  # (a new program even when nothing decomposes: ep stays as it was)
    except Exception as e:  # torch raises many types; keep its message, one line
        raise CaptureError(f"decomposing the ExportedProgram failed: {first_line(e)}") from e
    program.example_inputs = (args, kwargs)
    return program, not _training(program)


def _training(ep: ExportedProgram) -> bool:
    """Whether ``ep`` was exported from a module in training mode (see :data:`_TRAINING_OPS`)."""
    for module in ep.graph_module.modules():
        if isinstance(module, torch.fx.GraphModule):
            for node in module.graph.nodes:
                if node.op == "call_function" and node.target in _TRAINING_OPS and _active(node):
                    return True
    return False


def _active(node: torch.fx.Node) -> bool:
    """A dropout node whose ``train`` argument is false does nothing (``F.dropout(x, training=False)``)."""
    if node.target is aten.native_dropout.default:
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train")
        return train is not False
    if "dropout" in node.target._schema.name:
        train = node.args[2] if len(node.args) > 2 else node.kwargs.get("train", True)
        return train is not False
    return True


__all__ = ["is_exported", "prepared", "sample_inputs"]
