"""``torch.compile(backend="tpu")`` on inputs that are views of tpu data at a storage offset, mutated in the
compiled function, with an output that views them: AOTAutograd rebuilds such an output from the input at the
traced offset, which the tpu tensor protocol must carry (it read the input's storage from offset 0); and an
output that views an intermediate at an offset, fed to the next call."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime  # noqa: F401  (registers the device and the backend)


def _row_after_add(v):
    v.add_(1)
    return v[0]


def _cache_column(layer_cache, k):
    layer_cache[:, 2] = k
    return layer_cache[:, :3]


@pytest.mark.parametrize("case", ["row_of_mutated_slice", "kv_cache_layer"])
def test_compiled_output_viewing_a_mutated_input_view_reads_that_view(case):
    torch._dynamo.reset()
    if case == "row_of_mutated_slice":
        fn, base, args = _row_after_add, torch.arange(12.).view(3, 4), lambda b: (b[1:],)
    else:
        fn, base, args = _cache_column, torch.zeros(2, 2, 4), lambda b: (b[1], torch.ones(2, device=b.device))
    expected_base = base.clone()
    expected = fn(*args(expected_base))
    on_device = base.to("tpu")
    got = torch.compile(fn, backend="tpu")(*args(on_device))
    assert got.cpu().tolist() == expected.tolist()
    assert (got.stride(), got.storage_offset()) == (expected.stride(), expected.storage_offset())
    assert on_device.cpu().tolist() == expected_base.tolist()


def test_compiled_output_viewing_a_mutated_input_view_gets_the_cpu_gradient():
    torch._dynamo.reset()

    def double_then_row(v):
        v.mul_(2)
        return v[0]

    w = torch.arange(12.).view(3, 4).requires_grad_()
    expected = double_then_row(w.clone()[1:])
    expected.sum().backward()
    w_tpu = w.detach().to("tpu").requires_grad_()
    got = torch.compile(double_then_row, backend="tpu")(w_tpu.clone()[1:])
    got.sum().backward()
    assert got.detach().cpu().tolist() == expected.tolist()
    assert w_tpu.grad.cpu().tolist() == w.grad.tolist()


def test_a_function_compiled_for_cpu_views_then_for_tpu_views_writes_them():
    # the recompile for tpu views makes their sizes symbolic: dynamo replays each view on its base's fake as
    # as_strided and checks the replay's storage offset, which a traced as_strided reported as 0
    torch._dynamo.reset()

    def bump(a, b):
        a.mul_(2)
        b.add_(1)
        return a.sum() + b.sum()

    compiled = torch.compile(bump, backend="tpu")
    for device in ("cpu", "tpu"):
        base, want = torch.arange(12.0).reshape(3, 4).to(device), torch.arange(12.0).reshape(3, 4)
        with torch.no_grad():
            got = compiled(base[0], base[2])
        assert float(got) == float(bump(want[0], want[2])) and torch.equal(base.cpu(), want)


def _window(cache, new):
    full = torch.cat([cache, new], -2)
    return full[:, :, 1:, :], full.sum()


def test_an_output_viewing_an_intermediate_feeds_the_next_call():
    # a sliding-window KV cache (transformers' Gemma 3 in generate with a compiled forward): the compiled call returns
    # a window of an intermediate, at a storage offset, and the next call takes it as its input. Its fake had come
    # out at offset 0 and dynamo's fakeification failed ("set the storage of a tensor on device tpu:0 to a storage
    # on different device meta")
    torch._dynamo.reset()
    step = torch.compile(_window, backend="tpu")
    cache, want = torch.zeros(1, 2, 3, 8).to("tpu"), torch.zeros(1, 2, 3, 8)
    g = torch.Generator().manual_seed(5)
    for _ in range(3):
        new = torch.randn(1, 2, 1, 8, generator=g)
        (cache, total), (want, want_total) = step(cache, new.to("tpu")), _window(want, new)
        torch.testing.assert_close(cache.cpu(), want)
        torch.testing.assert_close(total.cpu(), want_total)
    torch._dynamo.reset()
