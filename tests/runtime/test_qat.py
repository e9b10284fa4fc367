"""Quantization-aware training on the tpu device: torch.ao's ``FakeQuantize`` modules and the fused observer of its
per-backend qconfigs (observers and fake quantization, ``converter/lowering/ops/fake_quant.py``) train as on the
CPU, and a model prepared with the fused observer converts to every target."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from torch import nn

import tpu_runtime
from converter import convert
from converter.api import build
from converter.errors import UnsupportedOpError
from tests.targets import ALL, one_capture

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # (torch.ao's deprecation notes)
    import torch.ao.quantization as tq


def _qat_model(qconfig, *layers: nn.Module) -> nn.Module:
    """``layers`` (default: an MLP 8 → 16 → 4) between a quant and a dequant stub, prepared for QAT."""
    torch.manual_seed(0)
    layers = layers or (nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    model = nn.Sequential(tq.QuantStub(), *layers, tq.DeQuantStub()).train()
    model.qconfig = qconfig
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return tq.prepare_qat(model)


def _conv_qat_model(qconfig) -> nn.Module:
    torch.manual_seed(0)
    return _qat_model(qconfig, nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Flatten(), nn.Linear(16, 4))


def _train_state(model, device, batch=(8, 3, 4, 4), step=None, steps=4):
    """Train ``model`` on ``device`` on random batches of shape ``batch`` (its observers frozen after two steps,
    as QAT recipes do); losses and every parameter and buffer."""
    model = model.to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    forward = step(model) if step else model
    g = torch.Generator().manual_seed(1)
    losses = []
    for i in range(steps):
        if i == 2:
            model.apply(tq.disable_observer)
        loss = forward(torch.randn(batch, generator=g).to(device)).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, {k: v.detach().cpu() for k, v in model.state_dict().items()}


def _assert_state_close(got, want):
    torch.testing.assert_close(got[0], want[0], rtol=1e-5, atol=1e-6)
    assert got[1].keys() == want[1].keys()
    for k in want[1]:  # weights, observers' running min / max (per channel: grown from empty), scales, zero points
        torch.testing.assert_close(got[1][k], want[1][k], rtol=1e-5, atol=1e-6, msg=k)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_fake_quantize_modules_train_as_on_the_cpu(mode):
    # (every fake quantization op was missing: UnsupportedOpError at the first forward)
    want = _train_state(_qat_model(tq.default_qat_qconfig), "cpu", (16, 8))
    with tpu_runtime.set_eager_mode(mode):
        got = _train_state(_qat_model(tq.default_qat_qconfig), "tpu", (16, 8))
    _assert_state_close(got, want)  # losses, weights, observers' min / max, scales and zero points


@pytest.mark.parametrize("backend", ["x86", "qnnpack"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_the_default_qat_qconfigs_train_as_on_the_cpu(backend, mode):
    # (their fused observer, _fused_moving_avg_obs_fq_helper, had no kernel: UnsupportedOpError at the first
    # forward; and its per-channel weight observer grows its empty running values, which the device refused)
    qconfig = tq.get_default_qat_qconfig(backend)
    want = _train_state(_conv_qat_model(qconfig), "cpu")
    with tpu_runtime.set_eager_mode(mode):
        got = _train_state(_conv_qat_model(qconfig), "tpu")
    assert got[1]["1.weight_fake_quant.scale"].shape == ((4,) if backend == "x86" else (1,))  # (qnnpack: per tensor)
    _assert_state_close(got, want)


def test_the_default_qat_qconfig_trains_under_torch_compile():
    qconfig = tq.get_default_qat_qconfig("x86")
    want = _train_state(_conv_qat_model(qconfig), "cpu")
    got = _train_state(_conv_qat_model(qconfig), "tpu", step=lambda m: torch.compile(m, backend="tpu"))
    _assert_state_close(got, want)


def _ranges() -> tuple[torch.Tensor, torch.Tensor]:
    """Observed ranges ``[lo, hi]`` across float32's magnitudes: straddling 0, positive, negative, empty, tiny (below
    the smallest scale), huge, inverted and infinite."""
    g = torch.Generator().manual_seed(0)
    pairs = torch.sort(torch.randn(20, 40, 2, generator=g) * 10.0 ** torch.arange(-30, 30, 3.0)[:, None, None]).values
    lo, hi = pairs[..., 0].flatten(), pairs[..., 1].flatten()
    special = torch.tensor([[0, 0], [0, 1e-6], [-1e-6, 0], [-1, 1], [-3, 1], [1e-45, 2e-45], [-1e38, 1e38], [0, 3e38],
                            [float("inf"), -float("inf")], [-float("inf"), 1], [2, 1], [-3e38, 3e38]])
    return (torch.cat([lo, lo.abs(), -hi.abs() - lo.abs(), special[:, 0]]),
            torch.cat([hi, hi.abs() + lo.abs(), -lo.abs(), special[:, 1]]))


@pytest.mark.parametrize("quant_min,quant_max", [(0, 255), (0, 127), (-128, 127), (-127, 127), (-8, 7)])
@pytest.mark.parametrize("symmetric", [False, True], ids=["affine", "symmetric"])
def test_the_fused_observers_scales_and_zero_points_are_the_cpus(quant_min, quant_max, symmetric):
    # fbgemm's ChooseQuantizationParams bit for bit, per row: float64 steps, the smallest scale, the symmetric
    # range's float32 quotients (XLA takes a division by one number as a product by its reciprocal) and the zero
    # point's ties (fbgemm adds the two error terms where ATen's copy subtracts them: at [-3, 1] on -127..127 the
    # CPU says 63, the difference 64)
    lo, hi = _ranges()
    inputs = (torch.randn(len(lo), 2), torch.tensor([0]), torch.tensor([1]), lo, hi, torch.ones(len(lo)),
              torch.zeros(len(lo), dtype=torch.int32))
    results = []
    for device in ("cpu", "tpu"):
        state = [t.clone().to(device) for t in inputs]
        out = torch.fused_moving_avg_obs_fake_quant(*state, 0.01, quant_min, quant_max, 0, True, symmetric)
        results.append([t.cpu() for t in (out, state[5], state[6])])
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True)


def _warm_x86_model() -> nn.Module:
    """A model prepared with the x86 QAT qconfig after one forward (its per-channel weight observers sized)."""
    model = _qat_model(tq.get_default_qat_qconfig("x86"))
    model(torch.randn(16, 8, generator=torch.Generator().manual_seed(2)))
    return model


@one_capture
def _x86_program():
    return _warm_x86_model(), (torch.randn(16, 8),)


@pytest.mark.xdist_group("qat-export")
@pytest.mark.parametrize("target", ALL)
def test_a_model_prepared_with_a_default_qat_qconfig_converts_and_carries_its_observers(target):
    # (the fused observer had no lowering: no such model converted)
    g = torch.Generator().manual_seed(3)
    inputs = [torch.randn(16, 8, generator=g) * s for s in (1.0, 4.0, 0.25)]
    model = _warm_x86_model()
    want = [model(x).detach() for x in inputs]  # (each call moves the observers: later outputs depend on them)
    artifact = build(_x86_program(), target=target)
    for x, w in zip(inputs, want):
        torch.testing.assert_close(torch.as_tensor(artifact(x)), w, rtol=1e-4, atol=1e-5)


def test_a_fresh_per_channel_observer_is_refused_with_what_to_do():
    model = _qat_model(tq.get_default_qat_qconfig("x86"))  # (its weight observers' running min / max are empty)
    with pytest.raises(UnsupportedOpError, match=r"_fused_moving_avg_obs_fq_helper.*run the model once before "):
        convert(model, (torch.randn(2, 8),), target="onnx")


class _ConvBnNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.q, self.dq = tq.QuantStub(), tq.DeQuantStub()
        self.conv, self.bn, self.relu = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU()
        self.conv2, self.bn2 = nn.Conv2d(8, 8, 3, stride=2), nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 4)

    def forward(self, x):
        x = self.bn2(self.conv2(self.relu(self.bn(self.conv(self.q(x))))))
        return self.dq(self.fc(x.mean((2, 3))))


def _qat_recipe(device):
    """torch.ao's eager QAT recipe: fuse conv-bn(-relu), prepare with the x86 qconfig, train (observers off after
    three steps, batch-norm statistics frozen after four), convert to an int8 model on the CPU."""
    import torch.ao.nn.intrinsic.qat as nniqat

    torch.manual_seed(0)
    model = tq.fuse_modules_qat(_ConvBnNet().train(), [["conv", "bn", "relu"], ["conv2", "bn2"]])
    model.qconfig = tq.get_default_qat_qconfig("x86")
    model = tq.prepare_qat(model).to(device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    for i in range(6):
        if i == 3:
            model.apply(tq.disable_observer)
        if i == 4:
            model.apply(nniqat.freeze_bn_stats)
        x, y = torch.randn(4, 3, 8, 8, generator=g).to(device), torch.randint(0, 4, (4,), generator=g).to(device)
        loss = nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return tq.convert(copy.deepcopy(model).cpu().eval())


def test_the_qat_recipe_trained_on_the_device_converts_to_the_cpus_int8_model():
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    want, got = _qat_recipe("cpu"), _qat_recipe("tpu")
    assert torch.equal(got(x), want(x))  # (the int8 model computes on its quantized weights and scales)
    assert torch.equal(got.conv.weight().int_repr(), want.conv.weight().int_repr())


def _calibrated(device):
    """torch.ao's post-training recipe with the x86 qconfig (histogram observers of activations): prepare, calibrate
    on ``device``, convert to an int8 model on the CPU (in place: see the README)."""
    torch.manual_seed(0)
    model = _ConvBnNet().eval()
    model.qconfig = tq.get_default_qconfig("x86")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = tq.prepare(model).to(device)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for _ in range(3):
            model(torch.randn(4, 3, 8, 8, generator=g).to(device))
    return tq.convert(model.cpu())


def test_calibration_on_the_device_gives_the_cpus_int8_model():
    x = torch.randn(2, 3, 8, 8, generator=torch.Generator().manual_seed(5))
    want, got = _calibrated("cpu"), _calibrated("tpu")
    assert torch.equal(got(x), want(x))
    assert (got.conv.scale, got.conv.zero_point) == (want.conv.scale, want.conv.zero_point)
