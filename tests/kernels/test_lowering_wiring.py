"""The SDPA lowering picks the flash-attention kernel by backend; an option forces either choice."""

import numpy as np
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


class PlainAttn(torch.nn.Module):
    def forward(self, q, k, v):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("force", ["reference", "pallas"])
def test_sdpa_over_no_keys_gives_torchs_zeros_with_either_kernel(force):
    # (an empty KV cache: the reference body's max over no keys raised, and the Pallas kernel's zero-sized blocks)
    q, kv = torch.randn(1, 2, 3, 16), torch.randn(1, 2, 0, 16)
    want = PlainAttn()(q, kv, kv)
    got = convert(PlainAttn(), (q, kv, kv), target="tpu", kernels=force)(q, kv, kv)
    assert got.shape == want.shape and torch.equal(got, want) and not want.any()


class Norms(torch.nn.Module):
    """LayerNorm over two trailing dims, then RMSNorm over the last one."""

    def __init__(self):
        super().__init__()
        self.ln = torch.nn.LayerNorm((3, 8))
        self.rms = torch.nn.RMSNorm(8, eps=1e-6)
        with torch.no_grad():
            for p in (self.ln.weight, self.ln.bias, self.rms.weight):
                p.uniform_(0.5, 1.5)

    def forward(self, x):
        return self.rms(self.ln(x) * 2.0)


@pytest.fixture(scope="module")
def norm_case():
    torch.manual_seed(0)
    return Norms().eval(), (torch.randn(2, 5, 3, 8),)


def _impls(kernel):
    return {k[1].split(" ")[0] for k in dispatch.choices() if k[0] == kernel}


@pytest.mark.parametrize("force,impl", [(None, "reference"), ("reference", "reference"), ("pallas", "pallas")])
def test_norm_lowerings_record_kernel_choice_and_match_torch(norm_case, force, impl):
    model, args = norm_case
    dispatch.reset_choices()
    options = {} if force is None else {"kernels": force}
    tpu = convert(model, args, target="tpu", **options)
    torch.testing.assert_close(tpu(*args), model(*args), rtol=1e-5, atol=1e-5)
    assert _impls("layer_norm") == {impl} and _impls("rms_norm") == {impl}, dispatch.choices()


def test_exporters_trace_the_portable_reference(norm_case):
    model, args = norm_case
    dispatch.reset_choices()
    art = convert(model, args, target="litert")
    np.testing.assert_allclose(art(*args).numpy(), model(*args).detach().numpy(), rtol=1e-4, atol=1e-5)
    reasons = {k[2] for k in dispatch.choices() if k[0] in ("layer_norm", "rms_norm")}
    assert reasons == {"litert export: portable reference"}, dispatch.choices()


def test_dynamic_shapes_fall_back_visibly_and_forcing_pallas_there_is_an_error(norm_case, tmp_path):
    # The tpu target compiles per concrete signature (static shapes); a shape-polymorphic
    # StableHLO export keeps the batch symbolic, which the kernels' grids cannot take.
    model, args = norm_case
    batch = torch.export.Dim("batch", min=1, max=8)
    dispatch.reset_choices()
    art = convert(model, args, target="stablehlo", dynamic_shapes=({0: batch},))
    art.save(tmp_path / "m")
    assert any(k[0] == "rms_norm" and k[2].startswith("dynamic shape") for k in dispatch.choices())
    with pytest.raises(Exception, match="force='pallas'"):
        convert(model, args, target="stablehlo", dynamic_shapes=({0: batch},), kernels="pallas")
