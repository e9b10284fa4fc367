"""The ATen → JAX lowering table and the interpreter that applies it."""

from converter.lowering.context import LOWERING_OPTIONS, LoweringContext, check_options
from converter.lowering.interpreter import LoweredProgram, TensorSpec, lower
from converter.lowering.registry import lookup, lowering, override, registered

__all__ = ["LOWERING_OPTIONS", "LoweringContext", "check_options", "LoweredProgram", "TensorSpec", "lower", "lookup",
           "lowering", "override", "registered"]
