"""Rule tables of the LiteRT exporter, one module per op family.

:data:`RULES` maps a jaxpr primitive *object* to ``rule(em, eqn, *vals)``;
:data:`COMPOSITES` maps a composite name (``"aten.gelu"``) to
``rule(em, eqn, attrs, *vals)``, which may return ``None`` to decline (the
composite is then lowered through its decomposition). Rules return one
:class:`~exporters.litert.emitter.Val` or a list of them. Registering a key twice
is a hard error at import time.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable


class Unsupported(Exception):
    """Raised by a rule for an eqn it cannot express in TFLite (becomes UnsupportedOpError)."""


class RegistrationError(RuntimeError):
    """A rule was registered twice."""


RULES: dict[Any, Callable] = {}
COMPOSITES: dict[str, Callable] = {}


def rule(*prims: Any) -> Callable:
    """Register a rule for each primitive object in ``prims``."""

    def decorate(fn: Callable) -> Callable:
        for p in prims:
            if p in RULES:
                raise RegistrationError(f"{p} already has the LiteRT rule {RULES[p].__module__}.{RULES[p].__name__}")
            RULES[p] = fn
        return fn

    return decorate


def composite(*names: str) -> Callable:
    """Register a rule for each composite name in ``names``."""

    def decorate(fn: Callable) -> Callable:
        for n in names:
            if n in COMPOSITES:
                raise RegistrationError(f"composite {n} already has a LiteRT rule")
            COMPOSITES[n] = fn
        return fn

    return decorate


def out_aval(eqn: Any, i: int = 0) -> Any:
    """The abstract value (shape, dtype) of an eqn's output ``i``."""
    return eqn.outvars[i].aval


for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")
