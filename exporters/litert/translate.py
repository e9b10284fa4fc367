"""Walk a ClosedJaxpr and emit TFLite operators through the rule tables.

The walk itself (call-like inlining, composites with decomposition fallback,
constant folding, rule lookup, errors naming the ATen op and source line) is
:class:`exporters.jaxpr_walk.JaxprTranslator`; this module binds it to the LiteRT
rule tables (:data:`rules.RULES`, :data:`rules.COMPOSITES`: GELU, SOFTMAX,
FULLY_CONNECTED, …), the :class:`~exporters.litert.emitter.Emitter` and LiteRT's
constant folding (:mod:`exporters.fold`: NumPy for the common primitives), so e.g. a weight
transpose of ``LoweredProgram.closed()`` costs nothing at run time.

Empty values are constants (see :mod:`exporters.jaxpr_walk`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from converter.lowering.dtypes import TORCH_TO_JAX
from exporters.jaxpr_walk import JaxprTranslator
from exporters.litert import rules
from exporters.litert.builder import TFLITE_TYPES
from exporters.litert.emitter import Val, tfl_dtype
from exporters.litert.loops import translate_while

#: Names of the dtypes a TFLite model has no tensor type for (bfloat16, float8, complex, uint16).
NO_TYPES = frozenset(np.dtype(d).name for d in TORCH_TO_JAX.values() if tfl_dtype(d) not in TFLITE_TYPES)


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
    NO_DTYPES = NO_TYPES
    LOOPS = True

    def while_loop(self, eqn: Any, ins: list) -> list:
        """A ``while`` as one ``WHILE`` op (:mod:`exporters.litert.loops`)."""
        return translate_while(self, eqn, ins)
