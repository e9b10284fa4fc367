"""``quantize="int8-full"`` end to end: calibrate, quantize, check the result.

1. :func:`calibrate`: the float32 model runs on every calibration set in the LiteRT interpreter (reference
   kernels, every intermediate tensor kept); each float32 activation's range is recorded.
2. :func:`~exporters.litert.quantize_full.quantize_int8` rewrites the graph for int8 compute.
3. The int8 model runs on every calibration set against the float32 one; the lowest output SNR goes in the
   notes (an interpreter that refuses the int8 model is an :class:`~converter.errors.ExportError`).

A loop that kept float32 each op whose int8 output lost far more signal than its inputs (measured against the
float32 model's intermediate values, quantizing again up to four times) changed no zoo or transformers family's
output SNR by more than 0.2 dB (DeiT, DINOv2, wav2vec2, HuBERT, MobileBERT, BERT, GPT-2, Llama, Gemma2,
Whisper), and is not kept.
"""

from __future__ import annotations

from typing import Any, Iterable

import numpy as np

from exporters.litert.ir import Graph
from exporters.litert.quantize_full import is_activation, quantize_int8


def calibrate(graph: Graph, run: Any, sets: Iterable[Any]) -> dict:
    """The range ``(min, max)`` of every float32 activation of ``graph`` over the calibration ``sets``.

    ``run(set)`` runs the float32 model on one set in an interpreter that keeps every tensor and returns
    it (its tensor ``i`` is ``graph.tensors()[i]``: the builder's numbering). Non-finite values are left out of
    a range; a tensor with no finite value gets none (its ops stay float32)."""
    tensors = [(i, t) for i, t in enumerate(graph.tensors()) if is_activation(t)]
    lo: dict = {}
    hi: dict = {}
    for one in sets:
        interpreter = run(one)
        for i, t in tensors:
            try:
                v = interpreter.get_tensor(i)
            except ValueError:  # (no data: a tensor the kernels did not write)
                continue
            v = v[np.isfinite(v)]
            if v.size:
                lo[t] = min(lo.get(t, np.inf), float(v.min()))
                hi[t] = max(hi.get(t, -np.inf), float(v.max()))
    return {t: (lo[t], hi[t]) for t in lo}


def full_integer(graphs: list[Graph], programs: dict, call_inputs: dict, sets: Any, *, channels_last_io: bool,
                 stateful: bool, notes: list[str], int8_io: bool = False) -> None:
    """Calibrate ``graphs`` (one signature's) on ``sets`` and rewrite its graph for int8 compute (see the module
    docstring).

    ``sets``: the calibration inputs, each a call of the model (a tuple of positional inputs, or one tensor);
    ``None``: the program's sample inputs, one set. ``int8_io``: the model's float32 inputs and outputs become
    int8 (see :func:`~exporters.litert.quantize_full.quantize_int8`).

    Raises:
        InputError: several signatures, buffers the model writes in place, no calibration set, or a set the
            model cannot take (said as the artifact's call says it).
        ExportError: the LiteRT interpreter refuses the int8 model.
    """
    from converter.errors import ExportError, InputError

    if len(graphs) != 1 or stateful:
        raise InputError("quantize='int8-full' takes a model with one signature and no buffers written in place "
                         "(calibrating several signatures or a carried state is not supported); use "
                         "quantize='int8' (dynamic-range) for it")
    (key, program), = programs.items()
    if sets is None:
        sets, where = [tuple(program.sample_inputs)], "the sample inputs"
    else:
        sets = [s if isinstance(s, (tuple, list)) else (s,) for s in sets]
        where = f"{len(sets)} calibration input set{'s' * (len(sets) != 1)}"
    if not sets:
        raise InputError("quantize='int8-full' needs at least one calibration input set (calibration=[(x,), ...])")
    runner = _Runner(call_inputs, channels_last_io, key, sets)
    float_model = runner.model(graphs, keep_tensors=True)
    expected: list = []

    def run(k: int) -> Any:
        expected.append(runner.outputs(float_model, k))
        return float_model.interpreter()

    quantize_int8(graphs[0], calibrate(graphs[0], run, range(len(sets))), notes, int8_io)
    int8_model = runner.model(graphs)
    try:
        got = [runner.outputs(int8_model, k) for k in range(len(sets))]
    except (ExportError, InputError) as e:
        raise ExportError(f"the int8 model does not run in the LiteRT interpreter: {e}") from e
    snr = [_snr_db(r, g) for ref, out in zip(expected, got) for r, g in zip(ref, out) if r.dtype.kind == "f"]
    notes[-1] += f"; activation ranges calibrated on {where}" + (
        f" (there the int8 outputs are within {min(snr):.1f} dB SNR of the float32 model's)" if snr else "")


class _Runner:
    """Builds LiteRT artifacts of the graphs being quantized and runs them on calibration sets."""

    def __init__(self, call_inputs: dict, channels_last_io: bool, key: str, sets: list):
        self.call_inputs, self.channels_last_io, self.key, self.sets = call_inputs, channels_last_io, key, sets

    def model(self, graphs: list[Graph], keep_tensors: bool = False) -> Any:
        """An artifact of ``graphs``; with ``keep_tensors`` one on the reference kernels that keeps every tensor."""
        from ai_edge_litert.interpreter import OpResolverType

        from exporters.litert.artifact import LiteRTArtifact
        from exporters.litert.builder import serialize

        options = {"experimental_preserve_all_tensors": True,
                   "experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES} \
            if keep_tensors else {}
        return LiteRTArtifact(serialize(graphs), call_inputs=self.call_inputs, channels_last_io=self.channels_last_io,
                              interpreter_options=options)

    def outputs(self, art: Any, k: int) -> list:
        """``art``'s outputs on calibration set ``k``, as float64 arrays.

        Raises:
            InputError: the set does not fit the model (named by its index).
        """
        from converter.errors import InputError

        try:
            out = art(*self.sets[k], signature=self.key)
        except InputError as e:
            raise InputError(f"calibration set {k}: {e}") from e
        return [np.asarray(o, np.float64) for o in (out if isinstance(out, tuple) else (out,))]


def _snr_db(ref: np.ndarray, got: np.ndarray) -> float:
    """Signal-to-noise ratio of ``got`` against ``ref`` in dB (infinite when they are equal; validators.metrics has
    the same, which exporters do not import: DESIGN.md's dependency direction)."""
    noise = float(np.mean((got - ref) ** 2)) if ref.size else 0.0
    return np.inf if noise == 0 else 10 * np.log10(max(float(np.mean(ref ** 2)), 1e-30) / noise)


__all__ = ["calibrate", "full_integer"]
