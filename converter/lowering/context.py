"""The small typed context every lowering receives (litert-torch style)."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import jax
import zlib

import torch

from converter.errors import InputError, SourceLocation, source_location
from converter.lowering.dtypes import to_jax_dtype


#: The conversion options the lowering reads (``ctx.options``): ``composites`` (emit high-level ops as
#: ``jax.lax.composite``, default on) and ``kernels`` (``"pallas"`` / ``"reference"``: force a kernel body).
LOWERING_OPTIONS = frozenset({"composites", "kernels"})


def check_options(what: str, options: Any, known: Any) -> None:
    """Refuse a conversion option neither ``what``'s builder (``known``) nor the lowering reads: a misspelt one
    (``quantise="int8"``) was taken and ignored, and the artifact built without it.

    Raises:
        InputError: naming the unknown options and the ones ``what`` takes.
    """
    unknown = sorted(set(options) - set(known) - LOWERING_OPTIONS)
    if unknown:
        raise InputError(f"unknown {what} option(s) {unknown}; known: {sorted(set(known) | LOWERING_OPTIONS)}")


@dataclass
class LoweringContext:
    """What a lowering may know besides its arguments.

    Attributes:
        node: the FX node being lowered (``None`` in eager dispatch).
        target: "tpu", "stablehlo", "litert", "onnx", …
        options: conversion options (e.g. ``composites``, ``kernels``).
        rng: a JAX PRNG key for random ops, or ``None`` (then seeded from 0).
        meta: the node's output FakeTensor(s), when known without a node.
        checks: the error checks of effectful ops (``with_effects``) and ``_assert_async`` met so far, as
            ``(info, op, args, kwargs)``: a caller that can raise after running the program
            (``torch.compile``'s backend) makes the ``info`` values outputs and checks them.
        observers: FX node → ``observe(args, kwargs, ctx)``, called with the node's argument values before
            it is lowered (``torch.compile``'s backend adds the index checks of indexing ops to ``checks``).
        symbols: sympy symbol → its value in this run (a python int, or a ``jax.export`` dim), for the
            symbolic dims of the graph's inputs (:meth:`bind`): what a recorded SymInt (a stride, an
            offset) is evaluated with.
        where: the user's source location when there is no node (eager dispatch: the line that ran the op).
    """

    node: Any = None
    target: str = "tpu"
    options: dict = field(default_factory=dict)
    rng: Any = None
    meta: Any = None
    checks: list = field(default_factory=list)
    observers: dict = field(default_factory=dict)
    symbols: dict = field(default_factory=dict)
    where: SourceLocation | None = None
    _rng_count: int = 0

    def bind(self, meta: Any, value: Any) -> None:
        """Note the values of the symbols in a graph input's recorded ``meta`` (see :func:`symbols_of`)."""
        for sym, v in symbols_of(meta, value).items():
            self.symbols.setdefault(sym, v)

    def fork(self, **changes: Any) -> "LoweringContext":
        """A copy for lowering a sub-graph (a control-flow body): same target, options and key."""
        return replace(self, node=None, meta=None, **changes)

    @property
    def out_meta(self) -> Any:
        """The op's output value as torch.export recorded it (FakeTensor, tuple, SymInt)."""
        if self.meta is not None:
            return self.meta
        return None if self.node is None else self.node.meta.get("val")

    def _first_tensor(self) -> Any:
        val = self.out_meta
        if isinstance(val, (list, tuple)):
            val = next((v for v in val if isinstance(v, torch.Tensor)), None)
        return val if isinstance(val, torch.Tensor) else None

    @property
    def out_dtype(self) -> Any:
        """JAX dtype of the (first) output, or ``None`` when unknown."""
        t = self._first_tensor()
        return None if t is None else to_jax_dtype(t.dtype)

    @property
    def out_shape(self) -> tuple | None:
        """Shape of the (first) output with SymInts left as they are, or ``None``."""
        t = self._first_tensor()
        return None if t is None else tuple(t.shape)

    @property
    def location(self) -> SourceLocation:
        """The user's source location of the node (without one: :attr:`where`, when given)."""
        if self.node is None and self.where is not None:
            return self.where
        return source_location(self.node)

    def next_key(self) -> Any:
        """A fresh PRNG key for one random op (deterministic per node and call)."""
        base = self.rng if self.rng is not None else jax.random.key(0)
        self._rng_count += 1
        salt = zlib.crc32(self.node.name.encode()) % (2**31) if self.node is not None else 0
        return jax.random.fold_in(jax.random.fold_in(base, salt), self._rng_count)


def symbols_of(meta: Any, value: Any) -> dict:
    """sympy symbol → value, for the symbols of ``meta`` (a SymInt, or a tensor's dims that are ``s`` or
    ``s + c``) read off ``value`` (an int, or an array's shape)."""
    if isinstance(meta, torch.SymInt):
        pairs = [(meta, value)]
    elif isinstance(meta, torch.Tensor) and hasattr(value, "shape"):
        pairs = list(zip(meta.shape, value.shape))
    else:
        return {}
    found = {}
    for m, v in pairs:
        if not isinstance(m, torch.SymInt):
            continue
        expr = m.node.expr
        if expr.is_Symbol:
            found.setdefault(expr, v)
        elif expr.is_Add and len(expr.free_symbols) == 1:
            sym = next(iter(expr.free_symbols))
            if (expr - sym).is_Integer:
                found.setdefault(sym, v - int(expr - sym))
    return found
