"""``F.scaled_dot_product_attention`` on tpu tensors: the fused overrideable op (values, gradients, the CPU's
output layout) and torch's composite where the fused op does not apply."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

import tpu_runtime

B, L, S, H, E = 2, 5, 6, 3, 4


def _run(device, fn, tensors):
    leaves = [t.to(device, copy=True).requires_grad_(t.is_floating_point()) for t in tensors]
    out = fn(*leaves)
    (out * torch.linspace(-1, 1, out.numel()).view(out.shape).to(device)).sum().backward()
    return out, [out.detach().cpu()] + [t.grad.cpu() for t in leaves if t.is_floating_point()]


def _heads(x, n):
    return x.view(B, n, H, -1).transpose(1, 2)  # (B, H, n, E) laid out as (B, n, H, E), as models make it


_MASK = torch.rand(L, S, generator=torch.Generator().manual_seed(3)) > 0.4
_MASK[1] = False  # a fully masked row gives zeros


@pytest.mark.parametrize("case", ["plain", "causal", "bool_mask", "float_mask", "scale"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_sdpa_runs_one_fused_op_with_the_cpu_values_gradients_and_layout(case, mode):
    # the output is laid out as the query, as torch's CPU kernel lays it out: the transpose back and .view() of
    # the usual head split works (it raised: the output was dense); one op forward and one backward
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(B, L, H * E, generator=g), torch.randn(B, S, H * E, generator=g), \
        torch.randn(B, S, H * E, generator=g)
    bias = torch.randn(B, 1, L, S, generator=g)

    def attend(q, k, v):
        kw = {"causal": {"is_causal": True}, "bool_mask": {"attn_mask": _MASK.to(q.device)},
              "float_mask": {"attn_mask": bias.to(q.device)}, "scale": {"scale": 0.3}}.get(case, {})
        out = F.scaled_dot_product_attention(_heads(q, L), _heads(k, S), _heads(v, S), **kw)
        assert out.stride() == (L * H * E, E, H * E, 1)
        return out.transpose(1, 2).view(B, L, H * E)

    tensors = [q, k, v]
    _, want = _run("cpu", attend, tensors)
    with tpu_runtime.set_eager_mode(mode):
        out, got = _run("tpu", attend, tensors)
    assert out.grad_fn.next_functions[0][0].next_functions[0][0].name() == \
        "ScaledDotProductFusedAttentionOverrideableBackward0"
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_, w, rtol=1e-4, atol=1e-5)


def _plain(q, k, v, **kw):
    return F.scaled_dot_product_attention(q, k, v, **kw)


def _math_only(q, k, v):
    with sdpa_kernel([SDPBackend.MATH]):
        return F.scaled_dot_product_attention(q, k, v)


@pytest.mark.parametrize("case", ["3d", "gqa", "math_only", "bfloat16", "value_head_size", "mask_with_grad"])
def test_sdpa_other_calls_match_the_cpu(case):
    # 3-d inputs, a value head size of its own, a mask that requires a gradient, sdpa_kernel(MATH): torch's
    # composite (a dense output, as the CPU's math path gives); grouped-query heads and bfloat16: the fused op
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(B, H, n, E, generator=g) for n in (L, S, S))
    fn, tensors, tol = _plain, [q, k, v], {}
    if case == "3d":
        tensors = [q[0], k[0], v[0]]
    elif case == "gqa":
        tensors = [q, k[:, :1], v[:, :1]]
        fn = lambda q, k, v: _plain(q, k, v, enable_gqa=True)  # noqa: E731
    elif case == "math_only":
        fn = _math_only
    elif case == "mask_with_grad":
        tensors = [q, k, v, torch.randn(B, 1, L, S, generator=g)]
        fn = lambda q, k, v, m: _plain(q, k, v, attn_mask=m)  # noqa: E731
    elif case == "value_head_size":
        tensors = [q, k, torch.randn(B, H, S, E + 3, generator=g)]
    else:
        fn = lambda q, k, v: _plain(q.bfloat16(), k.bfloat16(), v.bfloat16()).float()  # noqa: E731
        tol = {"rtol": 3e-2, "atol": 3e-2}
    _, want = _run("cpu", fn, tensors)
    out, got = _run("tpu", fn, tensors)
    assert out.stride() == _run("cpu", fn, tensors)[0].stride()
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_, w, **tol)


def test_sdpa_takes_and_refuses_what_the_cpu_does():
    # the CPU's fused kernel takes is_causal with a mask (its math path refuses it); a 1-d mask raises the IndexError
    # of its mask check; mismatched dtypes raise the composite's error; only the efficient backend on: no backend
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(B, n, H, E, generator=g).transpose(1, 2) for n in (L, S, S))
    mask = torch.randn(L, S, generator=g)
    want = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=True)
    got = F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), attn_mask=mask.to("tpu"),
                                         is_causal=True)
    torch.testing.assert_close(got.cpu(), want)
    with pytest.raises(IndexError, match="Dimension out of range"):
        F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"), attn_mask=torch.ones(S).to("tpu"))
    with pytest.raises(RuntimeError, match="to have the same dtype"):
        F.scaled_dot_product_attention(q.to("tpu"), k.double().to("tpu"), v.to("tpu"))
    with sdpa_kernel([SDPBackend.EFFICIENT_ATTENTION]), pytest.raises(RuntimeError, match="No viable backend"):
        F.scaled_dot_product_attention(q.to("tpu"), k.to("tpu"), v.to("tpu"))


@pytest.mark.parametrize("case", ["batch_broadcast", "mask_3d", "kv_heads_differ", "empty_keys"])
def test_sdpa_calls_the_cpu_runs_on_its_math_path_match_it(case):
    # the fused op's conditions are the CPU fused kernel's: batch sizes that broadcast, a 3-d mask, grouped heads
    # whose key and value counts differ and empty key sequences take torch's composite, as they take the CPU's math
    g = torch.Generator().manual_seed(4)
    qkv = {"batch_broadcast": ((1, H, L), (B, H, S), (B, H, S)), "kv_heads_differ": ((B, 6, L), (B, 3, S), (B, 1, S)),
           "empty_keys": ((B, H, L), (B, H, 0), (B, H, 0))}.get(case, ((B, H, L), (B, H, S), (B, H, S)))
    tensors = [torch.randn(b, n, h, E, generator=g).transpose(1, 2) for b, h, n in qkv]
    mask = torch.randn(H, L, S, generator=g) if case == "mask_3d" else None

    def fn(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=None if mask is None else mask.to(q.device),
                                              enable_gqa=case == "kv_heads_differ")

    want_out, want = _run("cpu", fn, tensors)
    out, got = _run("tpu", fn, tensors)
    assert out.stride() == want_out.stride()
    for g_, w in zip(got, want):
        torch.testing.assert_close(g_, w, rtol=1e-4, atol=1e-5)


def test_sdpa_gradients_are_laid_out_as_on_the_cpu():
    # the CPU's fused backward returns each gradient as (B, L, H, E) transposed, whatever its input's layout
    g = torch.Generator().manual_seed(5)
    grads = {}
    for d in ("cpu", "tpu"):
        q, k, v = (torch.randn(B, H, n, E, generator=g).to(d).requires_grad_() for n in (L, S, S))
        out = F.scaled_dot_product_attention(q, k, v)
        grads[d] = torch.autograd.grad(out.sum(), (q, k, v))
    for got, want in zip(grads["tpu"], grads["cpu"]):
        assert got.stride() == want.stride()


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_sdpa_in_inference_mode_takes_the_fused_op_and_the_cpu_layout(mode):
    # inference mode skips the autograd keys: the call reaches the tensors' own dispatch, which takes the fused op
    # too (it ran torch's composite there, whose dense output refused the usual .view())
    x = torch.randn(B, L, H * E, generator=torch.Generator().manual_seed(5))
    with torch.inference_mode():
        want = F.scaled_dot_product_attention(_heads(x, L), _heads(x, L), _heads(x, L), is_causal=True)
        with tpu_runtime.set_eager_mode(mode):
            t = x.to("tpu")
            got = F.scaled_dot_product_attention(_heads(t, L), _heads(t, L), _heads(t, L), is_causal=True)
            assert got.stride() == want.stride() == (L * H * E, E, H * E, 1)
            torch.testing.assert_close(got.transpose(1, 2).view(B, L, H * E).cpu(),
                                       want.transpose(1, 2).view(B, L, H * E), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_sdpa_row_masked_with_a_large_finite_number_averages_the_values_as_on_the_cpu(mode):
    """A query row whose additive mask is ``finfo.min`` everywhere (Hugging Face's fill: Falcon's alibi mask, a
    left-padded row) gets equal weights, the mean of V, as on the CPU (``exp(s - logsumexp(s))`` gave each weight 1:
    ``max + log(n)`` rounds back to ``max``); its gradients are the CPU's math path's (the CPU's flash kernel's
    backward has that rounding itself: 1.0 off a float64 reference where the math path and ours are ~4e-8 off)."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 1, 2, 8), torch.randn(1, 1, 16, 8), torch.randn(1, 1, 16, 8)
    mask = torch.zeros(1, 1, 2, 16)
    mask[..., 0, :] = torch.finfo(torch.float32).min
    ins = [t.clone().requires_grad_() for t in (q, k, v)]
    with sdpa_kernel(SDPBackend.MATH):
        want = F.scaled_dot_product_attention(*ins, attn_mask=mask)
    want.square().sum().backward()
    with tpu_runtime.set_eager_mode(mode):
        dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
        got = F.scaled_dot_product_attention(*dev, attn_mask=mask.to("tpu"))
        got.square().sum().backward()
        torch.testing.assert_close(got.detach().cpu(), want.detach(), atol=1e-5, rtol=1e-5)
        for a, b in zip(dev, ins):
            torch.testing.assert_close(a.grad.cpu(), b.grad, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["causal", "float_mask", "finfo_min_row"])
