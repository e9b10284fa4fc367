"""Arguments whose values PyTorch's CPU kernels refuse: the CPU's error instead of a silently wrong result.

The checks of :mod:`tpu_runtime.bounds` for arguments that are not indices, run by the same machinery (a
tensor's values are checked with the op: at the next sync point, or at once on the host and in debug mode; a
python number is checked at once):

* probabilities and rates: ``multinomial`` (no ``inf``/``nan``/negative element, each row summing above 0),
  ``bernoulli`` (``p`` in [0, 1]), ``binary_cross_entropy`` (input and target in [0, 1]), ``poisson``
  (a non-negative rate), ``normal`` (a non-negative ``std``); XLA sampled or computed anyway;
* integer division by zero (``//``, ``%``, ``fmod``, ``div(rounding_mode=...)``): the CPU raises
  ``ZeroDivisionError``, XLA gave -1 or the dividend;
* a random op's python parameters that its decomposition does not check (``bernoulli_(p)``, ``uniform_(from,
  to)``, ``random_(from, to)``, ``geometric_(p)``, ``log_normal_``/``cauchy_``'s scale): the CPU's message.

A check function returns the checks of a call (see :data:`tpu_runtime.bounds.Check`); an exception among them (a
python argument the CPU refuses) is raised at once.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

aten = torch.ops.aten

def _fixed(message: str) -> Callable[[Any, Any], str]:
    return lambda v, i: message


_BERNOULLI = _fixed("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this error message be "
                    "improved?  If so, please report an enhancement request to PyTorch.)")
_ZERO = _fixed("ZeroDivisionError")
_INF = float("inf")


def _multinomial(a: dict) -> list:
    """``multinomial``: no ``inf``, ``nan`` or negative probability, each row's sum above 0."""
    p = a["self"]
    if not p.is_floating_point():
        return []
    return [(p, 0.0, torch.finfo(p.dtype).max, RuntimeError,
             _fixed("probability tensor contains either `inf`, `nan` or element < 0"), None, None, True),
            (p, 1, 2, RuntimeError, _fixed("invalid multinomial distribution (sum of probabilities <= 0)"), None,
             "positive rows", True)]


def _probabilities(name: str) -> Callable[[dict], list]:
    """``bernoulli``'s probabilities (argument ``name``) in [0, 1]; a python float ``p`` at once."""
    def checks(a: dict) -> list:
        p = a[name]
        if not isinstance(p, torch.Tensor):
            return _bernoulli_float(a)
        return [(p, 0.0, 1.0, RuntimeError, _BERNOULLI, None, None, True)] if p.is_floating_point() else []
    return checks


def _bernoulli_float(a: dict) -> list:
    p = a["p"]
    return [] if 0 <= p <= 1 else [RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={p:g}")]


def _bce(a: dict) -> list:
    return [(a[name], 0.0, 1.0, RuntimeError, _fixed(f"all elements of {word} should be between 0 and 1"), None,
             None, True) for name, word in (("self", "input"), ("target", "target"))]


def _poisson(a: dict) -> list:
    return [(a["self"], 0.0, _INF, RuntimeError, _fixed("invalid Poisson rate, expected rate to be non-negative"),
             None, None, True)]


def _normal_std(a: dict) -> list:
    std = a["std"]
    if not isinstance(std, torch.Tensor) or not std.is_floating_point():
        return []
    return [(std, 0.0, _INF, RuntimeError, _fixed("normal expects all elements of std >= 0.0"), None, None, True)]


def _integral(x: Any) -> bool:
    if isinstance(x, torch.Tensor):
        return not x.is_floating_point() and not x.is_complex()
    return isinstance(x, int)  # (a bool too)


def _division(a: dict) -> list:
    """Integer ``self // other`` (``%``, ``fmod``, ``div`` with a rounding mode): no zero divisor."""
    x, other = a["self"], a["other"]
    if "rounding_mode" in a and a["rounding_mode"] is None:  # (true division: a float result)
        return []
    if not (_integral(x) and _integral(other)):
        return []
    if not isinstance(other, torch.Tensor):
        return [RuntimeError("ZeroDivisionError")] if other == 0 else []
    return [(other, 0, 1, RuntimeError, _ZERO, None, "zeros")]


def _uniform(a: dict) -> list:
    low, high = a.get("from", 0.0), a.get("to", 1.0)
    if low <= high:
        return []
    return [RuntimeError(f"uniform_ expects to return a [from, to) range, but found from={low:g} > to={high:g}")]


def _random(a: dict) -> list:
    """``random_(from, to)``/``random_(to)``: a non-empty range."""
    low, high = a.get("from", 0), a.get("to")
    if high is None or low < high:
        return []
    return [RuntimeError(f"random_ expects 'from' to be less than 'to', but got from={low} >= to={high}")]


def _geometric(a: dict) -> list:
    """``geometric_(p)``: ``p`` in (0, 1)."""
    p = a.get("p")
    return [] if 0 < p < 1 else [RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={p:g}")]


def _positive(op: str, name: str, default: float) -> Callable[[dict], list]:
    def checks(a: dict) -> list:
        v = a.get(name, default)
        return [] if v > 0 else [RuntimeError(f"{op} expects {name} > 0.0, but found {name}={v:g}")]
    return checks


_DIVISIONS = [aten.floor_divide.default, aten.floor_divide.Scalar, aten.floor_divide_.Tensor, aten.floor_divide_.Scalar,
              aten.remainder.Tensor, aten.remainder.Scalar, aten.remainder.Scalar_Tensor, aten.remainder_.Tensor,
              aten.remainder_.Scalar, aten.fmod.Tensor, aten.fmod.Scalar, aten.fmod_.Tensor, aten.fmod_.Scalar,
              aten.div.Tensor_mode, aten.div_.Tensor_mode, aten.div.Scalar_mode, aten.div_.Scalar_mode]

#: op → the checks of its arguments (see :data:`tpu_runtime.bounds.CHECKS`).
VALUE_CHECKS: dict[Any, Callable[[dict], list]] = {
    aten.multinomial.default: _multinomial,
    aten.bernoulli.default: _probabilities("self"),
    aten.bernoulli.p: _bernoulli_float,
    aten.bernoulli_.float: _bernoulli_float,
    aten.bernoulli_.Tensor: _probabilities("p"),
    aten.binary_cross_entropy.default: _bce,
    aten.poisson.default: _poisson,
    aten.normal.Tensor_Tensor: _normal_std,
    aten.normal.float_Tensor: _normal_std,
    aten.uniform_.default: _uniform,
    aten.uniform.default: _uniform,  # (the functional twins: what a torch.compile graph holds)
    getattr(aten.random_, "from"): _random,
    aten.random_.to: _random,
    getattr(aten.random, "from"): _random,
    aten.random.to: _random,
    aten.geometric_.default: _geometric,
    aten.geometric.default: _geometric,
    aten.log_normal_.default: _positive("log_normal_", "std", 2.0),
    aten.cauchy_.default: _positive("cauchy_", "sigma", 1.0),
    **{op: _division for op in _DIVISIONS},
}

__all__ = ["VALUE_CHECKS"]
