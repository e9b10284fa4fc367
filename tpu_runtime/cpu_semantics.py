"""PyTorch CPU ops run from inside the device's kernels, with the CPU's full semantics.

Inside ``__torch_dispatch__`` torch has excluded the dispatch keys whose fallbacks already ran for the device op
(``Conjugate``, ``Negative``, ``ZeroTensor``, …). A CPU op run there (debug eager's comparison, the opt-in CPU
fallback) would then ignore the lazy conjugate and negation bits of its own intermediate views: the CPU's
``linalg_lu_solve(..., left=False)`` of complex matrices solves with ``B.mH`` and returned a wrong result there.
"""

from __future__ import annotations

from typing import Any

import torch

_KEYS = [getattr(torch._C.DispatchKey, k) for k in ("Conjugate", "Negative", "ZeroTensor")]


def cpu_semantics() -> Any:
    """A context in which CPU ops resolve lazy conjugate/negative views and zero tensors as they do at top level
    (the thread's dispatch keys as they are, less the exclusions of :data:`_KEYS`)."""
    exclude = torch._C._dispatch_tls_local_exclude_set()
    for key in _KEYS:
        exclude = exclude.remove(key)
    return torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude)
