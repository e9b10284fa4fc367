"""``flex_attention``: score_mod / mask_mod lowered with the table and vectorized, on every target and torch.compile."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.nn.attention.flex_attention import create_block_mask, flex_attention

from tests.targets import ALL, assert_target_passed
from validators import validate

#: one worker: each mask's capture serves the four targets
pytestmark = pytest.mark.xdist_group("flex-attention")


def _causal_documents(b, h, q, kv):
    """Causal attention within documents of three tokens."""
    return (q // 3 == kv // 3) & (q >= kv)


def _odd_rows(b, h, q, kv):
    """Even query rows see nothing (fully masked rows: zero output, log-sum-exp -inf)."""
    return (q % 2 == 1) & (kv <= q)


class _Flex(torch.nn.Module):
    """A per-head ALiBi-like bias (a parameter the score_mod indexes), a block mask, grouped-query heads."""

    def __init__(self, mask) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.slopes = torch.nn.Parameter(torch.rand(4))
        self.mask = mask

    def forward(self, q, k, v):
        def alibi(score, b, h, qi, kv):
            return score - self.slopes[h] * (qi - kv).abs()

        mask = create_block_mask(self.mask, None, None, q.shape[2], k.shape[2], device="cpu")
        return flex_attention(q, k, v, score_mod=alibi, block_mask=mask, enable_gqa=True, return_lse=True)


def _inputs():
    g = torch.Generator().manual_seed(1)
    return torch.randn(2, 4, 8, 4, generator=g), torch.randn(2, 2, 8, 4, generator=g), torch.randn(2, 2, 8, 6,
                                                                                                  generator=g)


@pytest.fixture(scope="module", params=[_causal_documents, _odd_rows], ids=lambda m: m.__name__)
def report(request):
    """One validation of every target (one capture) per mask."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # (torch's note that flex_attention without torch.compile is slow)
        return validate(_Flex(request.param), _inputs(), targets=ALL, num_random_inputs=1, errors="report")


@pytest.mark.parametrize("target", ALL)
def test_flex_attention_exports_and_matches_pytorch(report, target):
    # it was refused: "this higher-order op is not supported (torch.cond, while_loop, scan and map are)"
    assert_target_passed(report, target)


def test_compiled_flex_attention_runs():
    def attend(q, k, v):
        return flex_attention(q, k, v, score_mod=lambda s, b, h, i, j: s * 0.5 + (i - j) * 0.01, enable_gqa=True)

    torch._dynamo.reset()
    q, k, v = _inputs()
    torch.testing.assert_close(torch.compile(attend, backend="tpu")(q, k, v), attend(q, k, v), rtol=1e-5, atol=1e-5)
