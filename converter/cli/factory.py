"""Load a model factory named ``path/to/file.py:function`` or ``package.module:function``, or an exported program
saved with ``torch.export.save`` (``model.pt2``)."""

from __future__ import annotations

import importlib
import importlib.util
import logging
import re
import sys
from pathlib import Path
from typing import Any

import torch
from torch.export import ExportedProgram

from converter.errors import InputError, first_line


def load_factory(spec: str) -> tuple[torch.nn.Module | ExportedProgram, tuple, dict]:
    """Import the factory, call it and normalize what it returns; or load the exported program ``spec`` names.

    The factory returns ``(model, args)`` or ``(model, args, kwargs)``; ``args`` may
    be a single tensor; ``model`` may be a ``torch.export.ExportedProgram``. A ``.pt2`` file is read with
    ``torch.export.load`` and converts with the sample inputs it was exported with (``args`` and ``kwargs`` empty).
    A factory may also return a dict ``{signature name: (model, args[, kwargs])}`` (a LiteRT file's signatures:
    ``prefill`` and ``decode``): ``model`` is then that dict, each entry normalized, and ``args`` / ``kwargs`` empty.

    Raises:
        InputError: bad spec, missing file or function, the factory raised, or it
            returned something else; a ``.pt2`` file torch cannot load.
    """
    if spec.endswith(".pt2") and ":" not in Path(spec).name:
        return _load_program(spec), (), {}
    if ":" not in spec:
        raise InputError(f"factory '{spec}' must look like path/to/file.py:function or package.module:function")
    where, name = spec.rsplit(":", 1)
    if where.endswith(".py") or "/" in where:
        path = Path(where)
        if not path.is_file():
            raise InputError(f"factory file not found: {where}")
        mod_name = f"_tpu_export_factory_{path.stem}"
        loader = importlib.util.spec_from_file_location(mod_name, path)
        module = importlib.util.module_from_spec(loader)
        sys.modules[mod_name] = module
        try:
            loader.loader.exec_module(module)
        except Exception as e:  # user code: report it on one line
            raise InputError(f"importing {where} failed: {type(e).__name__}: {e}") from e
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as e:
            raise InputError(f"cannot import module '{where}': {e}") from e
    fn = getattr(module, name, None)
    if not callable(fn):
        raise InputError(f"'{name}' is not a function in {where}")
    try:
        result = fn()
    except Exception as e:  # user code: report it on one line
        raise InputError(f"factory {spec} raised {type(e).__name__}: {e}") from e
    if isinstance(result, dict) and result and all(isinstance(k, str) and k for k in result):
        return {k: _normalized(v, f"{spec}[{k!r}]") for k, v in result.items()}, (), {}
    return _normalized(result, spec)


def _normalized(result: Any, what: str) -> tuple:
    """A factory's ``(model, args[, kwargs])`` as ``(model, args tuple, kwargs dict)``."""
    if not isinstance(result, tuple) or len(result) not in (2, 3) or \
            not isinstance(result[0], (torch.nn.Module, ExportedProgram)):
        raise InputError(f"factory {what} must return (model, args) or (model, args, kwargs), or a dict of them by "
                         "signature name")
    model, args = result[0], result[1]
    kwargs = result[2] if len(result) == 3 else {}
    if isinstance(args, torch.Tensor):
        args = (args,)
    return model, tuple(args), dict(kwargs or {})


def _load_program(path: str) -> ExportedProgram:
    """The program ``torch.export.save`` wrote to ``path``.

    Raises:
        InputError: no such file, or torch cannot load it (not a saved program; a pytree type in its inputs or
            outputs, such as a transformers cache, that no imported module has registered).
    """
    if not Path(path).is_file():
        raise InputError(f"exported program not found: {path}")
    logger, caught = logging.getLogger("torch.export"), _Caught()
    # (torch logs the loader's error as a warning with its traceback, then raises a generic one: keep the first)
    before = logger.handlers[:], logger.propagate
    logger.handlers[:] = [caught]
    logger.propagate = False
    try:
        return torch.export.load(path)
    except Exception as e:  # torch raises many types for a bad archive; keep its message, one line
        cause = caught.error or e
        first = first_line(cause)
        hint = (" (import and register that type before loading the program: a factory returning "
                "(torch.export.load(path), ()) can)") if "is not registered" in first else ""
        raise InputError(f"cannot load {path} with torch.export.load: {type(cause).__name__}: {first}{hint}") from e
    finally:
        logger.handlers[:], logger.propagate = before


