"""``torch.compile(backend="tpu")`` on CPU tensors: the graph runs through JAX, its gradients match PyTorch's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tpu_runtime  # noqa: F401  (registers the backend)


def test_compiled_attention_trains_on_cpu_tensors():
    # AOTAutograd records PyTorch's CPU attention kernel's backward (_scaled_dot_product_flash_attention_
    # for_cpu_backward) when it trains F.scaled_dot_product_attention on CPU tensors: it had no lowering
    torch._dynamo.reset()
    torch.manual_seed(0)

    def attend(q, k, v, mask):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask).pow(2).sum() + \
            F.scaled_dot_product_attention(q, k, v, is_causal=True).sum()

    q, k, v = (torch.randn(2, 2, 5, 4, requires_grad=True) for _ in range(3))
    mask = torch.randn(2, 1, 5, 5)
    attend(q, k, v, mask).backward()
    expected = [t.grad.clone() for t in (q, k, v)]
    for t in (q, k, v):
        t.grad = None
    torch.compile(attend, backend="tpu")(q, k, v, mask).backward()
    for got, want in zip((q.grad, k.grad, v.grad), expected):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
