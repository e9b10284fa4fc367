"""Running one table op (or runtime kernel) call: the per-op hot path of every eager mode.

:func:`run_op` finds the call's :class:`~tpu_runtime.plans.OpPlan` (built once per call
signature), gathers its inputs (tensor values, CPU tensors as NumPy, dynamic python
floats) and hands them to the current eager mode's executor, then wraps the outputs
in new tpu tensors (or returns views sharing the input's storage for view ops).
:func:`_run` is the same for the dispatcher's cached ``op`` routes, with the steps
inlined: it runs for almost every ATen call, so each python call saved there is
saved per op.
"""

from __future__ import annotations

from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

from converter.errors import LoweringError
from converter.lowering import registry
from converter.lowering.dtypes import scalar_type_name
from tpu_runtime import rng
from tpu_runtime.cache import CACHE
from tpu_runtime.eager import _CURRENT as _MODE
from tpu_runtime.eager import executor
from tpu_runtime.eager.lazy import LazyRef
from tpu_runtime.memory_format import laid_out
from tpu_runtime.cpu_refusals import raise_cpu_refusal
from tpu_runtime.plans import OpPlan, _Slot, build_plan, flatten, rebuild
from tpu_runtime.tensor import TpuTensor, wrap
from tpu_runtime.values import convert_plan, host_operand, make_view, read, write

#: Plan key → plan (``None``: a decomposition that cannot be traced into one plan).
_PLANS: dict[tuple, OpPlan | None] = {}
CACHE.on_clear(_PLANS.clear)
_ARRAY = type(jnp.zeros(()))  # jaxlib's ArrayImpl: a concrete value, read without a call


def run_op(func: Any, args: tuple, kwargs: dict, kernel: Callable | None = None, dyn: bool | None = None) -> Any:
    """Run one op through its plan with the current eager mode; wrap the outputs.

    ``kernel`` is a runtime kernel; ``None`` means the op's row of the lowering table.
    """
    key, ins = flatten(func, args, kwargs, dyn)
    plan = _PLANS.get(key)
    if plan is None:
        row = registry.lookup(func) if kernel is None else None
        plan = _PLANS[key] = build_plan(func, key, args, kwargs, kernel, row=row, dyn=dyn)
    if plan.view and len(ins) == 1:
        src = ins[0]
        return rebuild(plan, [make_view(src, plan, i, spec) for i, spec in enumerate(plan.out_specs)])
    return _execute(plan, ins)


#: What :func:`_run` returns when it cannot write into ``into`` (a view op, several outputs).
NOT_IN_PLACE = object()


def _routed_plan(func: Any, args: tuple, kwargs: dict, route: tuple) -> tuple[OpPlan, list]:
    """The plan of a call of an ``op`` route (built on first use) and the call's inputs."""
    key, ins = flatten(func, args, kwargs, route[2], route[3], route[4])
    plan = _PLANS.get(key)
    if plan is None:
        kernel = route[1]
        row = registry.lookup(func) if kernel is None else None
        plan = _PLANS[key] = build_plan(func, key, args, kwargs, kernel, row=row, dyn=route[2])
    return plan, ins


def _run(func: Any, args: tuple, kwargs: dict, route: tuple, into: TpuTensor | None = None) -> Any:
    """:func:`run_op` for an ``op`` route (its kernel, flags and key tag precomputed): the
    per-op hot path, with :func:`_execute` inlined.

    With ``into`` (the target of an in-place op whose functional twin ``func`` is), the
    single output is written into it (:func:`assign_value`) without a wrapper tensor in
    between, and ``into`` is returned; :data:`NOT_IN_PLACE` when ``func`` is a view op
    or has several outputs (nothing ran).
    """
    plan, ins = _routed_plan(func, args, kwargs, route)
    if into is not None and (plan.view or type(plan.structure) is not _Slot):
        return NOT_IN_PLACE
    if plan.view and len(ins) == 1:
        src = ins[0]
        return rebuild(plan, [make_view(src, plan, i, spec) for i, spec in enumerate(plan.out_specs)])
    try:
        if into is not None and hasattr(_MODE[0], "run_into"):  # strict: ``into``'s old buffer may take the result
            res = _MODE[0].run_into(plan, _values(plan, ins), (into,))
        else:
            res = _MODE[0].run(plan, _values(plan, ins))
    except LoweringError:  # (its first run: the CPU's refusal of the call, if it refuses it, says it as torch does)
        raise_cpu_refusal(func, args, kwargs, route[2])
        raise
    specs = plan.out_specs
    if into is not None:
        if specs[0][1] != into._spec[1]:
            check_cast(specs[0][1], into._spec[1], func, args, kwargs)
        assign_value(into, res[0], specs[0])
        return into
    for x in ins:
        if type(x) is TpuTensor and (x._strides is not None or x._opaque):  # (a view, or a laid-out tensor)
            return laid_out(plan, ins, res)
    if len(specs) == 1 and type(plan.structure) is _Slot:
        return wrap(res[0], specs[0])
    return rebuild(plan, [wrap(v, spec) for v, spec in zip(res, specs)])


