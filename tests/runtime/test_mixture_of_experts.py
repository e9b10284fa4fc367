"""transformers' mixture-of-experts layers (the zoo's tiny Mixtral) on the tpu device and under
``torch.compile(backend="tpu")``: logits and gradients against PyTorch on the CPU.

Their expert layers take a different route on each: on the tpu device ``F.grouped_mm`` after counting
tokens per expert with ``histc`` of int32 expert ids (as on CUDA; the CPU's ``histc`` refuses integers);
traced on CPU tensors, transformers' own custom op ``transformers::grouped_mm_fallback`` and its backward.
"""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime
from examples.models import mixtral

#: float32 logits and gradients through two decoder layers: products in another order than the CPU's.
_TOL = dict(rtol=2e-5, atol=2e-6)


@pytest.fixture(scope="module")
def reference():
    """The model, its input, and PyTorch's CPU logits and gradients of one training loss."""
    model, (ids,) = mixtral()
    model.train()
    logits = model(ids)
    logits.pow(2).mean().backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    return model, ids, logits.detach(), grads


def _check(logits, model, want_logits, want_grads):
    torch.testing.assert_close(logits.detach().cpu(), want_logits, **_TOL)
    got = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert sorted(got) == sorted(want_grads)  # every expert that got tokens on the CPU gets a gradient here too
    for name, grad in got.items():
        torch.testing.assert_close(grad.cpu(), want_grads[name], **_TOL, msg=lambda m, n=name: f"{n}: {m}")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_mixtral_trains_on_the_device(reference, mode):
    model, ids, want_logits, want_grads = reference
    device_model = copy.deepcopy(model).to("tpu")
    with tpu_runtime.set_eager_mode(mode):
        logits = device_model(ids.to("tpu"))
        logits.pow(2).mean().backward()
        _check(logits, device_model, want_logits, want_grads)


def test_mixtral_compiles_whole_on_cpu_tensors(reference):
    # transformers' grouped-matmul op has a row: the model is one graph (fullgraph). Without the row the backend
    # decomposed the op into its implementation, whose ``offs.tolist()`` a graph cannot take: a graph break
    # around every expert layer, which then ran in PyTorch
    model, ids, want_logits, want_grads = reference
    local = copy.deepcopy(model)
    torch._dynamo.reset()
    logits = torch.compile(local, backend="tpu", fullgraph=True)(ids)
    logits.pow(2).mean().backward()
    _check(logits, local, want_logits, want_grads)
    torch._dynamo.reset()


def test_integer_histc_counts_as_accelerators_do():
    # CUDA's histc counts integer data (the CPU's raises): the bin of x is (x - min) * bins / (max - min),
    # the top edge in the last bin, values outside dropped; the counts have the input's dtype
    x = torch.tensor([0, 1, 1, 3, 3, 3, 5, -1], dtype=torch.int32)
    for mode in ("strict", "fused"):
        with tpu_runtime.set_eager_mode(mode):
            got = torch.histc(x.to("tpu"), bins=4, min=0, max=3)
            assert got.dtype == torch.int32
            assert got.cpu().tolist() == [1, 2, 0, 3]
