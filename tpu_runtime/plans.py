"""Per-call plans: one ATen call → a pure JAX function, keyed for the compile cache.

An :class:`OpPlan` is what every eager mode executes: strict and debug jit it
alone, fused inlines it into the recorded graph. Its key is the op overload, the
shapes/dtypes of the tensor inputs and every static argument (ints, dtypes, python
floats…), so the same call signature always finds the same plan and executable.

Python floats of a few arithmetic ops (``add``/``sub``/``mul``/``div``: the
``value=``/``alpha=`` and scalar operands optimizers change every step) are inputs
rather than key parts, so an AdamW step does not recompile as its bias correction
moves. Everything else is static, as the lowerings expect.

The output's dtype and shape come from running the op on ``meta`` tensors once
per plan; the lowering's result is cast to that dtype (``conform``), exactly as
the compiled path does with the FakeTensor torch.export recorded.
"""

from __future__ import annotations

import itertools
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import torch

from converter.errors import ConversionError, LoweringError, caller_location
from converter.lowering import registry
from converter.lowering.context import LoweringContext
from converter.lowering.interpreter import conform
from tpu_runtime.tensor import DEVICE, TpuTensor

aten = torch.ops.aten
_META = torch.device("meta")
_F = "<float>"  # key marker of a python float passed as an input

#: Ops whose python-float arguments are passed as (weakly typed) inputs, not baked in.
DYNAMIC_FLOAT_OPS = frozenset({
    aten.add.Tensor, aten.add.Scalar, aten.sub.Tensor, aten.sub.Scalar,
    aten.mul.Tensor, aten.mul.Scalar, aten.div.Tensor, aten.div.Scalar,
})


_UIDS = itertools.count()


class ShapeInferenceError(LoweringError):
    """The op's output cannot be inferred on meta tensors (e.g. a data-dependent shape)."""


class _Slot:
    """Placeholder for input ``i`` in an argument template."""

    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


@dataclass(eq=False)
class OpPlan:
    """One cached call signature (see the module docstring).

    Attributes:
        key: the cache key.
        name: what error messages and debug reports call it (the op overload).
        fn: ``fn(*inputs[, rng]) -> tuple`` of the tensor outputs, conformed.
        out_specs: ``(shape, dtype)`` of each tensor output.
        structure: the op's result with ``_Slot(i)`` where output ``i`` goes.
        random: the op draws random numbers (takes a ``[seed, counter]`` input).
        raw: for view ops, ``fn`` without the dtype cast (replays on index arrays).
        view: the op returns views of its tensor input.
    """

    key: tuple
    name: str
    fn: Callable
    out_specs: tuple
    structure: Any
    random: bool = False
    raw: Callable | None = None
    view: bool = False
    op: Any = None
    extra: dict = field(default_factory=dict)
    exe: Any = None  # the compiled executable, once strict/debug mode has run the plan
    flops: Any = None  # estimated multiply-adds of one call, once fused eager has traced ``fn`` (eager/work.py)
    uid: int = field(default_factory=lambda: next(_UIDS))  # a cheap stand-in for ``key`` in graph keys


#: Ops that accept CPU index tensors next to device tensors (as torch does for CUDA).
INDEXING_OPS = frozenset({aten.index.Tensor, aten.index_put.default, aten._index_put_impl_.default})
_INDEXING = [False]


def flatten(func: Any, args: tuple, kwargs: dict, dyn: bool | None = None, indexing: bool | None = None,
            tag: Any = None) -> tuple[tuple, list]:
    """The cache key of a call and its inputs (tpu tensors, CPU tensors, dynamic floats).

    ``dyn`` and ``indexing`` default to ``func``'s membership in :data:`DYNAMIC_FLOAT_OPS`
    and :data:`INDEXING_OPS`; ``tag`` (default ``func``) is the key's first element: the
    dispatcher passes a small int per op, whose hash is cheaper than an op overload's.

    Raises:
        RuntimeError: a CPU tensor with dimensions is mixed in (0-d CPU tensors are
            scalars, and CPU index tensors are accepted by indexing ops, as in torch).
    """
    ins: list = []
    if dyn is None:
        dyn = func in DYNAMIC_FLOAT_OPS
    _INDEXING[0] = func in INDEXING_OPS if indexing is None else indexing
    key = [func if tag is None else tag]
    if _default_dtype() is not _FLOAT32:  # it decides the result dtype of int / float promotion (``i / 2``)
        key.append(("default dtype", _default_dtype()))
    for a in args:
        if type(a) is TpuTensor:  # the common case, inlined
            ins.append(a)
            key.append(a._spec)
        else:
            key.append(_key(a, ins, dyn))
    if kwargs:
        for k, v in kwargs.items():
            key.append(k)
            key.append(_key(v, ins, dyn))
    return tuple(key), ins


