"""Parity checks between PyTorch and every target.

``validate(model, args, targets=...)`` runs PyTorch (the reference) and every
target on the same inputs, compares every output, localizes the first op that
diverges and returns a :class:`ParityReport` (JSON / Markdown / HTML, repro
folders). ``assert_parity`` raises :class:`ParityError` for pytest.
"""

from converter.errors import ParityError
from validators.parity import DEFAULT_TARGETS, assert_parity, validate
from validators.report import ParityReport

__all__ = ["DEFAULT_TARGETS", "ParityError", "ParityReport", "assert_parity", "validate"]
