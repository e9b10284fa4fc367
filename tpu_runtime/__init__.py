"""The TPU runtime: lowered programs compiled with jax.jit, and the ``tpu`` torch device.

Importing this package makes ``"tpu"`` a PyTorch device (PrivateUse1 renamed; see
:mod:`tpu_runtime.device`) whose tensors hold JAX arrays on ``jax.devices()[0]``
and whose ops run through the ATen → JAX lowering table::

    import tpu_runtime
    model = model.to("tpu")
    loss = model(x.to("tpu")).sum(); loss.backward()
    with tpu_runtime.set_eager_mode("fused"):
        ...
    print(tpu_runtime.cache_stats())

Eager modes (strict, debug, fused; :mod:`tpu_runtime.eager`), the compile cache
(:mod:`tpu_runtime.cache`) and ``torch.compile(backend="tpu")``
(:mod:`tpu_runtime.dynamo_backend`) share one kernel library and one cache.
"""

from tpu_runtime import device as _device

_device.register()

from tpu_runtime.cache import (CacheMissError, CacheStats, cache_dir, cache_only, cache_stats,  # noqa: E402
                               clear_cache, reset_cache_stats, set_cache_dir)
from tpu_runtime.fallback import fallback_report, set_cpu_fallback  # noqa: E402
from tpu_runtime.eager import REPORT as debug_report  # noqa: E402
from tpu_runtime.eager import MODES, NonFiniteError, get_eager_mode, set_eager_mode, sync  # noqa: E402
from tpu_runtime.eager import FusedReport, fused_report, reset_fused_report  # noqa: E402
from tpu_runtime.interop import as_jax, call_jax, from_jax  # noqa: E402
from tpu_runtime.module import TpuModule  # noqa: E402
from tpu_runtime.rng import manual_seed  # noqa: E402
from tpu_runtime.tensor import TpuTensor  # noqa: E402

eager_mode = set_eager_mode

__all__ = ["TpuModule", "TpuTensor", "MODES", "set_eager_mode", "eager_mode", "get_eager_mode", "sync",
           "cache_stats", "reset_cache_stats", "cache_only", "CacheMissError", "CacheStats", "set_cache_dir",
           "cache_dir", "clear_cache", "set_cpu_fallback", "fallback_report", "manual_seed", "NonFiniteError",
           "debug_report", "FusedReport", "fused_report", "reset_fused_report", "as_jax", "from_jax", "call_jax"]
