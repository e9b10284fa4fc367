"""Export a LoweredProgram with ``jax.export``: MLIR text, portable bytecode, weights, signature.

Weights are arguments of the exported function (not constants), so the module
stays small and the same weights file serves every shape. Dims declared dynamic
at capture become ``jax.export`` symbolic dims (shape polymorphism).
"""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax import export as jax_export
from jax.extend.core import jaxprs_in_params

from converter.call_inputs import CallInputs
from converter.errors import ExportError
from converter.lowering.context import check_options
from converter.lowering.dtypes import to_jax_dtype
from converter.lowering.interpreter import LoweredProgram
from exporters.atomic import write_dir
from exporters.jaxpr_trace import range_constraints
from kernels import dispatch

SCHEMA_VERSION = 1


def _abstract_inputs(program: LoweredProgram) -> list[jax.ShapeDtypeStruct]:
    """Input avals, with one shared symbolic scope for every dynamic dim (bounded by torch.export's ranges, so a
    lowering that compares a dim with a constant, ``position_ids[:, :seq]`` of a 64-long buffer, is conclusive)."""
    names = sorted({d for s in program.inputs for d in s.shape if isinstance(d, str)})
    if not names:
        return [jax.ShapeDtypeStruct(tuple(s.shape), to_jax_dtype(s.dtype)) for s in program.inputs]
    scope = jax_export.SymbolicScope(range_constraints(program, names))  # (torch.export's ranges: ``s <= 64``)
    out = []
    for s in program.inputs:
        text = ", ".join(str(d) for d in s.shape)
        shape = jax_export.symbolic_shape(f"({text},)" if len(s.shape) == 1 else text, scope=scope)
        out.append(jax.ShapeDtypeStruct(shape, to_jax_dtype(s.dtype)))
    return out


