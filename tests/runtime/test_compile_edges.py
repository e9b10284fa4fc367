"""torch.compile(backend="tpu") at the edges of what a compiled function takes and gives: function
transforms of tpu tensors, python numbers returned, expanded outputs written in place."""

from __future__ import annotations

import pytest
import torch
from torch.func import hessian, jacfwd

import tpu_runtime  # noqa: F401  (the tpu device and backend)


def _f(v):
    return (v.sin() * v.pow(3)).sum()


@pytest.mark.parametrize("transform", ["hessian", "jacfwd_of_grad"])
def test_compiled_forward_mode_transforms_of_tpu_tensors(transform):
    # forward-mode AD moves a traced tpu tensor to the meta device (``t.to("meta")``): the tracer took the meta
    # result for an alias of the tpu tensor, and the error inside the autograd engine aborted the process
    torch._dynamo.reset()
    fn = {"hessian": lambda x: hessian(_f)(x), "jacfwd_of_grad": lambda x: jacfwd(torch.func.grad(_f))(x)}[transform]
    x = torch.randn(4)
    torch.testing.assert_close(torch.compile(fn, backend="tpu")(x.to("tpu")).cpu(), fn(x))


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_compiled_function_returns_python_numbers_as_python_numbers(device):
    # a number computed from a python float argument is a constant of the graph once dynamo makes the float
    # dynamic (it guards on it): it came back as a 0-d tensor from the second call on
    torch._dynamo.reset()

    def f(x, b):
        return x + b, int(b) + 1, b > 1.0, round(b)

    compiled = torch.compile(f, backend="tpu")
    x = torch.randn(3)
    for b in (0.5, 1.5, 2.5):
        out = compiled(x.to(device), b)
        assert out[1:] == f(x, b)[1:] and [type(o) for o in out[1:]] == [int, bool, int]
        torch.testing.assert_close(out[0].cpu(), x + b)


def test_in_place_write_into_a_compiled_expanded_output_is_refused():
    # the expanded output is rebuilt as as_strided with a zero stride over the input: a write through it
    # changed the input (the CPU refuses it, as eager tpu does for expand)
    torch._dynamo.reset()
    x = torch.arange(9.0).view(3, 3).to("tpu")
    out = torch.compile(lambda t: t[:1].expand(3, -1), backend="tpu")(x)
    assert out.stride() == (0, 1)
    with pytest.raises(RuntimeError, match="more than one element of the written-to tensor"):
        out.add_(100)
    assert torch.equal(x.cpu(), torch.arange(9.0).view(3, 3))


def test_compile_random_fills_without_a_lowering_decompose_as_in_eager():
    fills = {"cauchy_": lambda x: x.clone().cauchy_(), "log_normal_": lambda x: x.clone().log_normal_(),
             "geometric_": lambda x: x.clone().geometric_(0.5)}
    for name, fill in fills.items():
        torch._dynamo.reset()
        compiled = torch.compile(fill, backend="tpu")
        x = torch.zeros(256, device="tpu")
        torch.manual_seed(0)
        a = compiled(x).cpu()
        torch.manual_seed(0)
        assert torch.equal(compiled(x).cpu(), a), name  # reproducible under the seed
        assert a.isfinite().all() and a.unique().numel() > 1, name
        if name == "log_normal_":
            assert (a > 0).all()
        if name == "geometric_":
            assert (a >= 1).all() and torch.equal(a, a.round())


def _output_and_its_view(x, w):
    y = x * w
    return y, y.view(-1)


def _two_views_of_an_intermediate(x, w):
    y = (x * w).t()
    return y[0], y[1].unsqueeze(0)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
@pytest.mark.parametrize("fn", [_output_and_its_view, _two_views_of_an_intermediate])
def test_compiled_outputs_viewing_one_tensor_stay_aliased(fn, device):
    # outputs viewing one tensor came back as copies: a write through one was not seen through the others, and
    # autograd gave other gradients than on the CPU
    torch._dynamo.reset()
    x, w0 = torch.randn(2, 3), torch.randn(2, 3)

    def run(f, d):
        w = w0.to(d, copy=True).requires_grad_()
        outs = f(x.to(d), w)
        outs[1].mul_(2)
        (outs[0].sum() + 3 * outs[1].sum()).backward()
        return outs, w.grad

    want, want_grad = run(fn, "cpu")
    got, grad = run(torch.compile(fn, backend="tpu"), device)
    assert got[1]._base is (got[0] if fn is _output_and_its_view else got[0]._base) is not None
    for g, e in zip(got, want):
        assert g.device.type == device and g.shape == e.shape and g.stride() == e.stride()
        torch.testing.assert_close(g.detach().cpu(), e.detach())
    torch.testing.assert_close(grad.cpu(), want_grad)


def _add_out(a, out):
    torch.add(a, 1, out=out)
    return out * 2


def _resize_then_copy(a, b):
    b.resize_(2, 3)
    b.copy_(a.view(2, 3))
    return b.sum(0)


