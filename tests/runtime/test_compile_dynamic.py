"""``torch.compile(backend="tpu")`` over changing sizes and python numbers: ``dynamic=True``, ``mark_dynamic``,
shape-independent guards on tpu inputs, floats that change between calls."""

from __future__ import annotations

import math

import pytest
import torch

import tpu_runtime  # noqa: F401  (registers the device and the backend)


def test_compile_tpu_dynamic_batch_training_saves_sizes_as_numbers():
    # with dynamic=True AOTAutograd saves the symbolic batch for backward: it must come back a number
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4)).train()
    compiled = torch.compile(model, backend="tpu", dynamic=True)
    for b in (6, 3):
        y = compiled(torch.randn(b, 8))
        y.sum().backward()
        assert y.shape == (b, 4) and model[0].weight.grad is not None
        model.zero_grad()
    model.eval()
    x = torch.randn(5, 8)
    torch.testing.assert_close(compiled(x), model(x), rtol=1e-5, atol=1e-6)


def test_compile_tpu_mark_dynamic_on_tpu_inputs_runs_each_batch_size():
    # mark_dynamic marks the tpu tensor; dynamo makes its inner tensor's dims dynamic by the inner tensor's
    # own marks, so they are carried over (the second batch size ran the first one's graph and failed)
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 16).to("tpu")
    compiled = torch.compile(model, backend="tpu")
    for b, mark in ((4, torch._dynamo.mark_dynamic), (6, torch._dynamo.mark_dynamic),
                    (3, torch._dynamo.maybe_mark_dynamic)):
        x = torch.randn(b, 8)
        xt = x.to("tpu")
        mark(xt, 0)
        want = x @ model.weight.detach().cpu().T + model.bias.detach().cpu()
        torch.testing.assert_close(compiled(xt).detach().cpu(), want, rtol=1e-5, atol=1e-5)


def test_compile_tpu_new_input_shapes_reuse_the_dynamic_graph():
    # tpu tensors flatten with a shape-independent context, so dynamo's guard on it holds: after the
    # first recompilation (dynamic sizes), a third length reuses the graph
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    fn = torch.compile(lambda t: (t.softmax(-1) * 2).sum(1), backend="tpu")
    for n in (3, 5, 7):
        x = torch.randn(2, n, 4)
        torch.testing.assert_close(fn(x.to("tpu")).cpu(), (x.softmax(-1) * 2).sum(1), rtol=1e-5, atol=1e-6)
    assert counters["stats"]["unique_graphs"] == 2, dict(counters["stats"])


def test_compile_tpu_python_float_that_changes_between_calls():
    # the second value makes dynamo trace the float as a symbolic input (a 0-d tensor converted with
    # prims.convert_element_type): learning rates from a scheduler, temperatures
    torch._dynamo.reset()
    fn = torch.compile(lambda x, temp: (x / temp).softmax(-1) * temp, backend="tpu")
    x = torch.arange(3.0)
    for temp in (1.0, 0.5, 0.25):
        torch.testing.assert_close(fn(x.to("tpu"), temp).cpu(), (x / temp).softmax(-1) * temp)
    torch._dynamo.reset()
    scaled = torch.compile(lambda x, a: x * a, backend="tpu", dynamic=True)
    assert torch.equal(scaled(torch.ones(3).to("tpu"), 0.5).cpu(), torch.full((3,), 0.5))


def test_compile_tpu_dynamic_shapes_scale_by_a_symbolic_size():
    # GPT-2's attention scaling and gelu_new under dynamic=True: true_divide by a symbolic float, a size
    # turned into a float
    torch._dynamo.reset()

    def fn(x):
        g = 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))
        return g / torch.full([], x.size(-1) ** 0.5, dtype=x.dtype, device=x.device) + x * x.size(-1) ** -0.5

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for n in (4, 9):
        x = torch.linspace(-2, 2, 2 * n).reshape(2, n)
        torch.testing.assert_close(compiled(x.to("tpu")).cpu(), fn(x))


