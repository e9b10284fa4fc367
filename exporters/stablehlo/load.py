"""Load a saved StableHLO artifact and run it — no PyTorch model needed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import export as jax_export

from converter.call_inputs import CallInputs, check_input
from converter.errors import ExportError, InputError
from exporters.artifact_io import is_torch


def run_exported(exported: Any, state: dict, inputs: tuple, random: bool = False, seed: int | None = None,
                 carried: Sequence[str] = (), specs: Sequence[dict] = (), ranges: Sequence = (),
                 structure: Any = None) -> Any:
    """Call an Exported module; torch tensors in → torch tensors out, else numpy. A module that draws random
    numbers (``random``) takes a uint32 seed after the weights: ``seed``, else a fresh one from NumPy's global
    generator (``np.random.seed`` makes the draws repeat). The buffers the model writes in place (``carried``)
    are its last outputs: written into ``state`` for the next call. ``specs``: the inputs' ``name`` / ``shape`` /
    ``dtype`` (``TensorSpec.to_json``), checked first (:func:`~converter.call_inputs.check_input`), with the
    ``ranges`` of their dynamic dims (:attr:`~converter.call_inputs.CallInputs.ranges`); a size jax.export's
    symbolic shapes refuse besides (0 for a dynamic dim) is an :class:`InputError` too. The results come back in
    the model's structure where ``structure`` (a :class:`~converter.call_outputs.CallOutputs`) knows it."""
    torch_io = any(is_torch(x) for x in inputs)
    with jax.enable_x64(True):
        arrays = [_to_array(x) for x in inputs]
        for i, (spec, arr) in enumerate(zip(specs, arrays)):
            check_input(spec["name"], arr.shape, arr.dtype, spec["shape"], spec["dtype"], "the StableHLO module",
                        ranges[i] if i < len(ranges) else None)
            if arr.dtype != jnp.dtype(spec["dtype"]):  # (within a kind, cast: as the LiteRT and ONNX artifacts)
                arrays[i] = arr.astype(spec["dtype"])
        if random:
            arrays.insert(0, np.uint32(np.random.randint(0, 2**32, dtype=np.uint64) if seed is None else seed))
        try:
            outs = exported.call(state, *arrays)
        except ValueError as e:
            if "polymorphic shape" not in str(e) and "symbolic shape constraint" not in str(e):
                raise
            raise InputError(f"the StableHLO module cannot take these input shapes: {str(e).splitlines()[0]}") \
                from None
    if carried:
        n = len(outs) - len(carried)
        state.update((name, np.asarray(v)) for name, v in zip(carried, outs[n:]))  # (host arrays, as loaded)
        outs = outs[:n]
    if torch_io:
        from tpu_runtime.module import to_torch

        outs = [to_torch(o) for o in outs]
    else:
        outs = [np.asarray(o) for o in outs]
    if structure is not None:
        return structure.build(outs, live=torch_io)
    return outs[0] if len(outs) == 1 else tuple(outs)


def _to_array(x: Any) -> Any:
    if is_torch(x):
        from tpu_runtime.module import to_jax

        return to_jax(x)
    return jnp.asarray(x)


class LoadedStableHLO:
    """A reloaded StableHLO artifact: ``signature``, ``mlir_text`` and ``__call__``."""

    def __init__(self, path: str | Path):
        path = Path(path)
        try:
            self.signature = json.loads((path / "signature.json").read_text())
            self.exported = jax_export.deserialize(bytearray((path / "model.stablehlo").read_bytes()))
            with np.load(path / "weights.npz") as z:
                dtypes = {w["name"]: w["dtype"] for w in self.signature["weights"]}
                self.state = {k: _restore(z[k], dtypes.get(k)) for k in z.files}
        except FileNotFoundError as e:
            raise ExportError(f"{path} is not a StableHLO artifact: missing {Path(e.filename).name}") from e
        except (ValueError, KeyError, json.JSONDecodeError) as e:
            raise ExportError(f"{path}: corrupt StableHLO artifact ({type(e).__name__}: {e})") from e
        self.mlir_text = (path / "model.mlir").read_text() if (path / "model.mlir").exists() else None
        self.call_inputs = CallInputs.from_json({"keywords": self.signature.get("keyword_inputs", ()),
                                                 "dim_ranges": self.signature.get("dim_ranges"),
                                                 "constants": self.signature.get("constant_inputs"),
                                                 "outputs": self.signature.get("output_structure")},
                                                len(self.signature["inputs"]), len(self.signature["outputs"]))

    def __call__(self, *args: Any, seed: int | None = None, **kwargs: Any) -> Any:
        """Run with numpy arrays or torch tensors, called as the model is (``seed``: see :func:`run_exported`)."""
        return run_exported(self.exported, self.state, self.call_inputs.flatten(args, kwargs),
                            random=bool(self.signature.get("random_seed")), seed=seed,
                            carried=self.signature.get("mutated_buffers", ()), specs=self.signature["inputs"],
                            ranges=self.call_inputs.ranges, structure=self.call_inputs.outputs)


def _restore(v: np.ndarray, dtype: str | None) -> np.ndarray:
    return v.view(jnp.bfloat16) if dtype == "bfloat16" else v


def load(path: str | Path) -> LoadedStableHLO:
    """Load a directory written by ``StableHLOArtifact.save``."""
    return LoadedStableHLO(path)
