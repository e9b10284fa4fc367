"""tpu-export's converter: capture, shared passes, the ATen→JAX lowering table, convert() and the CLI."""

from converter.api import convert
from converter.capture import capture
from converter.errors import (CaptureError, ConversionError, ExportError, InputError, LoweringError, ParityError,
                              UnsupportedOpError)

__all__ = ["convert", "capture", "ConversionError", "CaptureError", "InputError", "UnsupportedOpError",
           "LoweringError", "ExportError", "ParityError"]