@pytest.mark.parametrize("view", ["batches", "narrow", "select", "column_slice", "tail", "inner_rows_unsqueezed",
                                  "every_other_row", "odd_rows", "reshaped_tail"])
def test_compile_tpu_views_of_device_data_over_changing_sizes(view):
    # batching data resident on the device (X[i:i + 4], a shorter last batch) or viewing inputs whose size
    # changes: once sizes turn symbolic, a view's layout comes from its fake and still matches the CPU's
    # (dynamo replays each input view on its base and checks; it raised "Expected cond to be True");
    # a slice to the end or from a start other than 0 or 1 of the changing dimension (dynamo's guards failed on
    # symbols no input gives), a strided slice (every other row), a slice of a reshaped input, a dtype view: each
    # input view is faked as as_strided of its base (replayed op by op, a size ``s0 // 2`` that dynamo cannot
    # solve for made its guards fail on the input's own size symbol, depending on the python hash seed; a dtype
    # view's replay failed on its base, which torch had already cast)
    torch._dynamo.reset()
    torch.manual_seed(0)
    linear = torch.nn.Linear(4, 3)
    w, b = linear.weight.detach().clone(), linear.bias.detach().clone()
    fn = torch.compile(linear.to("tpu"), backend="tpu")
    data = torch.randn(10, 4)
    resident = data.to("tpu")
    cases = {"batches": ((10, 4), lambda src, i: src[4 * (i % 3):4 * (i % 3) + 4]),
             "narrow": ((None, 4), lambda src, i: src.narrow(0, 1, src.shape[0] - 2)),
             "select": ((None, 3, 4), lambda src, i: src[:, 1]),
             "column_slice": ((None, 8), lambda src, i: src[:, 2:6]),
             "tail": ((None, 4), lambda src, i: src[1:]),
             "inner_rows_unsqueezed": ((None, 4), lambda src, i: src[2:-1].unsqueeze(0)),
             "every_other_row": ((None, 4), lambda src, i: src[::2]),
             "odd_rows": ((None, 4), lambda src, i: src[1::2]),
             "reshaped_tail": ((None, 4), lambda src, i: src.view(-1, 2, 4)[1:])}
    shape, make = cases[view]
    for i, n in enumerate((5, 7, 9, 6)):
        x = data if view == "batches" else torch.randn(2 * n if view == "reshaped_tail" else n, *shape[1:])
        on_device = resident if view == "batches" else x.to("tpu")
        torch.testing.assert_close(fn(make(on_device, i)).detach().cpu(), make(x, i) @ w.T + b, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("view", ["int_bits", "complex_parts"])
def test_compile_tpu_dtype_view_inputs_over_changing_sizes(view):
    # an input that views its base as another dtype: torch casts the base's fake to that dtype before it
    # replays the view (the replay of the view's own ops failed: view_as_real of a real base)
    torch._dynamo.reset()
    make = {"int_bits": lambda src: src.view(torch.int32)[1:],
            "complex_parts": lambda src: torch.view_as_real(src.to(torch.complex64))[1:]}[view]
    fn = torch.compile(lambda v: v * 3 + 1, backend="tpu")
    for n in (5, 7, 6):
        x = torch.randn(n, 4)
        out = fn(make(x.to("tpu")))
        torch.testing.assert_close(out.cpu(), make(x) * 3 + 1)  # (dtypes too)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_compile_tpu_item_captured_into_the_graph(device):
    # fullgraph=True keeps .item() in the graph (an unbacked symbol): a python float made from it is a traced
    # scalar (torch.sym_float on it failed in JAX); a size made from it is refused by name, not a JAX error
    torch._dynamo.reset()
    x, i = torch.zeros(3, device=device), torch.tensor(3, device=device)
    fill = torch.compile(lambda x, i: torch.full((3,), i.item() * 1.5, device=x.device) + x, backend="tpu",
                         fullgraph=True)
    assert fill(x, i).cpu().tolist() == [4.5] * 3
    torch._dynamo.reset()
    window = torch.compile(lambda x, i: x[i.item():i.item() + 2] * 2, backend="tpu", fullgraph=True)
    with pytest.raises(Exception, match="aten.slice.Tensor .*its output size depends on a value read from a tensor"):
        window(torch.arange(5., device=device), torch.tensor(1, device=device))


@pytest.mark.parametrize("view", [lambda x: x[:, 1:], lambda x: x.t(), lambda x: x[1:]], ids=["cols", "t", "rows"])
def test_compile_tpu_dynamic_view_outputs_of_inputs_keep_their_layout(view):
    # an output that is a view of an input is rebuilt from its reported layout, symbolic under dynamic shapes:
    # it is resolved per call (a dense layout there made AOTAutograd rebuild the wrong elements)
    torch._dynamo.reset()
    compiled = torch.compile(view, backend="tpu")
    for n in (3, 5):  # the second size recompiles with dynamic shapes
        x = torch.arange(2.0 * n).reshape(2, n)
        got = compiled(x.to("tpu"))
        want = view(x)
        assert torch.equal(got.cpu(), want)
        assert (got.stride(), got.storage_offset()) == (want.stride(), want.storage_offset())


def test_compile_tpu_dynamic_view_of_an_intermediate_trains():
    # AOTAutograd makes the tangent of such an output contiguous and puts it back as the traced tensor's payload
    torch._dynamo.reset()
    compiled = torch.compile(lambda x: (x * 2)[:, 0], backend="tpu", dynamic=True)
    for n in (3, 5):
        x = torch.randn(n, 4, device="tpu", requires_grad=True)
        y = compiled(x)
        y.sum().backward()
        assert torch.equal(y.detach().cpu(), x.detach().cpu()[:, 0] * 2)
        assert torch.equal(x.grad.cpu(), torch.zeros(n, 4).index_fill_(1, torch.tensor(0), 2.0))



def test_compile_tpu_dynamic_input_that_is_an_eager_autograd_view_trains():
    # a chunk of an eager linear's output: dynamo fakes its base by detaching it, which reported dense strides
    # under symbolic sizes, so the replayed view's strides disagreed with the input's (an internal dynamo error)
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: torch.nn.functional.silu(t) * 2, backend="tpu", dynamic=True)
    for n in (4, 6):
        x, w0 = torch.randn(n, 8), torch.randn(6, 8)
        grads = []
        for fn, d in ((lambda t: torch.nn.functional.silu(t) * 2, "cpu"), (compiled, "tpu")):
            w = w0.to(d, copy=True).requires_grad_()
            g = torch.nn.functional.linear(x.to(d), w).chunk(2, dim=-1)[0]
            out = fn(g)
            out.pow(2).sum().backward()
            grads.append((out.detach().cpu(), w.grad.cpu()))
        torch.testing.assert_close(grads[1], grads[0])

