"""The SDPA lowering picks the flash-attention kernel by backend; an option forces either choice."""

import pytest
import torch
import torch.nn.functional as F

from converter import convert
from kernels import dispatch


class Attn(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)


@pytest.fixture(scope="module")
def qkv():
    torch.manual_seed(0)
    return tuple(torch.randn(1, 2, 20, 16) for _ in range(3))


@pytest.mark.parametrize("force,impl", [(None, "reference"), ("reference", "reference"), ("pallas", "pallas")])
def test_sdpa_lowering_records_kernel_choice_and_matches_torch(qkv, force, impl):
    dispatch.reset_choices()
    options = {} if force is None else {"kernels": force}
    tpu = convert(Attn(), qkv, target="tpu", **options)
    torch.testing.assert_close(tpu(*qkv), Attn()(*qkv), rtol=1e-4, atol=1e-5)
    chosen = {k[1].split(" ")[0] for k in dispatch.choices() if k[0] == "flash_attention"}
    assert chosen == {impl}, dispatch.choices()
