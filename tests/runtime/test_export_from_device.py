"""A model trained on the tpu device exports as it is: convert() and validate() take it and tpu sample inputs."""

from __future__ import annotations

import pytest
import torch

from converter import convert
from validators import validate


class _Scaled(torch.nn.Module):
    """A Linear, a buffer and a plain tensor attribute (``.to()`` does not move the last)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(4, 3)
        self.register_buffer("shift", torch.tensor([0.5, -1.0, 2.0]))
        self.scale = torch.tensor([2.0, 3.0, 4.0])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.lin(x)) * self.scale + self.shift


@pytest.fixture(scope="module")
def trained():
    """The model after one SGD step on the tpu device, and a CPU input."""
    model = _Scaled().to("tpu")
    model.scale = model.scale.to("tpu")
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    model(x.to("tpu")).pow(2).sum().backward()
    opt.step()
    return model, x


@pytest.mark.parametrize("target", ["tpu", "onnx", "litert"])
def test_a_model_on_the_device_converts(trained, target):
    # torch.export failed: "Attempted to set the storage of a tensor on device tpu:0 to a storage on different
    # device meta"
    model, x = trained
    want = model(x.to("tpu")).detach().cpu()
    for sample in (x, x.to("tpu")):
        got = convert(model, (sample,), target=target)(x)
        torch.testing.assert_close(torch.as_tensor(got).cpu(), want, rtol=1e-5, atol=1e-5)
    assert {t.device.type for t in (*model.parameters(), model.shift, model.scale)} == {"tpu"}  # not moved


@pytest.mark.parametrize("target", ["tpu", "stablehlo", "onnx", "litert"])
def test_every_artifact_takes_tpu_tensors_as_inputs(trained, target):
    # (the StableHLO module raised "can't convert tpu:0 device type tensor to numpy": a tpu tensor's class is
    # tpu_runtime's, not torch's, and it took the NumPy path)
    model, x = trained
    art = convert(model, (x,), target=target)
    on_tpu = torch.randn(4, 5, generator=torch.Generator().manual_seed(2)).to("tpu").t()  # (a transposed view)
    want = model(on_tpu).detach().cpu()
    got = art(on_tpu)
    assert isinstance(got, torch.Tensor)  # (ONNX and LiteRT answered tpu inputs in NumPy: torch in, torch out)
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_validate_checks_a_model_on_the_device_against_pytorch_on_the_cpu(trained):
    model, x = trained
    report = validate(model, (x.to("tpu"),), targets=("tpu", "onnx"), inputs=[(x.to("tpu") * 2,)],
                      num_random_inputs=1)
    assert report.passed and len(report.inputs) == 3, [(t.target, t.status, t.message) for t in report.targets]


def test_torch_export_takes_a_model_on_the_device_as_a_cuda_one():
    # PyTorch's fake-tensor conversion saw a tpu tensor and the payload it flattens into share one storage object,
    # took the payload for an alias and failed to set a meta storage on the tpu tensor (the error above). (A plain
    # tensor attribute on the device, ``_Scaled.scale``, still fails in torch.export's tracer.)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Tanh()).eval().to("tpu")
    x = torch.randn(5, 4).to("tpu")
    program = torch.export.export(model, (x,))
    assert "aten.linear" in program.graph_module.code and "batch_norm" in program.graph_module.code
    torch.testing.assert_close(program.module()(x).detach().cpu(), model(x).detach().cpu())


def test_a_converted_model_moves_to_the_device_while_its_artifact_lives():
    # (torch.export's fake-tensor mode kept a weak reference to each parameter, and torch.utils.swap_tensors refuses
    # such a tensor: model.to("tpu") raised "Couldn't swap Linear.weight" after a convert() or validate())
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.LayerNorm(3))
    x = torch.randn(5, 4, generator=torch.Generator().manual_seed(3))
    art = convert(model, (x,), target="stablehlo")
    want = model(x).detach()
    model.to("tpu")
    torch.testing.assert_close(model(x.to("tpu")).detach().cpu(), want, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(torch.as_tensor(art(x)), want, rtol=1e-6, atol=1e-6)