def test_debug_eager_compares_the_fused_attention_ops_with_the_cpu(case, monkeypatch):
    """``compare_cpu=True`` compares the fused attention op (tagged random for its dropout, which the runtime never
    asks of it: it was skipped, counted neither compared nor uncompared) with the CPU's flash kernel, and its
    backward (no CPU kernel: it was uncompared) with the gradients of the CPU's math path; a difference is named."""
    from tpu_runtime import whole_ops
    from tpu_runtime.eager import REPORT

    g = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(B, H, n, E, generator=g) for n in (L, S, S))
    mask = torch.randn(B, 1, L, S, generator=g)
    mask[..., 1, :] = float("-inf") if case == "float_mask" else torch.finfo(torch.float32).min
    kw = {"is_causal": True} if case == "causal" else {"attn_mask": mask}
    fwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable.default
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True):
        dev = [t.to("tpu").requires_grad_() for t in (q, k, v)]
        kw_dev = {n: x.to("tpu") if isinstance(x, torch.Tensor) else x for n, x in kw.items()}
        before = REPORT.compared
        out = F.scaled_dot_product_attention(*dev, **kw_dev)
        assert REPORT.compared == before + 1
        out.square().sum().backward()
        assert REPORT.findings == [] and REPORT.uncompared == 0 and REPORT.compared >= before + 2
        bwd = torch.ops.aten._scaled_dot_product_fused_attention_overrideable_backward.default
        monkeypatch.setitem(whole_ops.CPU_REFERENCES, bwd, _shifted(whole_ops.CPU_REFERENCES[bwd]))
        with pytest.raises(Exception, match="_scaled_dot_product_fused_attention_overrideable_backward.* output 0"):
            F.scaled_dot_product_attention(*dev, **kw_dev).sum().backward()
        monkeypatch.setitem(whole_ops.CPU_REFERENCES, fwd, _shifted(whole_ops.CPU_REFERENCES[fwd]))
        with pytest.raises(Exception, match="_scaled_dot_product_fused_attention_overrideable.default output 0"):
            F.scaled_dot_product_attention(*dev, **kw_dev)


def _shifted(reference):
    """``reference`` with its first output moved by 1e-3."""
    return lambda *a, **kw: (reference(*a, **kw)[0] + 1e-3, *reference(*a, **kw)[1:])