class _Caught(logging.Handler):
    """Keeps the exception of the first log record that carries one."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.error: BaseException | None = None

    def emit(self, record: logging.LogRecord) -> None:
        if self.error is None and record.exc_info and record.exc_info[1] is not None:
            self.error = record.exc_info[1]


def parse_dynamic(text: str | None, args: tuple, kwargs: dict | None = None) -> Any:
    """``"0:0=batch:1..64,1:1"`` → torch.export ``dynamic_shapes`` for ``args`` and then ``kwargs`` (input ``I``
    counts the positional inputs first, then the keyword ones in the factory's order).

    Each item is ``INPUT:DIM`` with an optional ``=NAME`` (equal names share a dim) and an optional range of
    sizes ``:MIN..MAX`` (either end may be left out), which the artifact then checks its inputs against. The name
    may be a derived dim, ``=K*NAME`` or ``=K*NAME+C`` (an even size: ``0:2=2*h:2..256``; torch.export's
    ``2 * Dim("h") + 1``), whose range is ``NAME``'s (given on any one item of that name).

    Raises:
        InputError: an item of another form, an input the model does not have, or one name given two ranges.
    """
    if not text:
        return None
    n = len(args) + len(kwargs or {})
    spec: list[dict | None] = [None] * n
    ranges: dict[str, tuple] = {}
    items = []
    for item in text.split(","):
        try:
            where, _, name = item.partition("=")
            parts = where.split(":")
            if name:
                name, _, span = name.partition(":")
            else:
                parts, span = parts[:2], ":".join(parts[2:])
            i, d = (int(v) for v in parts)
            bounds = _span(span)
            scale, name, offset = _derived(name) if name else (1, f"dim_{i}_{d}", 0)
        except ValueError:
            raise InputError(f"--dynamic item '{item}' must be INPUT:DIM[=[K*]NAME[+C]][:MIN..MAX]") from None
        if not 0 <= i < n:
            raise InputError(f"--dynamic names input {i}, the model has {n} inputs")
        if bounds != (None, None) and ranges.setdefault(name, bounds) != bounds:
            raise InputError(f"--dynamic gives dim '{name}' two ranges")
        items.append((i, d, scale, name, offset))
    dims: dict[str, Any] = {}
    for i, d, scale, name, offset in items:
        if name not in dims:
            lo, hi = ranges.get(name, (None, None))
            dims[name] = torch.export.Dim(name, **({} if lo is None else {"min": lo}),
                                          **({} if hi is None else {"max": hi}))
        dim = dims[name] if scale == 1 else scale * dims[name]
        spec[i] = {**(spec[i] or {}), d: dim if not offset else dim + offset}
    return tuple(spec)


_DERIVED = re.compile(r"(?:(\d+)\*)?([A-Za-z_]\w*)(?:\+(\d+))?")


def _derived(text: str) -> tuple[int, str, int]:
    """``"2*h+1"`` → ``(2, "h", 1)``; ``"h"`` → ``(1, "h", 0)``.

    Raises:
        ValueError: any other text.
    """
    found = _DERIVED.fullmatch(text.replace(" ", ""))
    if found is None or (found.group(1) is not None and int(found.group(1)) < 1):
        raise ValueError(text)
    return int(found.group(1) or 1), found.group(2), int(found.group(3) or 0)


def _span(text: str) -> tuple[int | None, int | None]:
    """``"MIN..MAX"`` (either end optional) → ``(min, max)``; ``""`` → no bounds.

    Raises:
        ValueError: any other text.
    """
    if not text:
        return None, None
    lo, sep, hi = text.partition("..")
    if not sep:
        raise ValueError(text)
    return (int(lo) if lo else None), (int(hi) if hi else None)
