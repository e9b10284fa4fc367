"""``torch.autocast("tpu")``: CUDA's mixed-precision policies on the tpu device, against CPU autocast."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime


def _model() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 4))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
def test_autocast_forward_and_backward_match_cpu_autocast(dtype):
    model = _model()
    tpu = copy.deepcopy(model).to("tpu")
    x, target = torch.randn(5, 8), torch.tensor([0, 1, 2, 3, 0])
    with torch.autocast("cpu", dtype=dtype):
        out = model(x)
        loss = F.cross_entropy(out, target)
    with torch.autocast("tpu", dtype=dtype):
        tout = tpu(x.to("tpu"))
        tloss = F.cross_entropy(tout, target.to("tpu"))
    assert tout.dtype == out.dtype == dtype and tloss.dtype == loss.dtype == torch.float32
    torch.testing.assert_close(tloss.cpu(), loss, rtol=1e-3, atol=1e-3)
    loss.backward()
    tloss.backward()
    for p, q in zip(tpu.parameters(), model.parameters()):
        assert p.grad.dtype == torch.float32
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=2e-2, atol=2e-3)


def test_autocast_policies():
    a = torch.randn(3, 3).to("tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        b = a @ a  # lower precision
        assert b.dtype == torch.bfloat16
        assert torch.softmax(b, -1).dtype == torch.float32  # float32 policy
        assert torch.cat([a, b]).dtype == torch.float32  # promote to the widest
        assert (a.double() @ a.double()).dtype == torch.float64  # float64 is left alone
        assert (a + b).dtype == torch.float32  # not listed: ordinary type promotion
    assert (a @ a).dtype == torch.float32  # outside the region nothing is cast


def test_autocast_training_in_fused_eager_and_compiled_forward_match_cpu():
    model = _model()
    x, y = torch.randn(5, 8), torch.randn(5, 4)

    def train(m, device, mode):
        opt = torch.optim.AdamW(m.parameters(), lr=0.01)
        losses = []
        with tpu_runtime.set_eager_mode(mode):
            for _ in range(3):
                with torch.autocast(device, dtype=torch.bfloat16):
                    loss = F.mse_loss(m(x.to(device)).float(), y.to(device))
                opt.zero_grad()
                loss.backward()
                opt.step()
                losses.append(loss.item())
        return losses

    want = train(copy.deepcopy(model), "cpu", "strict")
    assert train(copy.deepcopy(model).to("tpu"), "tpu", "fused") == pytest.approx(want, rel=1e-3)
    compiled = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    with torch.autocast("tpu", dtype=torch.bfloat16):
        out = compiled(x.to("tpu"))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        ref = model(x)
    assert out.dtype == torch.bfloat16
    torch.testing.assert_close(out.float().cpu(), ref.float(), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("fused", [False, True], ids=["adamw", "adamw-fused"])
def test_grad_scaler_unscales_skips_overflow_and_updates_the_scale_as_on_cpu(fused):
    torch.manual_seed(0)
    base, x = torch.nn.Linear(8, 4), torch.randn(5, 8)
    runs = {}
    for device in ("cpu", "tpu"):
        model = copy.deepcopy(base).to(device)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, fused=fused)
        scaler = torch.amp.GradScaler(device, init_scale=2.0 ** 16, growth_interval=2)
        scales = []
        for step in range(5):
            with torch.autocast(device, dtype=torch.float16):
                loss = model(x.to(device)).float().pow(2).mean() * (1e30 if step == 1 else 1.0)  # step 1 overflows
            opt.zero_grad()
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            scales.append(scaler.get_scale())
        runs[device] = scales, model.weight.detach().cpu()
    assert runs["tpu"][0] == runs["cpu"][0] and runs["cpu"][0][1] == 2.0 ** 15  # backed off, then grew
    torch.testing.assert_close(runs["tpu"][1], runs["cpu"][1], rtol=1e-5, atol=1e-6)
