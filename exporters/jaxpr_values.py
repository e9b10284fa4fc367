"""The value base class of the exporters' jaxpr walker (:mod:`exporters.jaxpr_walk`) and its dim helpers."""

from __future__ import annotations

from typing import Any

import numpy as np


def is_static(d: Any) -> bool:
    """True for a concrete dim."""
    return isinstance(d, (int, np.integer))


def same_dim(a: Any, b: Any) -> bool:
    """Whether two dims (concrete or ``jax.export`` symbolic) are provably equal."""
    try:
        return bool(a == b)
    except Exception:  # inconclusive symbolic comparison
        return False


def nonnegative(d: Any) -> bool:
    """Whether a dim (concrete or a ``jax.export`` dim expression: a ``mod`` is, a difference may not be) is
    provably at least 0."""
    try:
        return bool(d >= 0)
    except Exception:  # inconclusive symbolic comparison
        return False


class JaxprValue:
    """Base of the exporters' value classes: one jaxpr value, a constant or a tensor.

    A subclass sets ``shape`` (logical, ``jax.export`` symbolic dims allowed),
    ``dtype`` (the jaxpr dtype), ``const`` (a NumPy array for a constant, else
    ``None``) and ``base`` (the stored shape: 1 where a broadcast is still pending).
    """

    __slots__ = ()
    shape: tuple
    dtype: np.dtype
    const: np.ndarray | None
    base: tuple

    @property
    def rank(self) -> int:
        """Logical rank."""
        return len(self.shape)

    @property
    def is_const(self) -> bool:
        """True for a constant."""
        return self.const is not None

    @property
    def static(self) -> bool:
        """True when every logical dim is concrete."""
        return all(is_static(d) for d in self.shape)

    @property
    def pending(self) -> bool:
        """True when a broadcast is not materialized."""
        return self.base != self.shape

    def full(self) -> np.ndarray:
        """The constant at its logical shape (a broadcast view, no copy)."""
        return np.broadcast_to(self.const, self.shape)

    def scalar(self) -> Any:
        """The constant's single value when every element is equal, else ``None``."""
        if self.const is None or self.const.size == 0:
            return None
        flat = self.const.reshape(-1)
        return flat[0].item() if np.all(flat == flat[0]) else None