_default_dtype = torch.get_default_dtype
_FLOAT32 = torch.float32

_SPEC = operator.attrgetter("_spec")

#: Element types of an argument list that is its own key part (shapes, dims).
_PLAIN = frozenset({int, type(None), str})


def _key(a: Any, ins: list, dyn: bool) -> Any:
    t = type(a)
    if t is int:  # the common cases first: dims, sizes, then shape lists
        return a
    if t is list or t is tuple:
        types = set(map(type, a))
        if _PLAIN.issuperset(types):
            return tuple(a)
        if len(types) == 1 and TpuTensor in types:  # a foreach op's tensor list
            ins.extend(a)
            return tuple(map(_SPEC, a))
        return tuple(_key(x, ins, dyn) for x in a)
    if t is float:
        if dyn:
            ins.append(a)
            return _F
        return ("f", a) if a == a else ("nan",)
    if t is bool:
        return ("b", a)
    if isinstance(a, TpuTensor):
        ins.append(a)
        return a._spec
    if isinstance(a, torch.Tensor):
        if a.dim() != 0 and not _INDEXING[0]:
            if a.device.type == "tpu":  # not a TpuTensor: torch built it itself (``csr.to("tpu")``)
                raise RuntimeError(f"a {a.layout} tensor on the tpu device (shape {list(a.shape)}) has no layout "
                                   "there: keep it on the CPU, or move x.to_dense() instead")
            raise RuntimeError(f"Expected all tensors to be on the same device, but found a {a.device} tensor of "
                               f"shape {list(a.shape)} mixed with tpu tensors; move it with .to('tpu') first")
        ins.append(a)
        return ("cpu", tuple(a.shape), a.dtype)
    return a


def _template(args: Any, counter: list) -> Any:
    if isinstance(args, torch.Tensor):
        counter[0] += 1
        return _Slot(counter[0] - 1)
    t = type(args)
    if t is float and counter[1]:
        counter[0] += 1
        return _Slot(counter[0] - 1)
    if t is list or t is tuple:
        return t(_template(x, counter) for x in args)
    if t is dict:
        return {k: _template(v, counter) for k, v in args.items()}
    if isinstance(args, torch.device) and args.type == "tpu":
        return _META
    return args


def _fill(tmpl: Any, values: list) -> Any:
    if type(tmpl) is _Slot:
        return values[tmpl.i]
    t = type(tmpl)
    if t is list or t is tuple:
        return t(_fill(x, values) for x in tmpl)
    if t is dict:
        return {k: _fill(v, values) for k, v in tmpl.items()}
    return tmpl


def _meta_of(x: Any) -> Any:
    if isinstance(x, torch.Tensor):
        return torch.empty(tuple(x.shape), dtype=x.dtype, device=_META)
    return x


#: Output shape functions for runtime-kernel ops that have no meta kernel in torch.
META_FUNCTIONS: dict[Any, Callable] = {}


def out_meta(func: Any, args: tuple, kwargs: dict, dyn: bool | None = None) -> Any:
    """Run ``func`` on meta tensors shaped like ``args``: the output's shapes and dtypes.

    Returns ``(output, args template, kwargs template)``.
    """
    targs, tkwargs, ins = _templates(func, args, kwargs, dyn)
    metas = [_meta_of(x) for x in ins]
    fn = META_FUNCTIONS.get(func, func)
    return fn(*_fill(targs, metas), **_fill(tkwargs, metas)), targs, tkwargs


def _templates(func: Any, args: tuple, kwargs: dict, dyn: bool | None) -> tuple:
    """``(args template, kwargs template, inputs)``: a call's arguments with a slot for each tensor (and
    dynamic float), and what fills the slots."""
    counter = [0, func in DYNAMIC_FLOAT_OPS if dyn is None else dyn]
    targs, tkwargs = _template(tuple(args), counter), _template(dict(kwargs), counter)
    ins: list = []
    _collect(args, ins, counter[1])
    _collect(tuple(kwargs.values()), ins, counter[1])
    return targs, tkwargs, ins


def _collect(args: Any, ins: list, dyn: bool) -> None:
    for a in args:
        if isinstance(a, torch.Tensor) or (dyn and type(a) is float):
            ins.append(a)
        elif type(a) in (list, tuple):
            _collect(a, ins, dyn)