@pytest.mark.parametrize("case", ["out_of_no_elements", "resize_"])
def test_compiled_functions_resize_tpu_inputs_as_on_the_cpu(case):
    # the traced input takes its fake's new sizes: AOTAutograd replays the metadata change on the input (it copied
    # the result into the old size, which raised)
    fn, other = {"out_of_no_elements": (_add_out, lambda d: torch.empty(0, device=d)),
                 "resize_": (_resize_then_copy, lambda d: torch.zeros(4, device=d))}[case]
    results = {}
    for device in ("cpu", "tpu"):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="tpu") if device == "tpu" else fn
        a, b = torch.arange(6.0).to(device), other(device)
        first, again = compiled(a, b), compiled(a, other(device))  # (the second call runs the cached graph)
        results[device] = tuple(b.shape), b.cpu(), first.cpu(), again.cpu()
    want, got = results["cpu"], results["tpu"]
    assert got[0] == want[0]
    for w, g in zip(want[1:], got[1:]):
        torch.testing.assert_close(g, w)


def _graph_break(x):
    if x.sum().item() > -1e9:  # data-dependent: a graph break inside a call made in a loop (dynamo then skips the loop)
        x = x + 1
    return x


def _looped(x, w):
    for _ in range(2):
        x = _graph_break(x)
        q = torch.nn.functional.linear(x, w).view(2, 4, 2, 4).permute(0, 2, 1, 3)
        q /= 2.0
        x = torch.matmul(q, q.transpose(-1, -2)).sum(1)[..., :1].expand(2, 4, 8) + x
    return torch.nn.functional.scaled_dot_product_attention(x, x, x) + torch.zeros(x.shape, device=x.device)


def test_a_frame_dynamo_skips_runs_the_runtimes_kernels_eagerly():
    # dynamo runs a frame it skips with its frame hook on, compiling each Python function it calls as user code:
    # the dispatcher's calls of the runtime's kernels (matmul, linear, sdpa, the factories) too, which failed on
    # their real tpu tensors (DeBERTa under torch.compile)
    torch._dynamo.reset()
    # (seeded: unseeded, 1 draw in 40 differed from the CPU by 5e-6 relative, XLA's order of float32 sums)
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(2, 4, 8, generator=g), torch.randn(8, 8, generator=g)
    got = torch.compile(_looped, backend="tpu")(x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_())
    torch.testing.assert_close(got.detach().cpu(), _looped(x, w), rtol=1e-5, atol=1e-5)


def _in_place_views(a):
    b = (a * 1).unsqueeze(0)
    b.transpose_(1, 2)
    b.squeeze_(0)
    c = a * 3
    c.t_()
    c.unsqueeze_(-1)
    return b.sum(0) * 2, c.squeeze(-1), torch.stft(a.reshape(-1), 4, return_complex=True).abs()


def _zero_gradient_and_batch_norm_update(a, w, rm, rv):
    y = torch.ops.aten._batch_norm_with_update(a.unsqueeze(-1), w, w * 0, rm, rv, 0.1, 1e-5)[0]
    return torch.sgn(a).sum() + y.pow(2).sum()  # (sgn's gradient: _efficientzerotensor)


def _lazy_conjugate(a):
    return torch.fft.hfft(a.reshape(-1))  # (its gradient takes view_as_real of a lazy conjugate: it raised)


@pytest.mark.parametrize("fn", [_in_place_views, _zero_gradient_and_batch_norm_update, _lazy_conjugate])
def test_compiled_training_graphs_with_in_place_views_zero_gradients_and_batch_norm_backward(fn):
    # a traced in-place view op changed the wrapper's metadata twice (a transposed gradient: "invalid gradient"); a
    # traced lazy conjugate's wrapper did not say so ("view_as_real doesn't work on unresolved conjugated tensors");
    # the backward graphs of sgn and _batch_norm_with_update hold _efficientzerotensor and batch_norm_backward
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(3, 4, generator=g), torch.rand(4, generator=g) + 0.5
    extra = (w, torch.zeros(4), torch.ones(4)) if fn is _zero_gradient_and_batch_norm_update else ()
    torch._dynamo.reset()
    xr, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    want = fn(xr, *extra)
    got = torch.compile(fn, backend="tpu")(xt, *(t.to("tpu") for t in extra))
    want, got = torch.utils._pytree.tree_leaves(want), torch.utils._pytree.tree_leaves(got)
    sum(w_.sum() for w_ in want).backward()
    sum(g_.sum() for g_ in got).backward()
    for w_, g_ in zip(want, got):
        torch.testing.assert_close(g_.detach().cpu(), w_.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("op", [torch.heaviside, torch.xlogy, torch.special.xlog1py, torch.logaddexp])
@pytest.mark.parametrize("first", [False, True])
def test_a_tensor_constant_made_on_the_device_inside_a_compiled_function(op, first):
    # the fake-tensor mode kept ``torch.tensor(0.7, device=...)`` as a real tpu constant, and the op's reference
    # decomposition ran ``log`` / ``eq`` / ``as_strided`` on it for real with the Python key off: "could not find
    # kernel ... at dispatch key PrivateUse1" (the compiled function failed where eager runs)
    torch._dynamo.reset()

    def f(t):
        c = torch.tensor(0.7, device=t.device)
        return op(c, t) if first else op(t, c)

    x = torch.rand(4) + 0.1
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x.to("tpu")).cpu(), f(x))


