"""Walk a ClosedJaxpr and emit TFLite operators through the rule tables.

The walk itself (call-like inlining, composites with decomposition fallback,
constant folding, rule lookup, errors naming the ATen op and source line) is
:class:`exporters.jaxpr_walk.JaxprTranslator`; this module binds it to the LiteRT
rule tables (:data:`rules.RULES`, :data:`rules.COMPOSITES`: GELU, SOFTMAX,
FULLY_CONNECTED, …), the :class:`~exporters.litert.emitter.Emitter` and LiteRT's
constant folding (:mod:`exporters.fold`: NumPy for the common primitives), so e.g. a weight
transpose of ``LoweredProgram.closed()`` costs nothing at run time.

Empty values: TFLite kernels (and the XNNPACK delegate) refuse many zero-size
operands, so no kernel runs on one. A result whose shape is statically empty is a
constant of that shape, and a reduction, contraction or convolution of an empty
operand into a non-empty result is its constant value (the reduction's identity,
zeros for a matmul over a zero-length dim), evaluated at export time.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from jax._src.lax import lax as lax_internal

from converter.lowering.dtypes import TORCH_TO_JAX
from exporters.jaxpr_walk import JaxprTranslator, is_static
from exporters.litert import rules
from exporters.litert.builder import TFLITE_TYPES
from exporters.litert.emitter import Val, tfl_dtype
from exporters.litert.loops import translate_while

#: Names of the dtypes a TFLite model has no tensor type for (bfloat16, float8, complex, uint16).
NO_TYPES = frozenset(np.dtype(d).name for d in TORCH_TO_JAX.values() if tfl_dtype(d) not in TFLITE_TYPES)

#: Primitives whose result, when an operand is empty and the result is not, depends on the shapes only.
EMPTY_OPERAND_CONSTANT = frozenset({
    "reduce_sum", "reduce_prod", "reduce_max", "reduce_min", "reduce_and", "reduce_or", "reduce_xor", "reduce",
    "dot_general", "conv_general_dilated"})


def _static_size(aval: Any) -> int | None:
    """The element count of an abstract value with a static shape, else ``None``."""
    shape = getattr(aval, "shape", None)
    if shape is None or not all(is_static(d) for d in shape):
        return None
    return int(np.prod(shape, dtype=np.int64))


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

    def eqn(self, eqn: Any, ins: list) -> list:
        """Translate one eqn; statically empty results and empty-operand reductions become
        constants (see the module docstring), everything else goes to the shared walker."""
        sizes = [_static_size(v.aval) for v in eqn.outvars]
        if sizes and all(n == 0 for n in sizes):
            return [self.const(np.zeros(v.aval.shape, v.aval.dtype)) for v in eqn.outvars]
        empty_in = any(v.static and 0 in v.shape for v in ins)
        if not empty_in or any(n is None for n in sizes):
            return super().eqn(eqn, ins)
        if eqn.primitive is lax_internal.composite_p:  # its rule would run a kernel on the empty operand
            body = eqn.params["jaxpr"]
            with self._inside(eqn.params["name"], eqn):
                return self.eval_jaxpr(body.jaxpr, body.consts, ins)
        if eqn.primitive.name in EMPTY_OPERAND_CONSTANT and all(v.static for v in ins):
            return self.fold(eqn, [self.const(np.zeros(v.shape, v.dtype)) for v in ins])
        return super().eqn(eqn, ins)