def run_writing(func: Any, args: tuple, kwargs: dict, route: tuple, targets: list) -> bool:
    """Run ``func`` (an ``op`` route) and write each output into the tensor it replaces, through the
    mode's ``run_into`` (strict: dead buffers are donated); ``targets[k]`` is the tensor, or list of
    tensors, that the op's ``k``-th result replaces (``None``: written nowhere). ``False`` when the
    op's results do not line up with ``targets`` (nothing ran)."""
    plan, ins = _routed_plan(func, args, kwargs, route)
    structure = plan.structure
    if plan.view or type(structure) not in (list, tuple) or len(structure) < len(targets):
        return False
    dsts: list = [None] * len(plan.out_specs)
    for sub, target in zip(structure, targets):
        if target is None:
            continue
        pairs = zip(sub, target) if type(sub) in (list, tuple) and type(target) in (list, tuple) \
            and len(sub) == len(target) else ((sub, target),)
        for slot, t in pairs:
            if type(slot) is not _Slot or type(t) is not TpuTensor:
                return False
            dsts[slot.i] = t
    write_outputs(plan, ins, dsts)
    return True


def write_outputs(plan: OpPlan, ins: list, dsts: Any) -> None:
    """Run ``plan`` on the call's inputs ``ins`` and write its ``i``-th output into the tpu tensor ``dsts[i]``
    (``None``: written nowhere) with no wrapper tensor in between: fused eager records the op and makes each output
    the pending value of its base tensor in one loop (``record_writes``; an optimizer's foreach and fused steps
    write every parameter and moment this way), strict eager may run it into the buffers it replaces
    (``run_into``); otherwise each output is assigned as an in-place op's is (:func:`assign_value`)."""
    mode = _MODE[0]
    record_writes = getattr(mode, "record_writes", None)
    if record_writes is not None and _plain_targets(dsts, plan.out_specs):
        record_writes(plan, _values(plan, ins), dsts)
        return
    run_into = getattr(mode, "run_into", None)
    values = _values(plan, ins)
    results = mode.run(plan, values) if run_into is None else run_into(plan, values, dsts)
    del values
    for dst, value, spec in zip(dsts, results, plan.out_specs):
        if dst is not None:
            assign_value(dst, value, spec)


def _plain_targets(dsts: Any, specs: tuple) -> bool:
    """Whether each of ``dsts`` is ``None`` or a base tpu tensor (no view chain) of its output's spec."""
    for d, spec in zip(dsts, specs):
        if d is not None and (type(d) is not TpuTensor or d._chain or d._spec != spec):
            return False
    return True


