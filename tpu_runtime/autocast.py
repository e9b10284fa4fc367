"""``torch.autocast("tpu", dtype=torch.bfloat16)``: mixed precision on the tpu device.

PyTorch's autocast runs at its own dispatch key (``AutocastPrivateUse1`` for this
backend), above autograd: a kernel there casts the op's floating inputs and calls
the op again below the key, so autograd records the casts and backward flows back
through them. A C++ backend registers those kernels in C++ (CUDA's are in
``autocast_mode.cpp``); this module registers them from Python with ``torch.library``,
with CUDA's three policies:

* **lower precision** (matrix products, convolutions, RNN cells, attention): floating
  inputs are cast to the autocast dtype;
* **float32** (sums, norms, losses, softmax, ``exp``/``log``/``pow``…, where
  bfloat16/float16 lose too much): half-precision inputs are cast to float32 (CUDA's
  "set/append dtype" ops, which compute in float32 without casting their input, give
  the same float32 result);
* **promote** (``addcmul``, ``dot``, ``index_put``…, ops combining several inputs):
  inputs are cast to the widest floating dtype among them.

Every other op falls through the key unchanged. Only tpu tensors of float16,
bfloat16 or float32 are cast (float64 and CPU tensors are left alone), as CUDA's
autocast does for its device. Outside an autocast region the key is not active and
nothing here runs.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

from tpu_runtime.device import opaque_to_dynamo

aten = torch.ops.aten
_KEY = "AutocastPrivateUse1"
_HALF = (torch.float16, torch.bfloat16)
_CASTABLE = (torch.float16, torch.bfloat16, torch.float32)

# PyTorch's lists for CUDA (``AT_FORALL_LOWER_PRECISION_FP``, ``AT_FORALL_FP32``,
# ``AT_FORALL_FP32_SET_OPT_DTYPE``, ``AT_FORALL_PROMOTE`` in ``ATen/autocast_mode.h``).
LOWER_PRECISION = (
    "_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d", "conv_transpose2d",
    "conv_transpose3d", "convolution", "prelu", "addmm", "addmv", "addr", "matmul", "einsum", "mm", "mv",
    "linalg_vecdot", "linear", "addbmm", "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot",
    "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
    "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
)
FLOAT32 = (
    "acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p", "reciprocal", "rsqrt",
    "sinh", "tan", "pow", "softplus", "layer_norm", "native_layer_norm", "group_norm", "frobenius_norm",
    "nuclear_norm", "cosine_similarity", "poisson_nll_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
    "hinge_embedding_loss", "kl_div", "l1_loss", "smooth_l1_loss", "huber_loss", "mse_loss", "margin_ranking_loss",
    "multilabel_margin_loss", "soft_margin_loss", "triplet_margin_loss", "multi_margin_loss",
    "binary_cross_entropy_with_logits", "dist", "pdist", "cdist", "renorm", "logsumexp",
    "upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d", "_upsample_nearest_exact2d",
    "upsample_nearest3d", "_upsample_nearest_exact3d", "upsample_linear1d", "upsample_bilinear2d",
    "_upsample_bilinear2d_aa", "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa",
    # CUDA's "fp32_set_opt_dtype" and "fp32_append_dtype" ops: float32 results for half inputs too.
    "prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm", "linalg_matrix_norm", "sum",
    "norm",
)
PROMOTE = (
    "addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler", "index_put", "tensordot",
    "scatter_add",
)


def _eligible(x: Any) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type == "tpu" and x.dtype in _CASTABLE


def _cast(x: Any, dtype: torch.dtype, only: tuple = _CASTABLE) -> Any:
    if _eligible(x) and x.dtype in only and x.dtype != dtype:
        return x.to(dtype)
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype, only) for v in x)
    return x


def _widest(args: Any, found: list) -> None:
    for x in args:
        if _eligible(x):
            found.append(x.dtype)
        elif isinstance(x, (list, tuple)):
            _widest(x, found)


def _kernel(op: Any, policy: str) -> Callable:
    below = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastPrivateUse1)

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if policy == "lower":
            dtype = torch.get_autocast_dtype("tpu")
            args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
        elif policy == "float32":
            args = _cast(args, torch.float32, _HALF)
            kwargs = {k: _cast(v, torch.float32, _HALF) for k, v in kwargs.items()}
        else:
            found: list = []
            _widest(args, found)
            _widest(tuple(kwargs.values()), found)
            if len(set(found)) > 1:
                dtype = torch.float32 if torch.float32 in found else found[0]
                args, kwargs = _cast(args, dtype), {k: _cast(v, dtype) for k, v in kwargs.items()}
        with torch._C._ExcludeDispatchKeyGuard(below):
            return op(*args, **kwargs)

    return kernel


def register() -> list:
    """Register the autocast kernels and the fallthrough of every other op; returns the
    ``torch.library.Library`` objects (they must stay alive)."""
    ops = torch.library.Library("aten", "IMPL")
    for names, policy in ((LOWER_PRECISION, "lower"), (FLOAT32, "float32"), (PROMOTE, "promote")):
        for name in names:
            packet = getattr(aten, name, None)
            if packet is None:
                continue
            for overload in packet.overloads():
                op = getattr(packet, overload)
                if op._schema.is_mutable or any(a.is_out for a in op._schema.arguments):
                    continue
                ops.impl(op, opaque_to_dynamo(_kernel(op, policy)), _KEY)
    rest = torch.library.Library("_", "IMPL")
    rest.fallback(torch.library.fallthrough_kernel, _KEY)
    return [ops, rest]


__all__ = ["register", "LOWER_PRECISION", "FLOAT32", "PROMOTE"]
