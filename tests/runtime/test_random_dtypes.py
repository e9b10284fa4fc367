"""Random fills on the tpu device by dtype, as on the CPU: ``random_()``'s range per dtype, ``geometric_`` of
integer tensors, complex ``rand``/``randn``/``normal_``/``uniform_`` (both parts drawn), and the dtypes the CPU's
kernels refuse (``uniform_`` of an int tensor, ``random_`` of a complex one) refused with its error, without
drawing from the CPU's generator. Values differ from the CPU's by design (JAX's PRNG): ranges and moments are
compared."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime

N = 20000

#: dtype → the top of ``random_()``'s range on the CPU: [0, top].
_TOPS = {torch.bool: 1, torch.uint8: 255, torch.int8: 127, torch.int16: 32767, torch.float16: 2048,
         torch.bfloat16: 256, torch.float32: 2 ** 24, torch.int32: 2 ** 31 - 1}


@pytest.mark.parametrize("dtype", list(_TOPS), ids=str)
def test_random_without_a_range_covers_the_dtypes_range(dtype):
    top = _TOPS[dtype]
    got = torch.empty(N, dtype=dtype, device="tpu").random_().cpu()
    assert got.dtype == dtype
    values = got.double()
    assert values.min() >= 0 and values.max() <= top
    if top <= 2048:  # every value likely drawn: both ends reached
        assert values.min() == 0 and values.max() == top
    assert abs(values.mean() / top - 0.5) < 0.02
    assert torch.equal(values, values.floor())


def test_random_from_without_to_and_random_to():
    got = torch.empty(N, device="tpu").random_(5, None).cpu()
    assert got.min() >= 5 and got.max() <= 2 ** 24 and abs(got.mean() / 2 ** 24 - 0.5) < 0.02
    assert set(torch.empty(N, dtype=torch.int64, device="tpu").random_(-3, 3).cpu().tolist()) == set(range(-3, 3))
    assert set(torch.empty(N, device="tpu").random_(4).cpu().tolist()) == {0.0, 1.0, 2.0, 3.0}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.float32], ids=str)
def test_geometric_fills_integer_tensors_too(dtype, mode):
    with tpu_runtime.set_eager_mode(mode):
        got = torch.empty(N, dtype=dtype, device="tpu").geometric_(0.25).cpu()
    assert got.dtype == dtype
    values = got.double()
    assert values.min() >= 1 and abs(values.mean() - 4) < 0.15  # trials to the first success: mean 1/p
    assert abs(values.var() - 12) < 1.5  # (1 - p) / p^2


@pytest.mark.parametrize("dtype", [torch.complex64, torch.complex128], ids=str)
def test_complex_fills_draw_both_parts(dtype):
    z = torch.zeros(N, dtype=dtype, device="tpu")
    normal = z.clone().normal_(1.0, 2.0).cpu()
    for part in (normal.real, normal.imag):  # the CPU: mean in each part, std / sqrt(2) each
        assert abs(part.mean() - 1) < 0.05 and abs(part.std() - 2 ** 0.5) < 0.05
    uniform = z.clone().uniform_(-1, 3).cpu()
    for part in (uniform.real, uniform.imag):
        assert part.min() >= -1 and part.max() < 3 and abs(part.mean() - 1) < 0.05
    for made in (torch.randn(N, dtype=dtype, device="tpu"), torch.randn_like(z)):
        made = made.cpu()
        assert made.dtype == dtype
        assert abs(made.real.std() - 0.5 ** 0.5) < 0.02 and abs(made.imag.std() - 0.5 ** 0.5) < 0.02
    made = torch.rand(N, dtype=dtype, device="tpu").cpu()
    assert made.real.min() >= 0 and made.imag.max() < 1 and abs(made.imag.mean() - 0.5) < 0.02
    assert abs(torch.corrcoef(torch.stack([made.real, made.imag]))[0, 1]) < 0.05  # two draws, not one twice


_REFUSED = {
    "uniform_ int64": lambda d: torch.zeros(3, dtype=torch.int64, device=d).uniform_(),
    "uniform_ bool": lambda d: torch.zeros(3, dtype=torch.bool, device=d).uniform_(),
    "normal_ int32": lambda d: torch.zeros(3, dtype=torch.int32, device=d).normal_(),
    "random_ complex64": lambda d: torch.zeros(3, dtype=torch.complex64, device=d).random_(),
    "bernoulli_ complex64": lambda d: torch.zeros(3, dtype=torch.complex64, device=d).bernoulli_(0.5),
    "geometric_ bool": lambda d: torch.zeros(3, dtype=torch.bool, device=d).geometric_(0.5),
    "geometric_ complex64": lambda d: torch.zeros(3, dtype=torch.complex64, device=d).geometric_(0.5),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("name", list(_REFUSED))
def test_a_dtype_the_cpu_refuses_raises_its_error_without_drawing(name, mode):
    with pytest.raises(Exception) as cpu:
        _REFUSED[name]("cpu")
    state = torch.random.get_rng_state()
    with tpu_runtime.set_eager_mode(mode):
        with pytest.raises(cpu.type) as got:
            _REFUSED[name]("tpu").cpu()
    assert str(got.value) == str(cpu.value)
    assert torch.equal(torch.random.get_rng_state(), state)  # (asking the CPU drew from its generator: put back)
