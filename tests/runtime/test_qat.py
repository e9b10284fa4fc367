"""Quantization-aware training on the tpu device: torch.ao's ``FakeQuantize`` modules (observers and fake
quantization, ``converter/lowering/ops/fake_quant.py``) train as on the CPU."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import tpu_runtime
from converter.errors import UnsupportedOpError

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (torch.ao's deprecation notes)
    import torch.ao.quantization as tq


def _qat_model(qconfig) -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(tq.QuantStub(), nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), tq.DeQuantStub()).train()
    model.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tq.prepare_qat(model)


def _train(model, device, steps=4):
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(steps):
        loss = model(torch.randn(16, 8, generator=g).to(device)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, [t.detach().cpu() for t in (*model.parameters(), *model.buffers())]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_fake_quantize_modules_train_as_on_the_cpu(mode):
    # (every fake quantization op was missing: UnsupportedOpError at the first forward)
    want = _train(_qat_model(tq.default_qat_qconfig), "cpu")
    with tpu_runtime.set_eager_mode(mode):
        got = _train(_qat_model(tq.default_qat_qconfig), "tpu")
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    for g, w in zip(got[1], want[1], strict=True):  # weights, observers' min / max, scales and zero points
        torch.testing.assert_close(g, w, rtol=1e-5, atol=1e-6)


def test_the_fused_observer_of_the_default_qconfigs_names_the_qconfig_that_trains():
    model = _qat_model(tq.get_default_qat_qconfig("x86")).to("tpu")
    with pytest.raises(UnsupportedOpError, match=r"_fused_moving_avg_obs_fq_helper.* at .*test_qat\.py:\d+ .*"
                                                 r"torch\.ao\.quantization\.default_qat_qconfig"):
        model(torch.randn(2, 8).to("tpu"))
