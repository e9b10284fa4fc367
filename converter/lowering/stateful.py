"""Models that write their buffers in place (an in-place KV cache, a step counter, BatchNorm's running statistics
in training mode) for the formats whose files are pure functions (ONNX, LiteRT).

:func:`stateful_program` makes such a :class:`~converter.lowering.interpreter.LoweredProgram` a pure one: each
written buffer becomes an input after the model's own (named ``state.<buffer>``) and its new value an output
after the model's own, and it leaves the weights. The artifact carries the values from call to call
(:class:`StateCarrier`), so calling it behaves as calling the model does; a file reloaded alone takes and
returns them as plain inputs and outputs. Before this, those formats baked each buffer's first value in as a
constant: every call computed with it, as if the writes had never happened.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

import numpy as np

from converter.lowering.dtypes import numpy_to_tensor
from converter.lowering.interpreter import LoweredProgram, TensorSpec

#: The name prefix of a written buffer's input and output in a file.
PREFIX = "state."


def note(names: Sequence[str]) -> str:
    """The artifact note that says how the buffers ``names`` are carried."""
    return (f"buffers the model writes in place ({', '.join(names)}) are inputs and outputs after the model's own "
            f"({PREFIX}<name>): calling the artifact carries them from call to call (reset_state() starts over); "
            "a file loaded alone takes and returns them")


@dataclasses.dataclass
class StatefulProgram(LoweredProgram):
    """A program whose written buffers are inputs and outputs (see the module docstring).

    Attributes:
        carried: the written buffers' names, in input (and output) order.
        initial: their values when the model was converted (NumPy).
    """

    carried: list[str] = dataclasses.field(default_factory=list)
    initial: dict[str, Any] = dataclasses.field(default_factory=dict)
    user_inputs: int = 0

    def fn(self, state: dict, *inputs: Any, rng: Any = None, checks: list | None = None) -> tuple[tuple, dict]:
        """The model's function with the carried buffers' values after its inputs and their new values after its
        outputs (no mutations left)."""
        n = self.user_inputs
        full = dict(state)
        full.update(zip(self.carried, inputs[n:]))
        outs, muts = LoweredProgram.fn(self, full, *inputs[:n], rng=rng, checks=checks)
        return tuple(outs) + tuple(muts[name] for name in self.carried), {}

    @property
    def sample_inputs(self) -> list:
        """The model's sample inputs, then the carried buffers' values (as torch tensors)."""
        return LoweredProgram.sample_inputs.fget(self) + [numpy_to_tensor(np.asarray(self.initial[n]))
                                                          for n in self.carried]


def stateful_program(program: LoweredProgram) -> StatefulProgram:
    """``program`` with its written buffers as inputs and outputs (see the module docstring)."""
    carried = list(program.mutated_buffers)
    initial = {name: program.state[name] for name in carried}
    specs = [TensorSpec(PREFIX + name, tuple(np.shape(v)), numpy_to_tensor(np.asarray(v)).dtype)
             for name, v in initial.items()]
    weights = {k: v for k, v in program.state.items() if k not in initial}
    return StatefulProgram(program.exported, weights, list(program.inputs) + specs, list(program.outputs) + specs,
                           [], program.target, dict(program.options), carried=carried, initial=initial,
                           user_inputs=len(program.inputs))


class StateCarrier:
    """The carried buffers' current values between calls of an artifact, by name (a LiteRT file's signatures
    converted from one model share them: a prefill and a decode signature write one KV cache).

    Args:
        initial: each buffer's starting value (NumPy), by name.
    """

    def __init__(self, initial: dict[str, Any]):
        self._initial = {n: np.array(v) for n, v in initial.items()}
        self.values = {n: v.copy() for n, v in self._initial.items()}

    def add(self, initial: dict[str, Any]) -> None:
        """Carry more buffers (another signature's; a name already carried keeps its value)."""
        for n, v in initial.items():
            if n not in self._initial:
                self._initial[n] = np.array(v)
                self.values[n] = self._initial[n].copy()

    def reset(self) -> None:
        """Back to the values the model was converted with."""
        self.values = {n: v.copy() for n, v in self._initial.items()}

    def inputs(self, names: Sequence[str]) -> list:
        """The current values of ``names``, to follow a run's own inputs."""
        return [self.values[n] for n in names]

    def take(self, names: Sequence[str], outs: Sequence[Any]) -> list:
        """Keep the new values of ``names`` (the last outputs of a run); return the model's own outputs."""
        n = len(outs) - len(names)
        self.values.update(zip(names, (np.asarray(v) for v in outs[n:])))
        return list(outs[:n])


__all__ = ["PREFIX", "StateCarrier", "StatefulProgram", "note", "stateful_program"]
