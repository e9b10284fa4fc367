"""Parity reports: the data (:class:`ParityReport`) and its JSON, Markdown and HTML forms."""

from validators.report.data import (SCHEMA_VERSION, Comparison, InputInfo, Localization, NodeError, ParityReport,
                                    TargetResult)

__all__ = ["SCHEMA_VERSION", "Comparison", "InputInfo", "Localization", "NodeError", "ParityReport", "TargetResult"]