@pytest.mark.parametrize("view", [lambda x: x.reshape(-1, 2), lambda x: x[:, 1:].reshape(-1, 2) * 2],
                         ids=["reshape", "slice-reshape"])
def test_compile_tpu_dynamic_strides_with_floor_divisions(view):
    # reshape(-1, 2) of an n x n input under dynamic shapes records the stride n*n // (n*n // 2): a floor
    # division of the input's symbol, not of the output's own dims (it was an UnsupportedOpError)
    torch._dynamo.reset()
    compiled = torch.compile(view, backend="tpu", dynamic=True)
    for n in (4, 6):
        x = torch.arange(float(n * n)).reshape(n, n)
        got, want = compiled(x.to("tpu")), view(x)
        assert torch.equal(got.cpu(), want) and got.stride() == want.stride()


def test_compile_tpu_gradient_of_a_view_by_a_python_int_size():
    # a Python int argument is a symbol of its own under dynamic=True (transformers' loss takes vocab_size): the
    # gradient of a view by it has strides with Max(1, n), which torch cannot simplify for a symbol that is not a
    # size; the tpu gradient's stride was an UnsupportedOpError (GPT-2's loss under dynamic=True)
    torch._dynamo.reset()

    def fn(logits, n):
        return torch.nn.functional.log_softmax(logits.view(-1, n), -1).pow(2).sum()

    compiled = torch.compile(fn, backend="tpu", dynamic=True)
    for length in (5, 7):
        x = torch.randn(2, length, 6)
        got, want = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
        compiled(got, 3).backward()
        fn(want, 3).backward()
        torch.testing.assert_close(got.grad.cpu(), want.grad)
        assert got.grad.stride() == want.grad.stride()


