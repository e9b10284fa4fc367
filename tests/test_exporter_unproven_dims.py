"""Dynamic dims torch takes for equal where jax cannot prove it (converter/lowering/unproven_dims.py): MPT's ALiBi
bias, a table sliced from ``max(0, len - k)`` and added to ``k`` scores, exported as transformers' exporter does
(runtime assertions deferred, every dim ``Dim.AUTO``)."""

from __future__ import annotations

import operator

import jax
import numpy as np
import pytest
import torch

from converter import convert
from converter.lowering.unproven_dims import UNDECIDED, coerced, dims_differ, dims_equal, logic


class _Alibi(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("bias", torch.randn(4, 1, 16, generator=torch.Generator().manual_seed(0)))

    def forward(self, scores: torch.Tensor) -> torch.Tensor:
        k = scores.shape[-1]
        return scores + self.bias[:, :, max(0, self.bias.size(2) - k):]


@pytest.fixture(scope="module")
def alibi() -> tuple[torch.nn.Module, torch.export.ExportedProgram]:
    model = _Alibi().eval()
    ep = torch.export.export(model, (torch.randn(1, 4, 1, 6),), dynamic_shapes=({3: torch.export.Dim.AUTO},),
                             prefer_deferred_runtime_asserts_over_guards=True)
    return model, ep


@pytest.mark.parametrize("target", ["tpu", "stablehlo", "onnx", "litert"])
def test_a_slice_torch_takes_for_the_scores_length_broadcasts_in_every_target(alibi, target):
    """jax cannot prove ``16 - max(16 - k, 0) == k`` (k may exceed the table): the bias is read at the scores'
    length, and torch's assertion ``Eq(k + Max(0, 16 - k), 16)`` lowers to nothing (it was refused as false)."""
    model, ep = alibi
    art = convert(ep, target=target)
    for k in (3, 11, 15):  # (torch asserts k != 16: its program took the slice to start past 0)
        x = torch.randn(1, 4, 1, k)
        got = art(x)
        np.testing.assert_allclose(np.asarray(got[0] if isinstance(got, tuple) else got), model(x).numpy(),
                                   rtol=1e-6, atol=1e-6)


def test_comparisons_of_dims_say_when_jax_cannot_decide():
    (s,) = jax.export.symbolic_shape("s")
    assert dims_equal(s + 1, 1 + s) is True and dims_equal(3, 3) is True and dims_equal(3, 4) is False
    assert dims_equal(s + 1, s) is False  # (provably different)
    undecided = s + jax.core.max_dim(0, 16 - s)
    assert dims_equal(undecided, 16) is UNDECIDED and dims_differ(undecided, 16) is UNDECIDED
    assert dims_differ(s, s + 2) is True
    assert logic(torch.sym_not, (UNDECIDED,)) is UNDECIDED
    assert logic(operator.and_, (UNDECIDED, False)) is False
    assert logic(operator.or_, (UNDECIDED, True)) is True
    with pytest.raises(TypeError, match="cannot decide is used as a value"):
        bool(UNDECIDED)


def test_static_sizes_that_differ_are_a_real_mismatch_not_coerced():
    assert coerced([jax.numpy.zeros((2, 3))], torch.empty(2, 4), {}) is None
    assert coerced([jax.numpy.zeros((2, 1))], torch.empty(2, 4), {}) is None  # (size 1 broadcasts)
