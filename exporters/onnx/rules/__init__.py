"""Rule tables of the ONNX exporter, one module per op family.

:data:`RULES` maps a jaxpr primitive *object* to ``rule(g, eqn, *vals)``;
:data:`COMPOSITES` maps a composite name (``"aten.gelu"``) to
``rule(g, eqn, attrs, *vals)``, which may return ``None`` to decline (the
composite is then lowered through its decomposition). Rules return one
:class:`~exporters.onnx.graph.Val` or a list of them. Registering a key twice is
a hard error at import time (see :mod:`exporters.rule_table`).
"""

from __future__ import annotations

from exporters.rule_table import RegistrationError, RuleTable, Unsupported, out_aval

_TABLE = RuleTable("ONNX")
RULES, COMPOSITES, rule, composite = _TABLE.rules, _TABLE.composites, _TABLE.rule, _TABLE.composite
__all__ = ["COMPOSITES", "RULES", "RegistrationError", "Unsupported", "composite", "out_aval", "rule"]
_TABLE.import_modules(__name__, __path__)
