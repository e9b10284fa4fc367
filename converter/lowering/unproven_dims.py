"""Dynamic dims torch takes for equal and jax cannot prove equal: operands to broadcast, conditions to assert.

torch.export broadcasts two symbolic sizes it cannot tell apart by taking them for equal (the program is only valid
where they are); ``jax.export`` refuses the same broadcast unless it can prove them equal. MPT's ALiBi bias is the case
met: ``bias[:, :, max(0, 64 - k):]`` has ``64 - max(63 - s, 0)`` columns, added to scores of ``k = s + 1`` columns —
equal for every cache shorter than the table, which jax's shape arithmetic cannot show without that bound.

:func:`coerced` gives such an operand the size torch recorded for the op's output: it reads the operand's first
``size`` entries along that axis (a gather of ``iota(size)``, clamped), which is the operand itself wherever torch's
program is valid. It applies only where the lowering failed on the broadcast, and only to dims torch's output
records and jax can express (a polynomial of the symbols bound by the program's inputs).

torch records the same assumption as a runtime assertion on the dims (``Eq(s + Max(0, 16 - s), 16)``: the cache is
shorter than the table): :func:`dims_equal` tells such a condition jax cannot decide (:data:`UNDECIDED`) from one it
proves false, and the assertion (its value not a false bool) lowers to nothing, as one on traced values does
(torch.export checked it on the sample inputs; an exported file cannot raise).
"""

from __future__ import annotations

import operator
from typing import Any

import jax
import jax.numpy as jnp
import torch


def coerced(args: list, meta: Any, symbols: dict) -> list | None:
    """``args`` with each array's dims that broadcast against ``meta``'s (torch's output) but that jax cannot prove
    equal to them read at torch's size; ``None`` when nothing changes (or a dim cannot be expressed)."""
    from converter.lowering.ops.symbolic import dim_value

    if not isinstance(meta, torch.Tensor):
        return None
    out = [dim_value(d, symbols) for d in meta.shape]
    if any(d is None for d in out):
        return None
    changed, result = False, []
    for a in args:
        if isinstance(a, jax.Array) or hasattr(a, "aval"):
            offset = len(out) - a.ndim
            for axis, size in enumerate(a.shape):
                want = out[offset + axis] if offset + axis >= 0 else None
                if want is None or (type(size) is int and (size == 1 or type(want) is int)) \
                        or _provably_equal(size, want):
                    continue  # (two static sizes that differ are a real mismatch: not hidden here)
                index = jax.lax.iota(jnp.int32, want)
                a = jnp.take(a, index, axis=axis, mode="clip")
                changed = True
        result.append(a)
    return result if changed else None


class _Undecided:
    """A comparison of dynamic dims that holds for some of their values and not for others."""

    def __bool__(self) -> bool:
        raise TypeError("a condition on dynamic dims that the exported program cannot decide is used as a value")

    def __repr__(self) -> str:
        return "UNDECIDED"


#: What :func:`dims_equal` gives for a comparison jax can neither prove nor refute.
UNDECIDED = _Undecided()


def dims_equal(a: Any, b: Any) -> Any:
    """``a == b`` of sizes (ints or jax dim expressions): True, False, or :data:`UNDECIDED` (jax's ``==`` says False
    for a pair it cannot prove equal)."""
    diff = a - b
    if isinstance(diff, int):
        return diff == 0
    try:
        if diff >= 1 or diff <= -1:
            return False
    except Exception:  # jax's InconclusiveDimensionOperation
        pass
    try:
        if diff >= 0 and diff <= 0:
            return True
    except Exception:
        pass
    return UNDECIDED


def dims_differ(a: Any, b: Any) -> Any:
    """``a != b`` of sizes, as :func:`dims_equal`."""
    same = dims_equal(a, b)
    return same if same is UNDECIDED else not same


def logic(target: Any, args: tuple) -> Any:
    """``target`` (``sym_not``, ``and``, ``or``) on conditions some of which are :data:`UNDECIDED`, three-valued:
    ``not`` of one is one; ``and`` with a false one is False, ``or`` with a true one True, else :data:`UNDECIDED`.
    ``None`` for any other op (which then refuses the condition by name, when it asks for its truth)."""
    if target in (torch.sym_not, operator.not_):
        return UNDECIDED
    known = [a for a in args if a is not UNDECIDED]
    if target is operator.and_:
        return False if any(not a for a in known) else UNDECIDED
    if target is operator.or_:
        return True if any(known) else UNDECIDED
    return None


def _provably_equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:  # jax's InconclusiveDimensionOperation
        return False


__all__ = ["UNDECIDED", "coerced", "dims_differ", "dims_equal", "logic"]
