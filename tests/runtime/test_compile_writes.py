"""``torch.compile(backend="tpu")`` of functions that write their inputs in place under ``no_grad`` (an optimizer
step, a KV-cache update): the graph's runner writes the new values back and reuses the inputs' buffers when
nothing else holds them (:mod:`tpu_runtime.compile_writes`)."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime
from tpu_runtime.values import materialize


def _models():
    torch.manual_seed(0)
    ref = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    return ref, copy.deepcopy(ref).to("tpu")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_compiled_adamw_step_updates_in_place_and_reuses_the_buffers(mode):
    torch._dynamo.reset()
    ref, model = _models()
    opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=0.05), torch.optim.AdamW(ref.parameters(), lr=0.05)
    step = torch.compile(opt.step, backend="tpu")
    x = torch.randn(4, 6)
    with tpu_runtime.set_eager_mode(mode):
        for i in range(3):
            for m, o, s, dev in ((model, opt, step, "tpu"), (ref, ref_opt, ref_opt.step, "cpu")):
                o.zero_grad()
                m(x.to(dev)).square().sum().backward()
                if dev == "tpu":  # (addresses only: a reference to an array keeps its buffer from being reused)
                    old = [materialize(p).unsafe_buffer_pointer() for p in model.parameters()]
                s()
            if i:  # the new values were written into the old buffers (the first call compiled, reading them again)
                assert [materialize(p).unsafe_buffer_pointer() for p in model.parameters()] == old
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    for st, ref_st in zip(opt.state.values(), ref_opt.state.values()):
        assert st["step"].device.type == "cpu" and torch.equal(st["step"], ref_st["step"])  # (a CPU input written)
        torch.testing.assert_close(st["exp_avg_sq"].cpu(), ref_st["exp_avg_sq"], rtol=1e-4, atol=1e-7)


def test_a_buffer_something_else_holds_is_not_reused():
    torch._dynamo.reset()
    w = torch.zeros(4, device="tpu")
    bump = torch.compile(lambda t: t.add_(1.0), backend="tpu")
    with torch.no_grad():
        bump(w)
        held = materialize(w)  # a reference the runtime does not know about
        bump(w)
    assert not held.is_deleted() and held.tolist() == [1.0] * 4
    assert w.cpu().tolist() == [2.0] * 4


def test_compiled_kv_cache_write_is_seen_through_views_taken_before():
    torch._dynamo.reset()

    def write(cache, pos, k):
        cache.index_copy_(1, pos, k)
        return cache[:, : pos[-1] + 1].sum(1)

    compiled = torch.compile(write, backend="tpu")
    cache, want = torch.zeros(2, 6, 3, device="tpu"), torch.zeros(2, 6, 3)
    head, want_head = cache[:, :2], want[:, :2]  # views held across the writes
    with torch.no_grad():
        for t in range(4):
            k = torch.full((2, 1, 3), float(t + 1))
            pos = torch.tensor([t])
            got = compiled(cache, pos.to("tpu"), k.to("tpu"))
            torch.testing.assert_close(got.cpu(), write(want, pos, k))
    assert torch.equal(cache.cpu(), want) and torch.equal(head.cpu(), want_head)


def test_a_compiled_in_place_write_counts_in_the_version_autograd_checks():
    torch._dynamo.reset()
    w = torch.ones(3, device="tpu", requires_grad=True)
    y = (w * w).sum()  # saves w for backward
    with torch.no_grad():
        torch.compile(lambda t: t.add_(1.0), backend="tpu")(w)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        y.backward()
