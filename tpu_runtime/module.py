"""The ``target="tpu"`` artifact: a lowered program compiled with jax.jit on one device.

Weights move to the device once and stay there; each new input signature is
compiled once, in the runtime's shared compile cache (:mod:`tpu_runtime.cache`:
the same ``cache_stats()`` counters, ``cache_only()`` guard and on-disk cache as
the eager modes and ``torch.compile``), and counted in the module's own
:class:`CompileStats` too; buffer mutations (BatchNorm running stats, in-place
caches) are written back into the module's device state after every call.
"""

from __future__ import annotations

import itertools
import time
import weakref
from dataclasses import dataclass
from typing import Any

import jax
import numpy as np
import torch

from converter.call_inputs import CallInputs, check_input
from converter.lowering.context import check_options
from converter.lowering.dtypes import to_jax_dtype, to_torch_dtype
from converter.lowering.interpreter import LoweredProgram
from tpu_runtime import graph_checks
from tpu_runtime.cache import CACHE
from tpu_runtime.tensor import TpuTensor
from tpu_runtime.values import array_to_torch, array_to_tpu, materialize, numpy_view

_MODULE_IDS = itertools.count()


@dataclass
class CompileStats:
    """One module's share of the shared compile cache's counters (``compile_seconds``:
    tracing, compiling and the first run of each new signature)."""

    requests: int = 0
    hits: int = 0
    misses: int = 0
    compile_seconds: float = 0.0


def to_jax(t: Any, device: Any = None) -> jax.Array:
    """A torch tensor or array-like → a JAX array on ``device`` (bfloat16 kept)."""
    return jax.device_put(host_array(t), device)


def host_array(t: Any) -> np.ndarray:
    """A torch tensor or array-like as a NumPy array to pass straight into a jitted call.

    A view of the tensor's memory where possible (bfloat16 through an int16 view): the
    callers convert every output back to torch before returning, which waits for the
    computation, so the call has read its inputs before torch can write to them. Passing
    NumPy to the jitted call costs ~10 µs an input against ~130 µs for ``jax.device_put``.
    """
    return numpy_view(t) if isinstance(t, torch.Tensor) else np.asarray(t)


#: A JAX array → a CPU torch tensor (bfloat16 kept, data copied).
to_torch = array_to_torch


def _device_value(t: TpuTensor, device: Any) -> jax.Array:
    """The JAX array behind a tpu tensor, on ``device``."""
    value = materialize(t)
    return value if device == jax.devices()[0] else jax.device_put(value, device)


