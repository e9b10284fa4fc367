"""Arguments the CPU's kernels refuse by value (probabilities, rates, a zero integer divisor, a random op's
parameters) raise the CPU's error on the tpu device too, where XLA alone sampled or computed a wrong value."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime

_NAN = float("nan")

#: name → fn(device), run to a sync point (``.cpu()``).
_CASES = {
    "multinomial negative": lambda d: torch.multinomial(torch.tensor([0.5, -0.1, 0.6], device=d), 1).cpu(),
    "multinomial nan": lambda d: torch.multinomial(torch.tensor([[0.5, 0.5], [_NAN, 1.0]], device=d), 1).cpu(),
    "multinomial inf": lambda d: torch.multinomial(torch.tensor([0.5, float("inf")], device=d), 1, True).cpu(),
    "multinomial zero row": lambda d: torch.multinomial(torch.tensor([[0.5, 0.5], [0.0, 0.0]], device=d), 1).cpu(),
    "bernoulli": lambda d: torch.bernoulli(torch.tensor([0.5, 1.5], device=d)).cpu(),
    "bernoulli nan": lambda d: torch.bernoulli(torch.tensor([_NAN], device=d)).cpu(),
    "bernoulli_ tensor p": lambda d: torch.empty(2, device=d).bernoulli_(torch.tensor([0.5, -1.0], device=d)).cpu(),
    "bernoulli_ float p": lambda d: torch.empty(2, device=d).bernoulli_(1.5).cpu(),
    "bernoulli p=": lambda d: torch.bernoulli(torch.zeros(2, device=d), p=-0.5).cpu(),
    "binary_cross_entropy input": lambda d: F.binary_cross_entropy(torch.tensor([0.5, 1.5], device=d),
                                                                   torch.ones(2, device=d)).cpu(),
    "binary_cross_entropy target": lambda d: F.binary_cross_entropy(torch.tensor([0.5], device=d),
                                                                    torch.tensor([2.0], device=d)).cpu(),
    "poisson": lambda d: torch.poisson(torch.tensor([1.0, -1.0], device=d)).cpu(),
    "normal std": lambda d: torch.normal(torch.zeros(2, device=d), torch.tensor([1.0, -1.0], device=d)).cpu(),
    "normal std nan": lambda d: torch.normal(0.0, torch.tensor([_NAN], device=d)).cpu(),
    "floor_divide": lambda d: (torch.tensor([1, 2], device=d) // torch.tensor([1, 0], device=d)).cpu(),
    "remainder by 0": lambda d: (torch.tensor([1, 2], device=d) % 0).cpu(),
    "scalar remainder": lambda d: (5 % torch.tensor([1, 0], device=d)).cpu(),
    "fmod_": lambda d: torch.tensor([1, 2], device=d).fmod_(torch.tensor(0, device=d)).cpu(),
    "div rounding": lambda d: torch.div(torch.tensor([4, 6], device=d), torch.tensor([2, 0], device=d),
                                        rounding_mode="trunc").cpu(),
    "uniform_": lambda d: torch.empty(3, device=d).uniform_(2, 1).cpu(),
    "random_": lambda d: torch.empty(3, device=d).random_(5, 2).cpu(),
    "random_ to": lambda d: torch.empty(3, device=d).random_(0).cpu(),
    "geometric_": lambda d: torch.empty(3, device=d).geometric_(1.5).cpu(),
    "geometric_ int": lambda d: torch.empty(3, dtype=torch.int64, device=d).geometric_(0.0).cpu(),
    "log_normal_": lambda d: torch.empty(3, device=d).log_normal_(0, -1).cpu(),
    "cauchy_": lambda d: torch.empty(3, device=d).cauchy_(0, -1.5).cpu(),
}


@pytest.mark.parametrize("mode", ["strict", "fused", "debug"])
@pytest.mark.parametrize("name", list(_CASES))
def test_a_value_the_cpu_refuses_raises_its_error(name, mode):
    with pytest.raises(RuntimeError) as cpu:
        _CASES[name]("cpu")
    with tpu_runtime.set_eager_mode(mode):
        with pytest.raises(cpu.type) as got:
            _CASES[name]("tpu")
        assert str(got.value) == str(cpu.value)
        tpu_runtime.sync()  # nothing left pending


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_values_in_range_pass(mode):
    with tpu_runtime.set_eager_mode(mode):
        torch.manual_seed(0)
        p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.0, 0.5]], device="tpu")
        assert torch.multinomial(p, 1).cpu()[0].item() == 1
        assert torch.bernoulli(torch.tensor([0.0, 1.0], device="tpu")).cpu().tolist() == [0.0, 1.0]
        bce = F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.3], device="tpu"), torch.tensor([0.0, 1.0, 1.0],
                                                                                            device="tpu"))
        torch.testing.assert_close(bce.cpu(), F.binary_cross_entropy(torch.tensor([0.0, 1.0, 0.3]),
                                                                     torch.tensor([0.0, 1.0, 1.0])))
        assert torch.poisson(torch.zeros(2, device="tpu")).cpu().tolist() == [0.0, 0.0]
        assert torch.normal(torch.ones(2, device="tpu"), torch.zeros(2, device="tpu")).cpu().tolist() == [1.0, 1.0]
        assert (torch.tensor([7, -7], device="tpu") // torch.tensor([2, 2], device="tpu")).cpu().tolist() == [3, -4]
        assert (torch.tensor([1.0], device="tpu") // 0).cpu().isinf().all()  # (floats: no error, as on the CPU)
        assert (torch.tensor([5, 6], device="tpu") % 4).cpu().tolist() == [1, 2]
        torch.empty(2, device="tpu").uniform_(1, 1).random_(3, 4).log_normal_(0, 1)
        tpu_runtime.sync()