def build_plan(func: Any, key: tuple, args: tuple, kwargs: dict, kernel: Callable | None = None, row: Any = None,
               dyn: bool | None = None) -> OpPlan:
    """Make the plan of one call: its lowering-table ``row``, or a runtime ``kernel``.

    Raises:
        ShapeInferenceError: the op's output shape cannot be inferred on meta tensors.
    """
    from tpu_runtime.cpu_refusals import (CPU_CHECKED, _refuse_dtypes, raise_as_on_cpu,  # (they use this module)
                                          raise_cpu_refusal)

    try:
        meta, targs, tkwargs = out_meta(func, args, kwargs, dyn)
    except ConversionError:
        raise
    except Exception as e:
        _refuse_dtypes(func, args, kwargs, dyn)
        raise_as_on_cpu(func, args, kwargs, dyn, e)
        raise_cpu_refusal(func, args, kwargs, dyn, dtype_only=True)
        raise ShapeInferenceError(func, caller_location(),
                                  f"its output shape cannot be inferred without running it ({type(e).__name__}: "
                                  f"{e}); tpu_runtime.set_cpu_fallback(True) runs such ops on CPU") from e
    random = torch.Tag.nondeterministic_seeded in func.tags
    _refuse_dtypes(func, args, kwargs, dyn)
    if func in CPU_CHECKED and CPU_CHECKED[func](args, kwargs):
        raise_as_on_cpu(func, args, kwargs, dyn, None)
    specs: list = []
    structure = _structure(meta, specs)
    # Lowerings see device=None: JAX has one device and "meta" must not leak into them.
    tkwargs = {k: (None if isinstance(v, torch.device) else v) for k, v in tkwargs.items()}
    name = str(func)
    where = caller_location()  # the user's line that first ran this signature (errors surface at trace time)

    def call(values: tuple, rng: Any, cast: bool) -> tuple:
        ctx = LoweringContext(target="tpu", meta=meta, rng=rng, where=where)
        a, kw = _fill(targs, list(values)), _fill(tkwargs, list(values))
        try:
            res = registry.apply(row, ctx, a, kw) if row is not None else kernel(ctx, *a, **kw)
        except ConversionError:
            raise
        except Exception as e:
            shapes = ", ".join(f"{v.dtype}{list(v.shape)}" for v in values if hasattr(v, "shape"))
            raise LoweringError(func, where, f"{type(e).__name__}: {e} (inputs: {shapes})") from e
        if cast:
            res = conform(res, meta, _OpNode(func))
        return tuple(_tensor_leaves(res, meta))

    if random:
        def fn(*values: Any) -> tuple:
            seed = values[-1]
            key = jax.random.fold_in(jax.random.key(seed[0]), seed[1])
            return call(values[:-1], key, True)
    else:
        def fn(*values: Any) -> tuple:
            return call(values, None, True)

    view = bool(func.is_view) if hasattr(func, "is_view") else False
    raw = (lambda *values: call(values, None, False)) if view else None
    return OpPlan(key, name, fn, tuple(specs), structure, random, raw, view, func,
                  {"targs": targs, "tkwargs": tkwargs})


class _OpNode:
    """Stands in for an FX node in lowering errors raised outside a graph: names the op."""

    meta: dict = {}

    def __init__(self, op: Any):
        self.target = op


def _structure(meta: Any, specs: list) -> Any:
    if isinstance(meta, torch.Tensor):
        specs.append((tuple(meta.shape), meta.dtype))
        return _Slot(len(specs) - 1)
    if isinstance(meta, (list, tuple)):
        return type(meta)(_structure(m, specs) for m in meta)
    return meta


def _tensor_leaves(res: Any, meta: Any) -> list:
    if isinstance(meta, torch.Tensor):
        return [res]
    if isinstance(meta, (list, tuple)):
        out = []
        for r, m in zip(res, meta):
            out.extend(_tensor_leaves(r, m))
        return out
    return []


def rebuild(plan: OpPlan, tensors: list) -> Any:
    """The op's result: ``plan.structure`` with its slots filled by ``tensors``."""
    s = plan.structure
    if type(s) is _Slot:
        return tensors[s.i]
    flat = plan.extra.get("flat")
    if flat is None:  # (once per plan: a plain tuple or list of the outputs in order, as most multi-output ops return)
        flat = plan.extra["flat"] = type(s) in (tuple, list) and len(s) == len(tensors) and all(
            type(x) is _Slot and x.i == k for k, x in enumerate(s))
    if flat:
        return tuple(tensors) if type(s) is tuple else list(tensors)
    return _fill(s, tensors)


def custom_plan(key: tuple, name: str, fn: Callable, out_specs: tuple) -> OpPlan:
    """A plan for runtime-internal work (view replay/scatter, zeros, uploads' casts)."""
    structure = _Slot(0) if len(out_specs) == 1 else tuple(_Slot(i) for i in range(len(out_specs)))
    return OpPlan(key, name, fn, tuple(out_specs), structure)


__all__ = ["OpPlan", "ShapeInferenceError", "build_plan", "custom_plan", "flatten", "rebuild", "out_meta",
           "DYNAMIC_FLOAT_OPS", "DEVICE"]
