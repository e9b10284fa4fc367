"""A small in-memory TFLite graph: what the jaxpr walker emits and the passes rewrite.

Tensors and operators are plain Python objects until :mod:`.builder` serializes
them, so passes (fusion, dead-code elimination, layout clean-up) stay simple and
the output is deterministic (everything is ordered lists, nothing keyed on ``id``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(eq=False)
class Tensor:
    """One TFLite tensor.

    Attributes:
        shape: the static shape (the sample size for a dynamic dim).
        signature: the shape signature (``-1`` for a dynamic dim).
        dtype: NumPy dtype of the elements.
        name: tensor name in the flatbuffer.
        data: the constant's value, or ``None`` for an activation.
        quant: quantization parameters of an integer weight (see :mod:`.quantize`), or ``None``.
    """

    shape: tuple
    signature: tuple
    dtype: np.dtype
    name: str
    data: np.ndarray | None = None
    quant: "QuantParams | None" = None

    @property
    def is_const(self) -> bool:
        """True for a constant (a weight or a folded value)."""
        return self.data is not None

    @property
    def dynamic(self) -> bool:
        """True when any dim is dynamic."""
        return any(d < 0 for d in self.signature)

    def __repr__(self) -> str:
        kind = "const " if self.is_const else ""
        return f"<{kind}{self.name} {np.dtype(self.dtype).name}{list(self.signature)}>"


@dataclass(frozen=True)
class QuantParams:
    """TFLite ``QuantizationParameters``: ``real = scale * (q - zero_point)`` along ``axis``.

    Attributes:
        scale: float32 scales, one per slice along ``axis`` (or one for the tensor).
        zero_point: int64 zero points, same length as ``scale``.
        axis: the quantized (per-channel) dimension.
    """

    scale: np.ndarray
    zero_point: np.ndarray
    axis: int = 0


@dataclass(eq=False)
class Op:
    """One TFLite builtin operator.

    Attributes:
        code: builtin operator name (``"CONV_2D"``).
        inputs: input tensors; ``None`` marks an omitted optional input.
        outputs: output tensors.
        options: builtin options as a dict of ``<Name>OptionsT`` field values.
        options_type: the ``BuiltinOptions`` union member name, when it differs from the default.
    """

    code: str
    inputs: list
    outputs: list
    options: dict = field(default_factory=dict)
    options_type: str | None = None

    def __repr__(self) -> str:
        return f"{self.code}({', '.join(t.name if t else '-' for t in self.inputs)}) -> " \
               f"{', '.join(t.name for t in self.outputs)}"


@dataclass(eq=False)
class Graph:
    """One subgraph: operators in execution order, the signature's inputs and outputs.

    ``output_dtypes`` holds the dtype the program declares for each output, which differs
    from the tensor's where the model computes in a narrower type (float64 runs as
    float32); the artifact casts results back to it.
    """

    name: str
    ops: list = field(default_factory=list)
    inputs: list = field(default_factory=list)
    outputs: list = field(default_factory=list)
    input_names: list = field(default_factory=list)
    output_names: list = field(default_factory=list)
    output_dtypes: list = field(default_factory=list)

    def consumers(self) -> dict[Tensor, list[Op]]:
        """Map each tensor to the ops that read it (in op order)."""
        users: dict[Tensor, list[Op]] = {}
        for op in self.ops:
            for t in op.inputs:
                if t is not None:
                    users.setdefault(t, []).append(op)
        return users

    def producers(self) -> dict[Tensor, Op]:
        """Map each activation tensor to the op that writes it."""
        return {t: op for op in self.ops for t in op.outputs}

    def tensors(self) -> list[Tensor]:
        """Every tensor the graph uses, in first-use order (inputs first)."""
        seen: dict[Tensor, None] = dict.fromkeys(self.inputs)
        for op in self.ops:
            for t in list(op.inputs) + list(op.outputs):
                if t is not None:
                    seen.setdefault(t, None)
        for t in self.outputs:
            seen.setdefault(t, None)
        return list(seen)

    def replace_uses(self, old: Tensor, new: Tensor) -> None:
        """Make every reader of ``old`` (ops and graph outputs) read ``new``."""
        for op in self.ops:
            op.inputs = [new if t is old else t for t in op.inputs]
        self.outputs = [new if t is old else t for t in self.outputs]

    def remove_dead(self) -> None:
        """Drop operators none of whose outputs reach a graph output."""
        live = set(self.outputs)
        kept: list[Op] = []
        for op in reversed(self.ops):
            if any(t in live for t in op.outputs):
                kept.append(op)
                live.update(t for t in op.inputs if t is not None)
        self.ops = kept[::-1]


def describe(value: Any) -> str:
    """Short text for a shape/dtype in error messages."""
    return f"{np.dtype(value.dtype).name}{list(value.shape)}" if hasattr(value, "shape") else type(value).__name__
