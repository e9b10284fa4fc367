"""Byte and I/O helpers shared by the file-backed artifacts (LiteRT, ONNX).

An artifact keeps its model file in ``self._bytes``; :class:`FileBytes` gives it
``to_bytes``/``save``/``size``, :func:`read_model_file` reads one for ``load``, and
:func:`to_numpy` / :func:`from_numpy` convert call arguments and results (torch in →
torch out, NumPy in → NumPy out).
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import numpy as np

from converter.errors import InputError
from exporters.atomic import write_bytes


class FileBytes:
    """Mixin for an artifact whose model file is ``self._bytes``."""

    _bytes: bytes

    def to_bytes(self) -> bytes:
        """The model file's contents."""
        return self._bytes

    def save(self, path: str | os.PathLike) -> str:
        """Write the model atomically (temp file in the same folder, then ``os.replace``)."""
        return str(write_bytes(path, self._bytes))

    @property
    def size(self) -> int:
        """File size in bytes."""
        return len(self._bytes)


def read_model_file(path: str | os.PathLike) -> bytes:
    """The bytes of a model file (raises InputError when it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise InputError(f"cannot read {path}: {e.strerror}") from e


def any_torch(inputs: Sequence[Any]) -> bool:
    """True when any call argument is a torch object (the results are then torch tensors)."""
    return any(is_torch(x) for x in inputs)


def is_torch(x: Any) -> bool:
    """A torch object: a tensor of any device or subclass (a tpu tensor's class is ``tpu_runtime``'s), told
    without importing torch (a reloaded artifact runs without it)."""
    return type(x).__module__.startswith("torch") or (hasattr(x, "detach") and hasattr(x, "requires_grad"))


def to_numpy(x: Any) -> np.ndarray:
    """A call argument (torch tensor, NumPy array or array-like) as a NumPy array (bfloat16/float8 as ml_dtypes
    arrays; read through DLPack, so the caller's tensor stays resizable)."""
    if hasattr(x, "detach"):
        from converter.lowering.dtypes import tensor_to_numpy

        return tensor_to_numpy(x.detach().cpu().contiguous())
    return np.asarray(x)


def from_numpy(outs: Sequence[np.ndarray], as_torch: bool, structure: Any = None) -> Any:
    """Call results: torch tensors when ``as_torch``; in the model's output structure when ``structure`` (a
    :class:`~converter.call_outputs.CallOutputs`) knows it (the model's own types for torch results, plain tuples,
    lists and dicts for NumPy ones), else one output as is and several as a tuple."""
    if as_torch:
        # np.require keeps 0-d outputs 0-d (np.ascontiguousarray makes them shape (1,))
        from converter.lowering.dtypes import numpy_to_tensor

        outs = [numpy_to_tensor(np.require(o, requirements="C")) for o in outs]
    if structure is not None:
        return structure.build(outs, live=as_torch)
    return outs[0] if len(outs) == 1 else tuple(outs)
