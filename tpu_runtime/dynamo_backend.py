"""``torch.compile(model, backend="tpu")``: AOTAutograd graphs compiled with jax.jit.

Registered through PyTorch's ``torch_dynamo_backends`` entry point (pyproject),
so nothing is patched at import time. Forward and backward graphs from
AOTAutograd are decomposed to core ATen (the capture preserve-list kept whole),
checked against the lowering table, and compiled once per input signature in
the runtime's shared compile cache (:mod:`tpu_runtime.cache`: the same counters,
``cache_only()`` and on-disk cache as the eager modes); graph breaks are handled
by dynamo itself (each piece comes here separately).
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import jax
import torch
from torch._dynamo.backends.common import aot_autograd

from converter.capture import PRESERVED_OPS
from converter.lowering.fx_runner import check_supported, run_graph_module
from tpu_runtime.cache import CACHE
from tpu_runtime.module import to_jax, to_torch

#: Compile statistics: the shared cache's counters (eager modes included).
STATS = CACHE.stats
_GRAPH_IDS = itertools.count()


def _decompositions() -> dict:
    table = dict(torch._decomp.core_aten_decompositions())
    for op in PRESERVED_OPS:
        table.pop(op, None)
    return table


def compile_graph(gm: torch.fx.GraphModule, example_inputs: list) -> Callable:
    """Compile one AOTAutograd graph (forward or backward) for the TPU runtime."""
    check_supported(gm, "tpu")
    device = jax.devices()[0]
    graph_id = next(_GRAPH_IDS)  # graphs with equal code may close over different constants
    seed = [0]

    def run(args: list) -> list:
        tensors = [a for a in args if isinstance(a, torch.Tensor)]
        statics = tuple(a if not isinstance(a, torch.Tensor) else None for a in args)
        sig = ("dynamo", graph_id, statics, tuple((tuple(t.shape), t.dtype) for t in tensors))
        with jax.enable_x64(True):
            arrays = [to_jax(t, device) for t in tensors]
            key = jax.random.key_data(jax.random.key(seed[0]))
            seed[0] += 1
            fn = CACHE.lookup(sig)
            if fn is None:

                def traced(k: Any, *xs: Any) -> tuple:
                    it = iter(xs)
                    full = [next(it) if s is None else s for s in statics]
                    return run_graph_module(gm, tuple(full), rng=jax.random.wrap_key_data(k))

                outs = CACHE.compile(sig, traced, (key, *arrays), describe=lambda: f"torch.compile graph {graph_id}")
            else:
                outs = fn(key, *arrays)
        args.clear()
        return [to_torch(o) if hasattr(o, "dtype") and not isinstance(o, torch.Tensor) else o for o in outs]

    run._boxed_call = True  # AOTAutograd's boxed calling convention: args list is consumed
    return run


#: The dynamo backend object (entry point ``tpu``).
tpu_backend = aot_autograd(fw_compiler=compile_graph, bw_compiler=compile_graph, decompositions=_decompositions())