class StableHLOArtifact:
    """The ``target="stablehlo"`` artifact.

    Attributes:
        exported: the ``jax.export.Exported`` (args: weights dict, then user inputs).
        program: the LoweredProgram it came from.
    """

    def __init__(self, program: LoweredProgram, **_options: Any):
        self.program = program
        self.call_inputs = CallInputs.of(program)  # the model's own call structure (see converter.call_inputs)
        self.state = {k: np.asarray(v) for k, v in program.state.items()}
        self.notes: list[str] = []
        avals = _abstract_inputs(program)
        if program.dynamic:
            # jax 0.10.2 cannot lower stablehlo.composite under shape polymorphism (the
            # decomposition gains dim-variable operands the composite op lacks), so a
            # dynamic export emits the decompositions inline.
            program = dataclasses.replace(program, options={**program.options, "composites": False})
            self.notes.append("dynamic dims: high-level ops emitted as their decompositions, not composites")
        with jax.enable_x64(True):
            state_avals = {k: jax.ShapeDtypeStruct(v.shape, v.dtype) for k, v in self.state.items()}
            carried = list(program.mutated_buffers)  # their new values follow the outputs (see run_exported)

            def outputs(result: tuple) -> tuple:
                outs, muts = result
                return tuple(outs) + tuple(muts[name] for name in carried)

            seeded = jax.jit(lambda state, seed, *xs: outputs(program.fn(state, *xs, rng=jax.random.key(seed))))
            seed = jax.ShapeDtypeStruct((), np.uint32)
            try:
                with dispatch.portable("stablehlo export"):
                    self.random = draws_random_numbers(jax.make_jaxpr(seeded)(state_avals, seed, *avals).jaxpr)
                    if self.random:  # a seed input, drawn per call: a constant one would repeat one draw forever
                        self.exported = jax_export.export(seeded)(state_avals, seed, *avals)
                    else:
                        fn = jax.jit(lambda state, *xs: outputs(program.fn(state, *xs)))
                        self.exported = jax_export.export(fn)(state_avals, *avals)
            except Exception as e:  # jax raises many types while tracing/lowering
                raise ExportError(f"jax.export failed: {type(e).__name__}: {e}") from e
        self.carried = carried
        if carried:
            self.notes.append(f"buffers the model writes in place ({', '.join(carried)}) are outputs after the model's "
                              "own: calling the artifact (or a reloaded one) writes them into its weights for the next "
                              "call")
        if self.random:
            self.notes.append("random numbers: the module takes a uint32 seed after the weights, a fresh one per call "
                              "(NumPy's global generator, or seed=)")

    @property
    def mlir_text(self) -> str:
        """The StableHLO module as MLIR text."""
        return self.exported.mlir_module()

    def signature(self) -> dict:
        """Names, shapes, dtypes and dynamic dims of inputs, outputs and weights."""
        return {
            "schema_version": SCHEMA_VERSION,
            "format": "tpu-export/stablehlo",
            "jax_version": jax.__version__,
            "inputs": [s.to_json() for s in self.program.inputs],
            "keyword_inputs": list(self.call_inputs.keywords),
            "dim_ranges": self.call_inputs.to_json()["dim_ranges"],
            "constant_inputs": self.call_inputs.constants,
            "outputs": [s.to_json() for s in self.program.outputs],
            "output_structure": self.call_inputs.outputs.to_json(),
            "dynamic_dims": sorted({d for s in self.program.inputs for d in s.shape if isinstance(d, str)}),
            "weights": [{"name": k, "shape": list(v.shape), "dtype": str(v.dtype)} for k, v in sorted(self.state.items())],
            "notes": self.notes,
            "random_seed": self.random,
            "mutated_buffers": list(self.carried),
            "calling_convention": (("main(weights: dict[name→array], seed: uint32[], *inputs)" if self.random
                                    else "main(weights: dict[name→array], *inputs)")
                                   + (" -> tuple(*outputs, *mutated_buffers' new values)" if self.carried
                                      else " -> tuple(outputs)")),
        }

    def save(self, path: str) -> Path:
        """Write ``model.mlir``, ``model.stablehlo`` (jax.export bytes), ``weights.npz``, ``signature.json``."""

        def fill(d: Path) -> None:
            (d / "model.mlir").write_text(self.mlir_text)
            (d / "model.stablehlo").write_bytes(bytes(self.exported.serialize()))
            buf = io.BytesIO()
            np.savez(buf, **{k: _storable(v) for k, v in sorted(self.state.items())})
            (d / "weights.npz").write_bytes(buf.getvalue())
            (d / "signature.json").write_text(json.dumps(self.signature(), indent=2, sort_keys=True) + "\n")

        return write_dir(path, fill)

    def __call__(self, *args: Any, seed: int | None = None, **kwargs: Any) -> Any:
        """Run the exported module, called as the model is (same as a reloaded one; ``seed`` for a module that
        draws random numbers)."""
        from exporters.stablehlo.load import run_exported

        return run_exported(self.exported, self.state, self.call_inputs.flatten(args, kwargs), random=self.random,
                            seed=seed, carried=self.carried, specs=[spec.to_json() for spec in self.program.inputs],
                            ranges=self.call_inputs.ranges, structure=self.call_inputs.outputs)


def draws_random_numbers(jaxpr: Any) -> bool:
    """Whether a jaxpr (or one nested in it) draws random bits."""
    for eqn in jaxpr.eqns:
        if eqn.primitive.name in ("random_bits", "threefry2x32"):
            return True
        if any(draws_random_numbers(sub) for sub in jaxprs_in_params(eqn.params)):
            return True
    return False


def _storable(v: np.ndarray) -> np.ndarray:
    # npz cannot store bfloat16: keep its bits as uint16; load() restores it from signature.json.
    return v.view(np.uint16) if v.dtype.name == "bfloat16" else v


def build(program: LoweredProgram, **options: Any) -> StableHLOArtifact:
    """Target builder used by ``convert(..., target="stablehlo")``."""
    check_options("StableHLO", options, ())
    return StableHLOArtifact(program, **options)
