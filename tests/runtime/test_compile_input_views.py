"""``torch.compile(backend="tpu")`` on inputs that are views of tpu data at a storage offset, mutated in the
compiled function, with an output that views them: AOTAutograd rebuilds such an output from the input at the
traced offset, which the tpu tensor protocol must carry (it read the input's storage from offset 0); an
output that views an intermediate at an offset, fed to the next call; and inputs that are transposed, sliced or
expanded views, with outputs that view them."""

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


def _kv_repeat(k: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """Llama's repeat_kv (an expanded view, then reshape) feeding a matmul with ``x``."""
    b, h, s, d = k.shape
    k = k[:, :, None].expand(b, h, 2, s, d).reshape(b, h * 2, s, d)
    return (k @ x.transpose(-1, -2)).sum(1)


@pytest.mark.parametrize("view", ["transpose", "column_slice", "slice_transpose", "transpose_slice", "expand"])
def test_compile_tpu_takes_non_contiguous_views_and_reshapes_expanded_ones(view):
    # a transposed tpu tensor reports the CPU's strides, a slice (and a transpose of it) dense ones:
    # dynamo replays each input view on its base and checks that the traced strides agree
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(3)
    base, k = torch.randn(4, 6, generator=g), torch.randn(1, 2, 3, 6, generator=g)
    make = {"transpose": lambda t: t.t(), "column_slice": lambda t: t[:, 2:5],
            "slice_transpose": lambda t: t[:, 2:5].t(), "transpose_slice": lambda t: t.t()[1:4],
            "expand": lambda t: t[:1].expand(3, 6)}[view]
    fn = torch.compile(lambda a, kk: (_kv_repeat(kk, a.reshape(-1, 6)[:3]) if view == "expand" else a * 2 + 1),
                       backend="tpu")
    got = fn(make(base.to("tpu")), k.to("tpu"))
    want = _kv_repeat(k, make(base).reshape(-1, 6)[:3]) if view == "expand" else make(base) * 2 + 1
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("body", ["t", "row", "rows"])
@pytest.mark.parametrize("view", ["t", "reshape_permute"])
def test_compile_tpu_output_that_is_a_view_of_a_permuted_input_has_its_values(view, body):
    # AOTAutograd rebuilds such an output from the input with as_strided(base size, base strides), then
    # replays the views: the permuted input reports its strides in its storage, which index the storage
    torch._dynamo.reset()
    fn = {"t": lambda a: a.transpose(0, 1), "row": lambda a: a[1], "rows": lambda a: a[1:3]}[body]
    make = {"t": lambda a: a.t(), "reshape_permute": lambda a: a.reshape(2, 2, 6).permute(2, 0, 1)}[view]
    x = torch.arange(24.0).reshape(4, 6)
    got = torch.compile(fn, backend="tpu")(make(x.to("tpu")))
    assert torch.equal(got.cpu(), fn(make(x)))


@pytest.mark.parametrize("body", ["t", "row", "rows", "flat"])
@pytest.mark.parametrize("view", ["rows", "columns", "select", "expand"])
def test_compile_tpu_output_that_is_a_view_of_a_sliced_input_has_its_values(view, body):
    # the input reports its offset in its storage, as on the CPU: AOTAutograd rebuilds the output with
    # input.as_strided(base size, base strides, base offset) and replays the views (a row of a sliced
    # input used to come back from the wrong rows, and the others raised)
    torch._dynamo.reset()
    fn = {"t": lambda a: a.transpose(0, -1), "row": lambda a: a[1], "rows": lambda a: a[1:3],
          "flat": lambda a: a.reshape(-1)}[body]
    make = {"rows": lambda a: a[1:4], "columns": lambda a: a[:, 1:5], "select": lambda a: a[2],
            "expand": lambda a: a[:1].expand(3, 6)}[view]
    x = torch.arange(24.0).reshape(4, 6)
    got = torch.compile(fn, backend="tpu")(make(x.to("tpu")))
    assert torch.equal(got.cpu(), fn(make(x)))


def test_compile_as_strided_of_a_view_returned_across_a_graph_break():
    # the first graph returns a view (its values, reporting the view's layout); the second graph's
    # as_strided of it indexes that layout, not the values' own order
    torch._dynamo.reset()

    def chunks(x):
        q = (x * 2).transpose(0, 1).reshape(x.shape[1], x.shape[0] // 4, 4)
        torch._dynamo.graph_break()
        return q.as_strided((q.shape[0], q.shape[1] * 2 - 1, 4), (q.stride(0), q.stride(1) // 2, q.stride(2)))

    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(torch.compile(chunks, backend="tpu")(x.to("tpu")).cpu(), chunks(x))


_INPUT_VIEWS = {
    "transpose": lambda t: t.t(),
    "chunk": lambda t: t.chunk(2, 1)[1],
    "diagonal": lambda t: t.diagonal(1),
    "expand": lambda t: t[:, :1].expand(5, 4),
    "strided_slice": lambda t: t[::2, 1::3],
    "select": lambda t: t[2],
}


@pytest.mark.parametrize("view", sorted(_INPUT_VIEWS))
def test_compile_tpu_output_that_is_a_view_of_an_input_matches_cpu(view):
    # AOTAutograd rebuilds such an output as input.as_strided(out.size(), out.stride(),
    # out.storage_offset()) from the compiled graph's output: that output must report the traced
    # view's layout (a dense tpu tensor made every one of these wrong, values and gradients)
    torch._dynamo.reset()
    fn = _INPUT_VIEWS[view]
    x = torch.randn(5, 10, generator=torch.Generator().manual_seed(0))
    xt, xc = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    got, want = torch.compile(fn, backend="tpu")(xt), fn(xc)
    torch.testing.assert_close(got.detach().cpu(), want.detach())
    w = torch.arange(want.numel(), dtype=torch.float32).reshape(want.shape)
    (got * w.to("tpu")).sum().backward()
    (want * w).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad)
