"""Lowering families, one module per op family (each under ~500 lines).

Every module in this package is imported here, in name order, and registers its
lowerings into :mod:`converter.lowering.registry` on import.
"""

import importlib
import pkgutil

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    importlib.import_module(f"{__name__}.{_info.name}")
