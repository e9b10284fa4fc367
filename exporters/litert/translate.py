"""Walk a ClosedJaxpr and emit TFLite operators through the rule tables.

The walk itself (call-like inlining, composites with decomposition fallback,
constant folding, rule lookup, errors naming the ATen op and source line) is
:class:`exporters.jaxpr_walk.JaxprTranslator`; this module binds it to the LiteRT
rule tables (:data:`rules.RULES`, :data:`rules.COMPOSITES`: GELU, SOFTMAX,
FULLY_CONNECTED, …), the :class:`~exporters.litert.emitter.Emitter` and LiteRT's
constant folding (:mod:`.fold`: NumPy for the common primitives), so e.g. a weight
transpose of ``LoweredProgram.closed()`` costs nothing at run time.
"""

from __future__ import annotations

from typing import Any

from converter.lowering.dtypes import FLOAT8
from exporters.jaxpr_walk import JaxprTranslator
from exporters.litert import rules
from exporters.litert.emitter import Val
from exporters.litert.fold import fold


class Translator(JaxprTranslator):
    """Translates jaxprs into the emitter's graph.

    Args:
        em: the emitter.
        locate: optional ``eqn -> (ATen op name, SourceLocation) | None`` that maps an
            eqn back to the FX node it was lowered from (see ``jaxpr_trace.fx_locator``).
    """

    TARGET = "LiteRT"
    KEY = "litert"
    VAL = Val
    RULES = rules.RULES
    COMPOSITES = rules.COMPOSITES
    #: Broadcasting a scalar to a large shape at export time would bloat the file.
    NO_FOLD = frozenset({"broadcast_in_dim", "iota", "dim_as_value"})
    NO_DTYPES = frozenset(str(d).removeprefix("torch.") for d in FLOAT8)

    def fold(self, eqn: Any, ins: list[Val]) -> list[Val]:
        """Evaluate an eqn on constant inputs now (:func:`exporters.litert.fold.fold`)."""
        return fold(eqn, ins)
