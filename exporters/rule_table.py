"""Rule tables shared by the jaxpr exporters (LiteRT, ONNX).

Each exporter's ``rules`` package owns one :class:`RuleTable`: ``rules`` maps a
jaxpr primitive *object* to ``rule(em, eqn, *vals)`` and ``composites`` maps a
composite name (``"aten.gelu"``) to ``rule(em, eqn, attrs, *vals)``, which may
return ``None`` to decline. Registering a key twice is a hard error at import time.
"""

from __future__ import annotations

import importlib
import pkgutil
from typing import Any, Callable, Iterable


class Unsupported(Exception):
    """Raised by a rule for an eqn it cannot express in the target format (becomes UnsupportedOpError)."""


class RegistrationError(RuntimeError):
    """A rule was registered twice."""


class RuleTable:
    """The primitive and composite rules of one exporter.

    Args:
        target: the target's display name used in registration errors ("LiteRT", "ONNX").
    """

    def __init__(self, target: str):
        self.target = target
        self.rules: dict[Any, Callable] = {}
        self.composites: dict[str, Callable] = {}

    def rule(self, *prims: Any) -> Callable:
        """Decorator: register a rule for each primitive object in ``prims``."""

        def decorate(fn: Callable) -> Callable:
            for p in prims:
                if p in self.rules:
                    old = self.rules[p]
                    raise RegistrationError(f"{p} already has the {self.target} rule {old.__module__}.{old.__name__}")
                self.rules[p] = fn
            return fn

        return decorate

    def composite(self, *names: str) -> Callable:
        """Decorator: register a rule for each composite name in ``names``."""
        article = "an" if self.target[:1].upper() in "AEIOU" else "a"

        def decorate(fn: Callable) -> Callable:
            for n in names:
                if n in self.composites:
                    raise RegistrationError(f"composite {n} already has {article} {self.target} rule")
                self.composites[n] = fn
            return fn

        return decorate

    def import_modules(self, package: str, path: Iterable[str]) -> None:
        """Import every module of the rules package ``package`` (they register on import), by name order."""
        for info in sorted(pkgutil.iter_modules(path), key=lambda m: m.name):
            importlib.import_module(f"{package}.{info.name}")


def out_aval(eqn: Any, i: int = 0) -> Any:
    """The abstract value (shape, dtype) of an eqn's output ``i``."""
    return eqn.outvars[i].aval