def check_cast(result: torch.dtype, out: torch.dtype, func: Any = None, args: tuple = (),
               kwargs: dict | None = None) -> None:
    """Refuse an in-place op whose result type ``result`` torch would not cast into ``self``'s ``out``
    (``int_tensor += 1.5``, ``bool_tensor += 1``): the CPU raises rather than truncate. With ``func`` (the
    functional twin, called on ``args``/``kwargs``): a real result into a complex tensor is also refused where the
    CPU refuses the in-place op (``abs_``: "In-place abs is not supported for complex tensors."; ``eq_`` it runs).

    Raises:
        RuntimeError: torch's message.
    """
    if not torch.can_cast(result, out):
        raise RuntimeError(f"result type {scalar_type_name(result)} can't be cast to the desired output type "
                           f"{scalar_type_name(out)}")
    if func is not None and out.is_complex and not result.is_complex and (func, result, out) not in _INTO_COMPLEX:
        twin = getattr(torch.ops.aten, func._schema.name.split("::")[-1] + "_", None)
        twin = getattr(twin, func._overloadname, None) if twin is not None else None
        if twin is not None:
            raise_cpu_refusal(twin, args, kwargs or {}, None)
        _INTO_COMPLEX.add((func, result, out))


#: ``(functional op, result dtype, complex dtype)`` whose in-place op the CPU runs (see :func:`check_cast`).
_INTO_COMPLEX: set = set()


def assign_value(dst: TpuTensor, value: Any, spec: tuple) -> None:
    """Write ``value`` (of ``spec``: shape, dtype) into ``dst``, casting its dtype as in-place ops do.

    Raises:
        RuntimeError: the shapes differ (as torch's in-place ops refuse a broadcast result).
    """
    if spec[0] != dst._spec[0]:
        raise RuntimeError(f"output with shape {list(dst._spec[0])} doesn't match the broadcast shape "
                           f"{list(spec[0])}")
    if spec[1] != dst._spec[1]:
        value = executor().run(convert_plan(spec, dst._spec), [value])[0]
    write(dst, value)


def _values(plan: OpPlan, ins: list) -> list:
    """The executor's inputs for ``ins``: tensor values, CPU tensors as NumPy, dynamic floats."""
    values = []
    for x in ins:
        if type(x) is TpuTensor and not x._chain:  # the common case, inlined: a base tensor's value
            v = x._storage.value
            if type(v) is _ARRAY or (type(v) is LazyRef and v.concrete is None):  # concrete, or pending in fused
                values.append(v)
            else:
                values.append(read(x))
        elif isinstance(x, TpuTensor):
            values.append(read(x))
        elif isinstance(x, torch.Tensor):
            values.append(host_operand(x))
        elif _MODE[0].raw_floats:  # a dynamic python float, kept as one: fused eager makes it a graph input
            values.append(x)
        else:  # a dynamic python float, as a device scalar
            values.append(_scalar(x))
    if plan.random:
        values.append(rng.next_input())
    return values


def _execute(plan: OpPlan, ins: list) -> Any:
    """Run ``plan`` on the call's inputs with the current eager mode; wrap the outputs."""
    res = executor().run(plan, _values(plan, ins))
    specs = plan.out_specs
    if len(specs) == 1 and type(plan.structure) is _Slot:
        return wrap(res[0], specs[0])
    return rebuild(plan, [wrap(v, spec) for v, spec in zip(res, specs)])


def execute_following(plan: OpPlan, ins: list) -> Any:
    """:func:`_execute` for a whole op (a traced decomposition, a foreach op): with a view or laid-out input, its
    outputs are laid out as torch lays them out (:func:`~tpu_runtime.memory_format.laid_out`)."""
    for x in ins:
        if type(x) is TpuTensor and (x._strides is not None or x._opaque):
            return laid_out(plan, ins, executor().run(plan, _values(plan, ins)))
    return _execute(plan, ins)


_SCALARS: dict[float, Any] = {}


def _scalar(x: float) -> Any:
    """A dynamic python float as a weakly typed device scalar, cached (a python float
    argument would be transferred to the device on every call, and would make jit
    compile the executable a second time: it keys python floats apart from arrays)."""
    v = _SCALARS.get(x)
    if v is None or not x:  # 0.0 and -0.0 are equal keys: zeros are made each time, with their sign
        if len(_SCALARS) > 4096:
            _SCALARS.clear()
        v = _SCALARS[x] = _device_scalar(x)
    return v


#: A python float → a weakly typed device scalar, as ``jnp.asarray`` makes it, through
#: jit's C++ call path (about twice as cheap as ``jnp.asarray``'s python one).
_device_scalar = jax.jit(lambda x: x)


__all__ = ["run_op", "assign_value", "NOT_IN_PLACE"]
