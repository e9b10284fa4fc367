"""``torch.compile(backend="tpu")`` on CPU tensors: the graph runs through JAX, its gradients match PyTorch's."""

from __future__ import annotations

import torch
import torch.nn.functional as F

import tpu_runtime


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


def test_a_tpu_graph_reads_a_cpu_input_as_it_was_at_the_call():
    # a CPU input of a tpu graph (AdamW's step counts, when the step is compiled) is passed to the executable as a
    # copy: the graph may run after the call returns, when torch has written the tensor again
    torch._dynamo.reset()
    fn = torch.compile(lambda x, s: (x @ x.T).sum(0) * s, backend="tpu")
    x = torch.ones(64, 64).to("tpu")
    for mode in ("strict", "fused"):
        with tpu_runtime.set_eager_mode(mode):
            s = torch.tensor(2.0)
            out = fn(x, s)
            s.fill_(5.0)
            assert out.device.type == "tpu" and torch.equal(out.cpu(), torch.full((64,), 8192.0))
            assert torch.equal(fn(x, s).cpu(), torch.full((64,), 20480.0))
