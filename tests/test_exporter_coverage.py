"""Every op of the op table through the ONNX and LiteRT exporters: one sample per op (the first of its first
dtype that is not bfloat16), captured once for both exporters, converted, run in ONNX Runtime / the LiteRT
Interpreter and compared with PyTorch at the op's tolerance (at least 1e-4).

Each (op, target) must end as :data:`REFUSED` and :data:`OTHER` say, ``"pass"`` where they say nothing: an op that starts to be
refused, or to compute something else, fails here (``Tensor.repeat`` was refused by both exporters and counted
as a clean refusal by hand-run sweeps), and so does one that starts to pass (update the table)."""

from __future__ import annotations

import functools

import pytest
import torch

from converter.api import build
from converter.errors import UnsupportedOpError
from tests.ops.harness import assert_close
from tests.ops.op_db import DEFAULT_TOL, all_ops
from tests.targets import one_capture

_OPS = {o.name: o for o in all_ops()}


def _sample(info):
    dtypes = [d for d in info.dtypes if d == torch.float32] or [d for d in info.dtypes if d != torch.bfloat16]
    samples = info.samples(dtypes[0]) if dtypes else []
    return (dtypes[0], samples[0]) if samples else (None, None)


def _leaves(value) -> list:
    """The array leaves of an output (tensors, or NumPy arrays where the artifact answers in NumPy)."""
    return [x for x in torch.utils._pytree.tree_leaves(value) if hasattr(x, "shape")]


def _case(name: str):
    """``(info, dtype, sample, tensor inputs, torch's output leaves)`` of ``name``'s first sample."""
    info = _OPS[name]
    dtype, s = _sample(info)
    tensors = tuple(a for a in s.args if isinstance(a, torch.Tensor))
    with torch.no_grad():
        want = info.fn(*[a.clone() if isinstance(a, torch.Tensor) else a for a in s.args], **s.kwargs)
    return info, dtype, s, tensors, _leaves(want)


def _matches(info, dtype, got: list, want: list) -> bool:
    """Each output at the op's tolerance (at least 1e-4 relative, 1e-5 absolute), integers exactly."""
    got = [torch.from_numpy(g) if not isinstance(g, torch.Tensor) else g for g in got]
    rtol, atol = info.tol.get(dtype, DEFAULT_TOL.get(dtype, (0, 0)))
    try:
        assert len(got) == len(want)
        for g, w in zip(got, want):
            tol = (max(rtol, 1e-4), max(atol, 1e-5)) if w.is_floating_point() else (0, 0)
            assert_close(g, w, *tol)
    except AssertionError:
        return False
    return True


def _outcome(name: str, target: str) -> str:
    """``name``'s first sample converted alone for ``target``: "pass", "refused", "wrong" or "crash: ..."."""
    info, dtype, _, tensors, want = _case(name)
    try:
        got = build(_program((name,)), target=target)(*tensors)
    except UnsupportedOpError:
        return "refused"
    except Exception as e:  # noqa: BLE001 (the outcome is the test's subject)
        return f"crash: {type(e).__name__}"
    return "pass" if _matches(info, dtype, _leaves(got), want) else "wrong"


class _Group(torch.nn.Module):
    """Several ops' samples as one model: each op on its own inputs, the tensor leaves of all outputs in order."""

    def __init__(self, cases: list):
        super().__init__()
        self.cases = cases

    def forward(self, *tensors: torch.Tensor):
        it, outs = iter(tensors), []
        for info, _, s, _, _ in self.cases:
            args = [next(it) if isinstance(a, torch.Tensor) else a for a in s.args]
            outs.extend(x for x in torch.utils._pytree.tree_leaves(info.fn(*args, **s.kwargs))
                        if isinstance(x, torch.Tensor))
        return tuple(outs)


@one_capture
def _program(names: tuple):
    """``names``' samples as one model, captured once for both targets (raises what the capture raised)."""
    cases = [_case(n) for n in names]
    return _Group(cases).eval(), tuple(t for c in cases for t in c[3])


def _group_passes(names: tuple, target: str) -> bool:
    """Whether ``names``' samples, converted as one model and run once, all match torch."""
    cases = [_case(n) for n in names]
    tensors = tuple(t for c in cases for t in c[3])
    try:
        got = _leaves(build(_program(names), target=target)(*tensors))
    except Exception:  # noqa: BLE001 (the halves say which op it was)
        return False
    if len(got) != sum(len(c[4]) for c in cases):
        return False
    k = 0
    for info, dtype, _, _, want in cases:
        if not _matches(info, dtype, got[k:k + len(want)], want):
            return False
        k += len(want)
    return True


@functools.lru_cache(maxsize=None)
def _outcomes(names: tuple, target: str) -> dict:
    """``{name: outcome}``: one conversion for ops that all pass; halves, then single ops, where they do not."""
    if len(names) == 1:
        return {names[0]: _outcome(names[0], target)}
    if _group_passes(names, target):
        return dict.fromkeys(names, "pass")
    half = len(names) // 2
    return {**_outcomes(names[:half], target), **_outcomes(names[half:], target)}


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


def _expected(name: str, target: str) -> str:
    return OTHER.get((name, target)) or ("refused" if name in REFUSED[target] else "pass")


#: Ops expected to pass in both exporters are converted in chunks of this many (one capture for both targets and
#: one file per target and chunk: the suite's time); a chunk with a failure is halved until each op that fails is
#: converted alone. Every other op is captured alone, once for both targets.
CHUNK = 24
_TARGETS = ("onnx", "litert")
_NAMES = sorted(n for n in _OPS if _sample(_OPS[n])[1] is not None)


def _params():
    both = [n for n in _NAMES if all(_expected(n, t) == "pass" for t in _TARGETS)]
    chunks = {n: tuple(both[i - i % CHUNK:i - i % CHUNK + CHUNK]) for i, n in enumerate(both)}
    for target in _TARGETS:
        for name in _NAMES:
            chunk = chunks.get(name, (name,))
            yield pytest.param(name, target, chunk, id=f"{name}-{target}",
                               marks=pytest.mark.xdist_group(f"coverage-{chunk[0]}"))


@pytest.mark.parametrize("name,target,chunk", list(_params()))
def test_op_through_exporter_ends_as_expected(name, target, chunk):
    got = _outcomes(chunk, target)[name]
    want = _expected(name, target)
    assert got == want, f"{name} → {target}: {got} (expected {want})"
