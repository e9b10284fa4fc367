"""Every op of the op table through the ONNX and LiteRT exporters: one sample per op (the first of its first
dtype that is not bfloat16), converted, run in ONNX Runtime / the LiteRT Interpreter and compared with PyTorch
at the op's tolerance (at least 1e-4).

Each (op, target) must end as :data:`REFUSED` and :data:`OTHER` say, ``"pass"`` where they say nothing: an op that starts to be
refused, or to compute something else, fails here (``Tensor.repeat`` was refused by both exporters and counted
as a clean refusal by hand-run sweeps), and so does one that starts to pass (update the table)."""

from __future__ import annotations

import pytest
import torch

from converter.api import convert
from converter.errors import UnsupportedOpError
from tests.ops.harness import FnModule, assert_close
from tests.ops.op_db import DEFAULT_TOL, all_ops

_OPS = {o.name: o for o in all_ops()}


def _sample(info):
    dtypes = [d for d in info.dtypes if d == torch.float32] or [d for d in info.dtypes if d != torch.bfloat16]
    samples = info.samples(dtypes[0]) if dtypes else []
    return (dtypes[0], samples[0]) if samples else (None, None)


def _outcome(name: str, target: str) -> str:
    info = _OPS[name]
    dtype, s = _sample(info)
    tensors = tuple(a for a in s.args if isinstance(a, torch.Tensor))
    with torch.no_grad():
        want = info.fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in s.args], **s.kwargs)
    try:
        art = convert(FnModule(info.fn, s.args, s.kwargs).eval(), tensors, target=target)
        got = art(*tensors)
    except UnsupportedOpError:
        return "refused"
    except Exception as e:  # noqa: BLE001 (the outcome is the test's subject)
        return f"crash: {type(e).__name__}"
    leaves = lambda v: [x for x in torch.utils._pytree.tree_leaves(v) if hasattr(x, "shape")]  # noqa: E731
    got, want = leaves(got), leaves(want)
    if not tensors:  # (no torch input: the artifact answers in NumPy)
        got = [torch.from_numpy(g) if not isinstance(g, torch.Tensor) else g for g in got]
    rtol, atol = info.tol.get(dtype, DEFAULT_TOL.get(dtype, (0, 0)))
    try:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            tol = (max(rtol, 1e-4), max(atol, 1e-5)) if w.is_floating_point() else (0, 0)
            assert_close(g, w, *tol)
    except AssertionError:
        return "wrong"
    return "pass"


#: Refused by name, one clear UnsupportedOpError each (linalg decompositions beyond LU and Cholesky, complex inputs
#: (``fft_c2r``), conv with non-constant weights in LiteRT, ...). The ``while``/``scan`` lowerings (gcd, the Bessel
#: functions, the orthogonal polynomials, LDL, the incomplete gamma functions) export as loops.
REFUSED = {
    "onnx": frozenset({
        "adaptive_max_pool_backward", "conv_transpose", "convolution_backward", "fft_c2r",
        "fractional_max_pool_backward", "frexp", "geqrf", "grid_sampler_2d_backward", "grid_sampler_3d_backward",
        "hash_tensor", "linalg_eig", "linalg_eigh", "linalg_eigvals", "linalg_householder_product", "linalg_pinv",
        "linalg_qr", "linalg_svd", "max_pool_backward", "multi_margin_loss_backward",
        "multilabel_margin_loss_backward", "nextafter", "ormqr", "segment_reduce", "view_dtype",
    }),
    "litert": frozenset({
        "conv_transpose", "convolution_backward", "fft_c2r", "geqrf", "grid_sampler_2d_backward",
        "grid_sampler_3d_backward", "hash_tensor", "index_reduce", "int_mm", "linalg_eig", "linalg_eigh",
        "linalg_eigvals", "linalg_householder_product", "linalg_pinv", "linalg_qr", "linalg_svd", "nextafter",
        "ormqr", "scaled_mm", "scaled_mm_v2", "scatter_reduce", "view_dtype",
    }),
}
#: Documented runtime behaviour (README, Known differences).
OTHER = {
    ("decomposed_activations", "litert"): "wrong",
}


@pytest.mark.parametrize("target", ["onnx", "litert"])
@pytest.mark.parametrize("name", [n for n in _OPS if _sample(_OPS[n])[1] is not None])
def test_op_through_exporter_ends_as_expected(name, target):
    got = _outcome(name, target)
    want = OTHER.get((name, target)) or ("refused" if name in REFUSED[target] else "pass")
    assert got == want, f"{name} → {target}: {got} (expected {want})"
