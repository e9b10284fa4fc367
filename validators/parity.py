"""Parity runs: PyTorch (the reference) and every target on the same inputs.

:func:`validate` captures the model once, lowers it for each target, builds each
target's artifact with the builder registered in ``converter.api.TARGETS`` (the
same path as ``convert()``), runs the sample, any given inputs and seeded random
inputs through PyTorch and every artifact, and compares every output — against
PyTorch and between targets. A failing target is localized to its first
diverging FX node (``validators.localize``) and gets a repro bundle
(``validators.repro``) that :meth:`ParityReport.write` puts on disk.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import itertools
import sys
import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np
import torch
from torch.export import ExportedProgram
from torch.utils._pytree import tree_map

from converter.api import TARGETS, capture_program, target_builder
from converter.capture import on_the_host, to_host
from converter.errors import ConversionError, InputError, ParityError, first_line, source_location
from converter.exported import is_exported, sample_inputs
from converter.lowering import lower
from converter.lowering.interpreter import LoweredProgram
from validators import localize as loc
from validators.inputs import InputSet, build_input_sets, tensor_input_names
from validators.metrics import OutputError, compare, task_agreement
from validators.report.data import Comparison, InputInfo, ParityReport, TargetResult
from validators.repro import ReproBundle
from validators.tolerances import BY_DTYPE, LOW_PRECISION, cross_target, tolerance

DEFAULT_TARGETS = ("tpu", "litert", "stablehlo")


class Progress:
    """One status line on stderr, rewritten in place; silent unless enabled.

    Args:
        enabled: ``None`` means "when stderr is a terminal".
        stream: where to write (stderr by default).
    """

    def __init__(self, enabled: bool | None = None, stream: Any = None):
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self._shown = False

    def __call__(self, message: str) -> None:
        """Show ``message`` as the current step."""
        if self.enabled:
            self.stream.write(f"\r\033[K[tpu-export validate] {message}")
            self.stream.flush()
            self._shown = True

    def close(self) -> None:
        """End the status line."""
        if self.enabled and self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()


def validate(model: torch.nn.Module | ExportedProgram, sample_args: Any = (), *,
             targets: Sequence[str] = DEFAULT_TARGETS,
             inputs: Sequence | None = None, num_random_inputs: int = 2, seed: int = 0,
             tolerances: dict | None = None, sample_kwargs: dict | None = None, localize: bool = True,
             task: str | dict | None = None, errors: str = "raise", progress: bool | None = None,
             builders: dict[str, Callable] | None = None,
             target_options: dict[str, dict] | None = None, op_profile: bool = True,
             dynamic_shapes: Any = None) -> ParityReport:
    """Run PyTorch and every target on the same inputs and compare every output.

    Args:
        model: the ``nn.Module`` (not modified: buffers a forward mutates are restored), or a
            ``torch.export.ExportedProgram`` (run in PyTorch as ``ep.module()``; its sample inputs default to those
            it was exported with: :mod:`converter.exported`).
        sample_args: sample positional inputs (a tensor or a tuple); also the first input set.
        targets: target names from ``converter.api.TARGETS``.
        inputs: more input sets, each a tuple of positional inputs or ``(args, kwargs)``.
        num_random_inputs: seeded random input sets of the sample's shapes and dtypes
            (integer inputs stay in range: embedding sizes, sample range of token ids).
        seed: seed of the random inputs and of random ops.
        tolerances: overrides ``{torch.dtype: (rtol, atol)}`` of
            ``validators.tolerances.BY_DTYPE``, and ``{"aten.op.overload": (rtol, atol)}``
            for intermediates during localization.
        sample_kwargs: sample keyword inputs.
        localize: find the first diverging op of each failing target (and, when all
            pass, record a per-op error profile).
        task: for low-precision (fp16 / bf16 / int8) artifacts, "classification" or
            "regression" for every output, or a dict by output name ("output_0");
            by default rank-2 outputs are classifiers.
        errors: "raise" (a target that cannot convert or run raises) or "report"
            (it is recorded as status "error" and the report fails).
        progress: show progress on stderr; ``None`` means when stderr is a terminal.
        builders: target name → builder overriding ``converter.api.TARGETS`` (tests).
        target_options: target name → options for its lowering and builder, as
            ``convert(..., **options)`` takes them (e.g. ``{"litert": {"quantize": "int8"}}``).
        op_profile: with ``localize``, record the per-op error profile when every target
            passes (the report's per-op chart); it costs one more compile of the program.
        dynamic_shapes: torch.export ``dynamic_shapes``, as ``convert`` takes them: every target is built
            with those dims dynamic, so ``inputs`` of other sizes check the same artifacts at those sizes.

    Returns:
        The :class:`ParityReport`.

    Raises:
        InputError: an unknown target or bad arguments.
        ConversionError: capture or a target's conversion failed (with ``errors="raise"``).
    """
    if errors not in ("raise", "report"):
        raise InputError(f"errors must be 'raise' or 'report', got {errors!r}")
    builders = {t: _builder(t, builders) for t in targets}
    target_options = dict(target_options or {})
    stray = sorted(set(target_options) - set(targets))
    if stray:
        raise InputError(f"target_options name targets that are not validated: {stray}; targets: {list(targets)}")
    if isinstance(sample_args, torch.Tensor):
        sample_args = (sample_args,)
    sample_args, sample_kwargs = tuple(sample_args), dict(sample_kwargs or {})
    program, name = None, type(model).__name__
    if is_exported(model):  # PyTorch runs it as its module; its sample inputs are its own unless given
        program, name = model, "ExportedProgram"
        sample_args, sample_kwargs = sample_inputs(program, sample_args, sample_kwargs)
        model = program.module()
    # a model on the tpu device (or its inputs) is checked as a CPU copy: PyTorch on the CPU is the reference
    model, sample_args, sample_kwargs = on_the_host(model, sample_args, sample_kwargs)
    inputs = [tree_map(to_host, s) for s in inputs or []]
    tolerances = dict(tolerances or {})
    show = Progress(progress)
    try:
        show("capturing with torch.export")
        ep = capture_program(model if program is None else program, sample_args, sample_kwargs,
                             dynamic_shapes=dynamic_shapes)
        sets = build_input_sets(ep, sample_args, sample_kwargs, inputs=inputs,
                                num_random_inputs=num_random_inputs, seed=seed)
        for s in sets if program is not None else ():
            if s.origin == "given":  # (checked as the sample inputs are: what differs, by name)
                try:
                    sample_inputs(program, s.args, s.kwargs)
                except InputError as e:
                    raise InputError(f"input set {s.index}: {e}") from e
        refs = []
        with _buffers_restored(model):
            for s in sets:
                show(f"pytorch: input {s.index + 1}/{len(sets)}")
                refs.append(_reference(model, s))
        report = ParityReport(model=name, inputs=[_input_info(ep, s) for s in sets],
                              tolerances=_dtype_tolerances(tolerances), environment=_environment())
        outputs: dict[str, list[list[Any]]] = {}
        programs: dict[str, LoweredProgram] = {}
        for target in targets:
            result, got, program = _run_target(target, builders[target], ep, sets, refs, tolerances, task,
                                               errors, show, dict(target_options.get(target) or {}))
            report.targets.append(result)
            if got is not None:
                outputs[target], programs[target] = got, program
        report.cross = _cross(report.targets, outputs, refs, tolerances)
        for result in report.targets:
            if result.status == "fail" and localize:
                show(f"{result.target}: localizing the first diverging op")
                _localize(result, programs[result.target], sets, refs, outputs[result.target], tolerances, seed,
                          builders[result.target])
        if localize and op_profile and programs and all(r.status == "pass" for r in report.targets):
            show("per-op error profile")
            first = next((t for t in targets if t in loc.JAX_TARGETS and t in programs), next(iter(programs)))
            report.op_profile = loc.op_profile(programs[first], sets[0].flat, overrides=tolerances, seed=seed)
    finally:
        show.close()
    return report


def assert_parity(model: torch.nn.Module, sample_args: Any = (), *, targets: Sequence[str] = DEFAULT_TARGETS,
                  **kwargs: Any) -> ParityReport:
    """:func:`validate`, raising when any comparison fails (for pytest).

    Args:
        model: the module.
        sample_args: sample positional inputs.
        targets: target names.
        **kwargs: any other :func:`validate` argument.

    Returns:
        The (passing) report.

    Raises:
        ParityError: with the Markdown summary as its message and the report as
            its ``report`` attribute.
    """
    report = validate(model, sample_args, targets=targets, **kwargs)
    if not report.passed:
        err = ParityError(report.to_markdown())
        err.report = report
        raise err
    return report


def _builder(target: str, builders: dict | None) -> Callable:
    if builders and target in builders:
        return builders[target]
    return target_builder(target)


@contextlib.contextmanager
def _buffers_restored(model: torch.nn.Module) -> Iterator[None]:
    """Validators never change a model: undo buffer updates the forwards make (BN stats, caches).

    Inside, the input sets run one after another like calls to an artifact that
    keeps state (the TPU runtime writes buffer mutations back), so stateful models
    compare call for call.
    """
    saved = {name: b.detach().clone() for name, b in model.named_buffers()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, b in model.named_buffers():
                if name in saved:
                    b.copy_(saved[name])


def _reference(model: torch.nn.Module, s: InputSet) -> list[torch.Tensor]:
    with torch.no_grad():
        out = model(*s.args, **s.kwargs)
    # (a python number a model returns, ``x.item()``, is an output of its exported program too)
    return [x.detach().clone() if isinstance(x, torch.Tensor) else torch.tensor(x)
            for x in torch.utils._pytree.tree_leaves(out) if isinstance(x, (torch.Tensor, bool, int, float))]


def _flat_outputs(out: Any) -> list[Any]:
    return [x for x in torch.utils._pytree.tree_leaves(out) if hasattr(x, "shape")]


def precision_of(artifact: Any, program: LoweredProgram) -> str:
    """The artifact's compute precision: "fp32", "fp16", "bf16" or "int8".

    An artifact may declare it (a ``precision`` attribute, e.g. a quantized LiteRT
    model); otherwise it is the lowest floating dtype of the weights and outputs.
    """
    declared = getattr(artifact, "precision", None)
    if isinstance(declared, str) and declared in LOW_PRECISION + ("fp32",):
        return declared
    names = {np.dtype(v.dtype).name for v in program.state.values()}
    names |= {str(s.dtype).replace("torch.", "") for s in program.outputs}
    for dtype, precision in (("bfloat16", "bf16"), ("float16", "fp16")):
        if dtype in names:
            return precision
    return "fp32"


def _judge(name: str, ref: torch.Tensor, got: Any, precision: str, tolerances: dict,
           task: str | dict | None, scale: float = 1.0) -> OutputError:
    if precision in LOW_PRECISION:
        kind = task.get(name) if isinstance(task, dict) else task
        return task_agreement(name, ref, got, precision, kind)
    rtol, atol = tolerances.get(ref.dtype) or tolerance(ref.dtype)
    return compare(name, ref, got, rtol * scale, atol * scale)


def _run_target(target: str, builder: Callable, ep: Any, sets: list[InputSet], refs: list, tolerances: dict,
                task: Any, errors: str, show: Progress,
                options: dict | None = None) -> tuple[TargetResult, list | None, LoweredProgram | None]:
    start = time.perf_counter()
    try:
        show(f"{target}: converting")
        program = lower(ep, target=target, options=options)
        artifact = builder(program, **(options or {}))
        convert_s = time.perf_counter() - start
        precision = precision_of(artifact, program)
        names = [s.name for s in program.outputs]
        result = TargetResult(target, "pass", precision, convert_s, notes=list(getattr(artifact, "notes", []) or []),
                              artifact=artifact)
        got_all = []
        run_start = time.perf_counter()
        for s, ref in zip(sets, refs):
            show(f"{target}: input {s.index + 1}/{len(sets)}")
            got = _flat_outputs(artifact(*s.flat))
            got_all.append(got)
            if len(got) != len(ref):
                err = OutputError("outputs", (), "-", float("inf"), float("inf"), float("inf"), 0.0, False,
                                  f"{target} returned {len(got)} outputs, PyTorch {len(ref)}")
                result.comparisons.append(Comparison(s.index, "pytorch", target, err))
                continue
            for i, (r, g) in enumerate(zip(ref, got)):
                name = names[i] if i < len(names) else f"output_{i}"
                result.comparisons.append(Comparison(s.index, "pytorch", target,
                                                     _judge(name, r, g, precision, tolerances, task)))
        result.run_seconds = time.perf_counter() - run_start
    except ConversionError as e:
        if errors == "raise":
            raise
        return TargetResult(target, "error", message=f"{type(e).__name__}: {first_line(e)}"), None, None
    result.status = "pass" if all(c.error.passed for c in result.comparisons) else "fail"
    return result, got_all, program


def _cross(results: list[TargetResult], outputs: dict, refs: list, tolerances: dict) -> list[Comparison]:
    """Every pair of targets that ran, every output, every input set (doubled tolerances)."""
    out = []
    precision = {r.target: r.precision for r in results}
    for a, b in itertools.combinations([r.target for r in results if r.target in outputs], 2):
        low = next((precision[t] for t in (a, b) if precision[t] in LOW_PRECISION), "fp32")
        for index, (ga, gb, ref) in enumerate(zip(outputs[a], outputs[b], refs)):
            for i, (x, y, r) in enumerate(zip(ga, gb, ref)):
                x = _as_tensor(x, r.dtype)
                if low == "fp32":
                    rtol, atol = cross_target(*(tolerances.get(r.dtype) or tolerance(r.dtype)))
                    err = compare(f"output_{i}", x, y, rtol, atol)
                else:
                    err = task_agreement(f"output_{i}", x, y, low)
                out.append(Comparison(index, a, b, err))
    return out


def _as_tensor(x: Any, dtype: torch.dtype) -> torch.Tensor:
    """A target's output as a torch tensor of the reference dtype (so its tolerance applies)."""
    if not isinstance(x, torch.Tensor):
        arr = np.asarray(x)
        x = torch.from_numpy(arr.astype(np.float32) if arr.dtype.name == "bfloat16" else arr)
    return x.to(dtype)


def _localize(result: TargetResult, program: LoweredProgram, sets: list[InputSet], refs: list, got: list,
              tolerances: dict, seed: int, builder: Callable) -> None:
    failing = next(c.input_index for c in result.comparisons if not c.error.passed)
    s = sets[failing]
    result.localization = loc.localize(result.target, program, s.flat, input_index=failing, overrides=tolerances,
                                       seed=seed, builder=builder)
    node = None
    if result.localization.node is not None:
        node = loc.producer(loc.find_node(program.exported, result.localization.node))
    header = (f"{result.target}: first divergence at {node.target} (FX node {node.name}) from "
              f"{source_location(node)}" if node is not None else f"{result.target}: divergence not localized")
    result.repro = ReproBundle(
        target=result.target, exported=program.exported, input_names=[sp.name for sp in program.inputs],
        inputs=s.flat, expected=refs[failing], got=got[failing], node=node,
        node_values=loc.torch_intermediates(program.exported, s.flat) if node is not None else {}, header=header)


def _input_info(ep: Any, s: InputSet) -> InputInfo:
    flat = s.flat
    names = tensor_input_names(ep)
    names = (names + [f"input_{i}" for i in range(len(names), len(flat))])[:len(flat)]
    return InputInfo(s.index, s.origin, tuple((n, tuple(t.shape), str(t.dtype).replace("torch.", ""))
                                              for n, t in zip(names, flat)), s.notes)


def _dtype_tolerances(overrides: dict) -> dict:
    table = dict(BY_DTYPE)
    table.update({k: v for k, v in overrides.items() if isinstance(k, torch.dtype)})
    return table


def _environment() -> dict:
    env = {"python": sys.version.split()[0], "torch": torch.__version__}
    for dist in ("jax", "jaxlib", "ai-edge-litert"):
        try:
            env[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            env[dist] = "not installed"
    return env