def test_a_runtime_op_called_from_dynamos_bytecode_with_a_slice_constant():
    # ``x[1:3] = x.new_tensor(3.0)``: dynamo's rewritten frame holds the slice as a constant, so its code object is
    # unhashable on Python 3.11, and the runtime's lookup of the user's line for the eager op raised TypeError
    torch._dynamo.reset()

    def f(x):
        x = x.clone()
        x[1:3] = x.new_tensor(3.0)
        return x

    x = torch.zeros(5)
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x.to("tpu")).cpu(), f(x))


def test_looking_up_the_users_line_keeps_no_code_object_alive():
    # the lookup cached its answer per code object, which kept each one alive: dynamo's transformed code too, and
    # dynamo frees a compiled function's globals only once that code dies
    import gc
    import weakref

    namespace: dict = {}
    exec("def user(x, i):\n    return x[i]\n", namespace)  # (a function made at run time, as dynamo makes code)
    code = weakref.ref(namespace["user"].__code__)
    with pytest.raises(IndexError, match="out of bounds"):  # (an eager op whose check looks up the user's line)
        namespace["user"](torch.arange(4.0).to("tpu"), torch.tensor([7]).to("tpu")).cpu()
    del namespace
    gc.collect()
    assert code() is None


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64])
def test_xlogy_of_a_python_number_compiles(dtype):
    # torch's reference of xlogy(x, 3) makes the number a tensor with prims.scalar_tensor, which had no lowering
    torch._dynamo.reset()
    x = torch.tensor([0, 1, 2, 5]).to(dtype)
    fn = lambda t: torch.xlogy(t, 3)  # noqa: E731
    torch.testing.assert_close(torch.compile(fn, backend="tpu")(x.to("tpu")).cpu(), fn(x))


_MIXED = {  # fn(x, idx, mask), idx, mask: a boolean mask among integer indices, written in place
    "pairs": (lambda x, i, m: x.index_put_((i, m), torch.tensor(7.5, device=x.device)), [0, 4], [True, False]),
    "one selected, three indices": (lambda x, i, m: x.index_put_((i, m), torch.tensor(7.5, device=x.device)),
                                    [0, 4, 2], [False, True]),
    "one index, accumulated": (lambda x, i, m: x.index_put_((i, m), torch.tensor(2.0, device=x.device),
                                                            accumulate=True), [3], [True, True]),
    "2-d mask after a slice": (lambda x, i, m: x.__setitem__((slice(None), m, i), 1.0) or x, [0, 2, 2],
                               [[True, False, True, False], [False, False, True, False]]),
    "two masks, one selecting one": (lambda x, i, m: x.__setitem__((i, m), 1.0) or x, [False, True, True, False, True],
                                     [False, True]),
    "two masks, one selecting none": (lambda x, i, m: x.index_put_((i, m), torch.tensor(2.0, device=x.device),
                                                                   accumulate=True), [False] * 5, [True, False]),
    # a value per selected element: the read graph-breaks, the write gets as many values as the masks selected
    "two masks, incremented": (lambda x, i, m: x.__setitem__((i, m), x[i, m] + 1) or x, [True, False, True, True,
                                                                                          False], [False, True]),
    "one index, a row per selected": (lambda x, i, m: x.__setitem__((slice(None), i, m), torch.arange(
        45.0, device=x.device).view(5, 3, 3)) or x, [1], [False, True, True, True]),
}


@pytest.mark.parametrize("case", list(_MIXED))
def test_a_mask_among_integer_indices_is_written_under_compile(case):
    # the lowering refused ``x[idx, mask] = v`` ("a data-dependent shape"); eager mode ran it through nonzero
    torch._dynamo.reset()
    fn, i, m = _MIXED[case]
    f = lambda x, i, m: fn(x.clone(), i, m)  # noqa: E731
    x, i, m = torch.randn(5, 2, 4, 3, generator=torch.Generator().manual_seed(0)), torch.tensor(i), torch.tensor(m)
    torch.testing.assert_close(torch.compile(f, backend="tpu")(x.to("tpu"), i.to("tpu"), m.to("tpu")).cpu(),
                               f(x, i, m))


def test_a_mask_selecting_another_count_than_the_indices_hold_raises_under_compile():
    torch._dynamo.reset()
    f = torch.compile(lambda x, i, m: x.clone().index_put_((i, m), torch.tensor(7.5, device=x.device)), backend="tpu")
    with pytest.raises(RuntimeError, match="shape mismatch: indexing tensors could not be broadcast together"):
        f(torch.zeros(5, 2, device="tpu"), torch.tensor([0, 4, 1], device="tpu"),
          torch.tensor([True, True], device="tpu")).cpu()
