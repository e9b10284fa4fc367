"""One error hierarchy for every stage of tpu-export (STYLE.md #6).

Every message names what failed and where: the ATen overload, the target, the
FX node, the module path and the user's ``file:line`` taken from
``node.meta["stack_trace"]``.
"""

from __future__ import annotations

import os
import re
import sys
import sysconfig
import traceback
from dataclasses import dataclass
from typing import Any, Iterator

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')
_INTERNAL = ("/torch/", "/site-packages/", "/converter/", "/tpu_runtime/", "<frozen", "<eval_with_key>")  # the last: FX code


@dataclass(frozen=True)
class SourceLocation:
    """Where in user code an FX node came from."""

    file: str | None = None
    line: int | None = None
    function: str | None = None
    module_path: str | None = None
    module_type: str | None = None

    def __str__(self) -> str:
        parts = []
        if self.file:
            parts.append(f"{self.file}:{self.line}" + (f" in {self.function}" if self.function else ""))
        if self.module_path:
            parts.append(f"module {self.module_path}" + (f" ({self.module_type})" if self.module_type else ""))
        return ", ".join(parts) or "unknown location"


def source_location(node: Any) -> SourceLocation:
    """Return the user's source location of an FX node (best effort, never raises).

    Args:
        node: a ``torch.fx.Node`` (or anything with a ``meta`` dict).

    Returns:
        The innermost frame outside torch and tpu-export, plus the module path
        from ``nn_module_stack``.
    """
    meta = getattr(node, "meta", None) or {}
    chosen = stack_location(meta.get("stack_trace") or "")
    module_path = module_type = None
    stack = meta.get("nn_module_stack") or {}
    if stack:
        path, mtype = list(stack.values())[-1]
        module_path = path.replace("L['self']", "").lstrip(".") or "<root>"
        module_type = getattr(mtype, "__name__", None) or str(mtype).rsplit(".", 1)[-1].strip("'>")
    return SourceLocation(chosen.file, chosen.line, chosen.function, module_path, module_type)


def stack_location(stack_trace: str) -> SourceLocation:
    """The innermost frame outside torch and tpu-export of a formatted Python stack (``traceback`` text: an FX
    node's ``stack_trace``, the forward stack anomaly detection keeps on an autograd node); the innermost frame
    when all are internal; an empty location without frames."""
    frames = _FRAME.findall(stack_trace)
    user = [f for f in frames if not any(s in f[0] for s in _INTERNAL)]
    chosen = (user or frames or [None])[-1]
    return SourceLocation() if chosen is None else SourceLocation(chosen[0], int(chosen[1]), chosen[2])


def caller_location(internal_files: tuple | None = None) -> SourceLocation:
    """The innermost frame of the running Python stack outside torch and tpu-export (eager ops: the
    user's line that issued the op, or the ``backward()`` call a gradient op came from); with
    ``internal_files``, outside the files whose paths contain one of those strings instead."""
    frame = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if internal_files is not None:
            internal = any(s in code.co_filename for s in internal_files)
        else:
            internal = _INTERNAL_FILE.get(code.co_filename)
            if internal is None:
                if len(_INTERNAL_FILE) > 65536:
                    _INTERNAL_FILE.clear()
                internal = _INTERNAL_FILE[code.co_filename] = any(s in code.co_filename for s in _INTERNAL)
        if not internal:
            return SourceLocation(code.co_filename, frame.f_lineno, code.co_name)
        frame = frame.f_back
    return SourceLocation()


#: Python's own library: no user's line (inspect.py binding a call's arguments to ``forward``).
_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep


def traceback_location(exc: BaseException) -> SourceLocation | None:
    """The innermost frame of ``exc``'s traceback (and of the exceptions it was raised from) outside torch and
    tpu-export: the user's line that raised it inside a traced ``forward``; ``None`` when every frame is internal."""
    for raised in exception_chain(exc):
        frames = [f for f in traceback.extract_tb(raised.__traceback__)
                  if not any(s in f.filename for s in _INTERNAL) and f.filename != "<string>"  # (torch's exec'd code)
                  and not f.filename.startswith(_STDLIB)]  # (inspect's binding of the model's arguments)
        if frames:
            return SourceLocation(frames[-1].filename, frames[-1].lineno, frames[-1].name)
    return None


def first_line(exc: BaseException) -> str:
    """``exc``'s message in one line (its first), or its type's name when it has none."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def exception_chain(exc: BaseException | None) -> Iterator[BaseException]:
    """``exc``, then the exceptions it was raised from (``__cause__``, else ``__context__``), each once."""
    seen: set = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


#: file name → whether it is internal (torch, tpu-export…): eager ops look up the user's frame per checked op, so
#: each file's answer is worked out once. Keyed by the name, not the code object: a key would keep the code alive,
#: and dynamo removes a compiled frame's globals (its compiled graphs, their executables) only once its transformed
#: code is freed (a code object may also be unhashable: a slice among its constants).
_INTERNAL_FILE: dict = {}


class ConversionError(Exception):
    """Base class of every error tpu-export raises on purpose."""


class InputError(ConversionError):
    """Bad user input: a missing file, a factory that raises, wrong shapes, a bad option."""


class CaptureError(ConversionError):
    """torch.export could not capture the model."""


class UnsupportedOpError(ConversionError):
    """An ATen op has no lowering for the requested target.

    Attributes:
        op: the ATen overload (``OpOverload``) or its name.
        target: the target that was asked for.
        location: the user's source location.
    """

    def __init__(self, op: Any, target: str, location: SourceLocation | None = None,
                 nearest: list[str] | None = None, reason: str | None = None, hint: bool = True):
        self.op, self.target, self.location = op, target, location or SourceLocation()
        msg = f"unsupported op {op} for target '{target}' at {self.location}"
        if reason:
            msg += f": {reason}"
        if nearest:
            msg += f" (supported overloads nearby: {', '.join(nearest)})"
        msg += "."
        if hint:
            msg += " Add a lowering with @lowering(...) in converter/lowering/ops/ to support it."
        super().__init__(msg)


class LoweringError(ConversionError, RuntimeError):
    """A lowering exists but failed on this node (also a ``RuntimeError``: what torch raises for a call its
    kernel refuses, so ``except RuntimeError`` written for the CPU catches it on the tpu device too)."""

    def __init__(self, op: Any, location: SourceLocation | None, detail: str):
        self.op, self.location = op, location or SourceLocation()
        super().__init__(f"lowering {op} failed at {self.location}: {detail}")


class ExportError(ConversionError):
    """A target exporter could not write or load an artifact."""


class ParityError(ConversionError):
    """A target's outputs disagree with PyTorch beyond tolerance."""