class TpuModule:
    """A converted model running on ``jax.devices()[0]``: torch tensors in, torch tensors out
    (on the ``tpu`` device when the inputs are, else on the CPU)."""

    def __init__(self, program: LoweredProgram, *, device: Any = None, seed: int = 0, **_options: Any):
        self.program = program
        self.device = device or jax.devices()[0]
        with jax.enable_x64(True):
            self.state = {k: jax.device_put(v, self.device) for k, v in program.state.items()}
        self._seed, self._calls = seed, 0
        self._cache_id = next(_MODULE_IDS)  # programs differ in weights and code: never share entries
        self._checks: dict = {}  # signature → the error checks its trace recorded (see _run)
        self._keys: list[tuple] = []  # this module's cache entries, dropped when the module is freed
        weakref.finalize(self, CACHE.discard, self._keys)
        self.stats = CompileStats()
        self._call = CallInputs.of(program)  # the model's own call: keywords in any order, nested inputs

    def _flat_inputs(self, args: tuple, kwargs: dict) -> list[Any]:
        flat = self._call.flatten(args, kwargs)
        specs = self.program.inputs
        for x, spec, ranges in zip(flat, specs, self._call.ranges):
            check_input(spec.name, tuple(x.shape), x.dtype, spec.shape, spec.dtype, "the converted model", ranges)
        self._call.check_links([s.name for s in specs], [tuple(x.shape) for x in flat], "the converted model")
        return flat

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Run the model; returns torch tensors in the model's output structure."""
        flat = self._flat_inputs(args, kwargs)
        on_tpu = any(isinstance(x, TpuTensor) for x in flat)
        with jax.enable_x64(True):
            default = self.device == jax.devices()[0]  # NumPy inputs land on the default device
            inputs = [_device_value(x, self.device) if isinstance(x, TpuTensor)
                      else host_array(x) if default else to_jax(x, self.device) for x in flat]
            key = np.uint32((self._seed + self._calls) % 2**32)  # a host scalar: the PRNG key is built in-graph
            self._calls += 1
            outs, muts = self._run(key, inputs)
            if not outs:  # nothing below waits for the call: it must finish reading the inputs now
                jax.block_until_ready(muts)
        self.state.update(muts)
        # tpu tensors in, tpu tensors out (no host round trip); otherwise CPU tensors
        result = [array_to_tpu(o) if on_tpu else to_torch(o) for o in outs]
        return self._call.outputs.build(result)  # (the model's structure, its ``None``s and strings in place)

    def _run(self, key: Any, inputs: list[Any]) -> tuple:
        """Run the program's executable for this input signature, compiling it on a miss; then its error checks
        (``torch.linalg``'s on a singular matrix, ``_assert_async``), which raise PyTorch's own errors (a sync,
        only for programs that have them).

        Raises:
            CacheMissError: a compile was needed inside :func:`tpu_runtime.cache_only`.
        """
        sig = ("tpu_module", self._cache_id, tuple((tuple(x.shape), str(x.dtype)) for x in inputs))
        self.stats.requests += 1
        fn = CACHE.lookup(sig)
        if fn is not None:
            self.stats.hits += 1
            outs, muts, infos = fn(self.state, key, *inputs)
        else:
            self.stats.misses += 1
            start = time.perf_counter()
            checks: list = []
            program = self.program

            def traced(state: dict, k: Any, *xs: Any) -> tuple:
                checks.clear()
                outs, muts = program.fn(state, *xs, rng=jax.random.key(k), checks=checks)
                return outs, muts, tuple(c[0] for c in checks)

            outs, muts, infos = CACHE.compile(sig, traced, (self.state, key, *inputs),
                                              describe=lambda: f"{self!r} at input shapes {[list(s) for s, _ in sig[2]]}")
            self._checks[sig] = list(checks)
            self.stats.compile_seconds += time.perf_counter() - start
            self._keys.append(sig)
        graph_checks.run(infos, self._checks.get(sig, ()), True)
        return outs, muts

    def stablehlo(self, *sample_inputs: Any) -> str:
        """StableHLO text of the program (at the captured sample shapes by default)."""
        with jax.enable_x64(True):
            inputs = [to_jax(x) for x in sample_inputs] or self.program.example_inputs()
            key = np.uint32(0)
            jitted = jax.jit(lambda state, k, *xs: self.program.fn(state, *xs, rng=jax.random.key(k)))
            return jitted.lower(self.state, key, *inputs).as_text()

    def state_dict(self) -> dict[str, torch.Tensor]:
        """Current parameters and buffers (after written-back mutations) as torch tensors."""
        return {k: to_torch(v) for k, v in self.state.items()}

    def __repr__(self) -> str:
        ins = ", ".join(f"{s.name}{list(s.shape)}:{str(s.dtype)[6:]}" for s in self.program.inputs)
        return f"TpuModule({ins}) on {self.device}"


def build(program: LoweredProgram, **options: Any) -> TpuModule:
    """Target builder used by ``convert(..., target="tpu")``."""
    check_options("tpu", options, ("device", "seed"))
    return TpuModule(program, **options)


__all__ = ["TpuModule", "CompileStats", "build", "host_array", "to_jax", "to_torch", "to_jax_dtype", "to_torch_dtype"]