@pytest.mark.parametrize("window", ["hamming_window", "blackman_window", "bartlett_window", "kaiser_window"])
def test_compile_tpu_window_functions(window):
    # torch decomposes hann_window only: the others reach the backend as ops (no lowering raised)
    fn = getattr(torch, window)
    compiled = torch.compile(lambda x: x * fn(x.shape[-1], device=x.device), backend="tpu")
    x = torch.randn(2, 8)
    torch.testing.assert_close(compiled(x.to("tpu")).cpu(), x * fn(8))


def test_compile_tpu_optimizer_steps_of_two_models_keep_parameter_shapes_static():
    # the second model's compiled AdamW step recompiles the same code for parameters of other shapes: dynamo keeps
    # a parameter's shape static, as for a plain nn.Parameter (it made them dynamic and built a graph that read a
    # parameter's inner tensor before the parameter: the step failed); mark_static still adds to the marks
    torch._dynamo.reset()
    for width in (4, 6):
        torch.manual_seed(width)
        ref = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 3))
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 3)).to("tpu")
        model.load_state_dict(ref.state_dict())
        opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=0.05), torch.optim.AdamW(ref.parameters(), lr=0.05)
        step = torch.compile(opt.step, backend="tpu")
        x = torch.randn(2, width)
        for _ in range(2):
            for m, o, s, dev in ((model, opt, step, "tpu"), (ref, ref_opt, ref_opt.step, "cpu")):
                o.zero_grad()
                m(x.to(dev)).square().sum().backward()
                s()
        for p, q in zip(model.parameters(), ref.parameters()):
            assert p._dynamo_static_indices == set(range(p.dim()))
            torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)
    t = torch.ones(3, 2, device="tpu")
    torch._dynamo.mark_static(t, 1)
    assert t._dynamo_static_indices == {1}


@pytest.mark.parametrize("fn", [lambda x, k: x[:k], lambda x, k: x.topk(k), lambda x, k: (x * 2)[:, :k]],
                         ids=["slice", "topk", "columns"])
def test_compile_tpu_python_int_that_becomes_one_after_it_became_dynamic(fn):
    # k = 2, 3: k becomes dynamic; k = 1 then reached AOTAutograd's wrapper with an output it no longer has
    # (IndexError: the subclass wrapping counted the symbolic size the trace specialized to 1)
    torch._dynamo.reset()
    x = torch.randn(6, 5, generator=torch.Generator().manual_seed(0))
    compiled = torch.compile(fn, backend="tpu")
    for k in (2, 3, 1):
        want, got = fn(x, k), compiled(x.to("tpu"), k)
        for w, g in zip(want if isinstance(want, tuple) else (want,), got if isinstance(got, tuple) else (got,)):
            assert g.stride() == w.stride()
            torch.testing.assert_close(g.cpu(), w)


@pytest.mark.parametrize("case", ["transposed_input", "transpose_inside"])
def test_compile_tpu_view_the_layout_refuses_raises_as_on_the_cpu(case):
    # torch.compile's Python dispatcher made the layout check's meta view raise a ValueError of its own, which read
    # as "no layout known": the view of a transposed tensor was computed as a reshape where the CPU refuses it
    torch._dynamo.reset()
    x = torch.arange(12.0).reshape(3, 4)
    fn = (lambda a: a.view(6, 2)) if case == "transposed_input" else (lambda a: a.t().view(-1))
    arg = x.t() if case == "transposed_input" else x
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        fn(arg)
    with pytest.raises(RuntimeError, match="view size is not compatible"):
        torch.compile(fn, backend="tpu")(arg.to("tpu") if case == "transpose_inside" else x.to("tpu").t())
