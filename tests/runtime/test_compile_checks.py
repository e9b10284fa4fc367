"""torch.compile(backend="tpu") graphs check indices and values as eager mode does: the CPU's error, not XLA's
clamped read (tpu_runtime.graph_checks). A graph of CPU tensors raises at the call; a graph of tpu tensors at the
next sync point, naming the op and the user's line."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime

_X = torch.arange(10.0).view(5, 2)

#: name → (fn(x, index), an index out of range, one in range): the index is a graph input.
_CASES = {
    "getitem": (lambda x, i: x[i], [7], [-5, 4]),
    "index_put": (lambda x, i: x.index_put((i,), torch.ones((), device=x.device)), [-9], [-1]),
    "index_select": (lambda x, i: x.index_select(0, i), [5], [0]),
    "gather": (lambda x, i: x.gather(1, i.view(-1, 1)), [0, 2], [0, 1]),
    "scatter_add": (lambda x, i: x.scatter_add(0, i.view(1, -1), x[:1]), [0, 6], [0, 4]),
    "embedding": (lambda x, i: F.embedding(i, x), [[0, 5]], [[0, 4]]),
    "take": (lambda x, i: x.take(i), [-11], [-10]),
    "cross_entropy": (lambda x, i: F.cross_entropy(x, i), [0, 1, 2, 1, 0], [0, 1, -100, 1, 0]),
    # decomposed into index_put, checked as the CPU checks the op itself (a negative index refused, its wording)
    "index_add": (lambda x, i: x.index_add(1, i, torch.ones(5, 1, device=x.device)), [-1], [1]),
    "index_add of 1-d": (lambda x, i: x[:, 0].index_add(0, i, torch.ones(1, device=x.device)), [5], [4]),
    "index_copy": (lambda x, i: x.index_copy(1, i, torch.ones(5, 1, device=x.device)), [-1], [1]),
    "index_fill": (lambda x, i: x.index_fill(1, i, 2.0), [-3], [-2]),
    # decomposed while dynamo traces: worded as the CPU's kernel by the torch function's name
    "multi_margin_loss": (lambda x, i: F.multi_margin_loss(x, i), [0, 1, 2, 1, 0], [0, 1, 1, 1, 0]),
    # kept whole (its decomposition offsets each plane's indices: 4 would land in the next plane)
    "max_unpool1d": (lambda x, i: F.max_unpool1d(x.view(1, 2, 5)[..., :2], i, 2), [[[0, 4], [1, 3]]],
                     [[[0, 3], [1, 2]]]),
    "max_unpool3d": (lambda x, i: F.max_unpool3d(x[:1, :1].view(1, 1, 1, 1, 1).expand(1, 1, 1, 1, 2), i, 2),
                     [[[[[0, -1]]]]], [[[[[0, 15]]]]]),
}


def _cpu_error(fn, index):
    with pytest.raises((IndexError, RuntimeError)) as info:
        fn(_X, torch.tensor(index))
    return info.type, str(info.value)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
@pytest.mark.parametrize("name", list(_CASES))
def test_a_compiled_index_out_of_range_raises_the_cpus_error(name, device):
    fn, bad, good = _CASES[name]
    kind, message = _cpu_error(fn, bad)
    compiled = torch.compile(fn, backend="tpu", dynamic=False)
    x = _X.to(device)
    ok = compiled(x, torch.tensor(good, device=device))
    torch.testing.assert_close(ok.cpu(), fn(_X, torch.tensor(good)))  # (an index in range: no false alarm)
    with pytest.raises(kind) as info:
        out = compiled(x, torch.tensor(bad, device=device))
        if device == "tpu":
            out.cpu()  # (a tpu graph runs on: the sync point raises)
    assert str(info.value) == message
    notes = " ".join(info.value.__notes__)
    assert "test_compile_checks.py" in notes  # the user's line of the op
    if device == "tpu":
        assert "at this sync point" in notes
    tpu_runtime.sync()  # nothing left pending


def test_a_tpu_graph_raises_at_the_sync_point_not_at_the_call():
    compiled = torch.compile(lambda x, i: x[i] * 2, backend="tpu")
    x = _X.to("tpu")
    y = compiled(x, torch.tensor([9], device="tpu"))  # no raise yet: the graph runs asynchronously
    assert y.shape == (1, 2)
    with pytest.raises(IndexError, match="index 9 is out of bounds for dimension 0 with size 5"):
        tpu_runtime.sync()
    torch.testing.assert_close(compiled(x, torch.tensor([3], device="tpu")).cpu(), _X[[3]] * 2)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_compiled_value_checks(device):
    floor = torch.compile(lambda a, b: a // b, backend="tpu")
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        floor(torch.tensor([4, 5], device=device), torch.tensor([1, 0], device=device)).cpu()
    torch.testing.assert_close(floor(torch.tensor([4, 5], device=device), torch.tensor([2, 3], device=device)).cpu(),
                               torch.tensor([2, 1]))
    draw = torch.compile(lambda p: torch.multinomial(p, 1), backend="tpu")
    with pytest.raises(RuntimeError, match="probability tensor contains either `inf`, `nan` or element < 0"):
        draw(torch.tensor([[0.5, -0.1]], device=device)).cpu()
    # a python argument the CPU refuses: every call raises
    fill = torch.compile(lambda x: x.uniform_(2.0, 1.0) + 1, backend="tpu")
    for _ in range(2):
        with pytest.raises(RuntimeError, match=r"uniform_ expects to return a \[from, to\) range"):
            fill(torch.zeros(3, device=device))
    tpu_runtime.sync()


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_a_dynamic_graph_checks_against_each_calls_sizes(device):
    # one graph, symbolic sizes: each concrete signature checks (and words its message) with its own sizes
    compiled = torch.compile(lambda x, i, t: x[i].sum() + F.cross_entropy(x, t), backend="tpu", dynamic=True)
    for n in (5, 7):  # in range: the values torch gives
        x, i, t = torch.arange(n * 3.0).view(n, 3), torch.tensor([0, n - 1]), torch.zeros(n, dtype=torch.long)
        got = compiled(x.to(device), i.to(device), t.to(device))
        torch.testing.assert_close(got.cpu(), x[i].sum() + F.cross_entropy(x, t))
    for n in (6, 5):  # a signature traced first, then one traced before: each names its own size
        x, t = torch.ones(n, 3, device=device), torch.zeros(n, dtype=torch.long, device=device)
        with pytest.raises(IndexError) as info:
            compiled(x, torch.tensor([0, n], device=device), t).cpu()
        assert str(info.value) == f"index {n} is out of bounds for dimension 0 with size {n}"
        with pytest.raises(IndexError, match="Target 3 is out of bounds."):
            compiled(x, torch.tensor([0], device=device), torch.full((n,), 3, device=device)).cpu()
    tpu_runtime.sync()


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_an_index_into_a_dimension_of_size_0_raises_the_cpus_error(device):
    compiled = torch.compile(lambda x, i: x[i], backend="tpu")
    with pytest.raises(IndexError) as info:
        compiled(torch.zeros(0, 3, device=device), torch.tensor([0], device=device)).cpu()
    assert str(info.value) == "index is out of bounds for dimension with size 0"


def test_multilabel_margin_loss_targets_are_checked_with_the_cpus_message():
    loss = torch.nn.MultiLabelMarginLoss()
    compiled = torch.compile(loss, backend="tpu")
    for bad in ([[0, -2]] * 5, [[-1, 7]] * 5):  # (every value is checked, after the first -1 too)
        with pytest.raises(RuntimeError) as info:
            compiled(_X, torch.tensor(bad))
        assert str(info.value) == "argument #2 'target' is out of range"


@pytest.mark.parametrize("device", ["cpu", "tpu"])
@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_compiled_multilabel_margin_loss_of_padded_targets_matches_the_cpu(reduction, device):
    # torch's decomposition (its Python kernel at the Autograd key, run while AOTAutograd traces) counted the slots
    # after a row's first -1 as targets of class 0: the compiled loss and gradient were not the CPU's
    torch._dynamo.reset()
    fn = lambda x, t: F.multilabel_margin_loss(x, t, reduction=reduction)  # noqa: E731
    x = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    t = torch.tensor([[3, 0, -1, 1, 4], [-1, 2, 2, 2, 2], [4, 3, 2, 1, 0], [1, -1, -1, 0, 0]])
    want_x, got_x = x.clone().requires_grad_(), x.clone().to(device).requires_grad_()
    want, got = fn(want_x, t), torch.compile(fn, backend="tpu")(got_x, t.to(device))
    want.sum().backward()
    got.sum().backward()
    torch.testing.assert_close(got.cpu(), want)
    torch.testing.assert_close(got_x.grad.cpu(), want_x.grad)


_REFUSED = {  # fn, input: the CPU has no kernel for the input's dtype (XLA would compute it); its error's type
    "softmax of ints": (lambda x: torch.softmax(x, 0) + 1, torch.arange(4)),
    "sign of complex": (lambda x: torch.sign(x) * 2, torch.ones(3, dtype=torch.complex64)),
    "matmul of bools": (lambda x: (x @ x).sum(), torch.ones(2, 2, dtype=torch.bool)),
    "topk of bools": (lambda x: torch.topk(x, 1).values, torch.ones(3, dtype=torch.bool)),
    # torch decomposes these into ops the CPU takes: asked while AOTAutograd traces tpu tensors (a graph of CPU
    # tensors computes them)
    "softplus of ints": (lambda x: F.softplus(x) * 2, torch.arange(4)),
    "logaddexp of ints": (lambda x: torch.logaddexp(x, x), torch.arange(4)),
    "xlogy of complex": (lambda x: torch.xlogy(x, x), torch.ones(3, dtype=torch.complex64)),
}
_TRACED_ONLY = ("softplus of ints", "logaddexp of ints", "xlogy of complex")


@pytest.mark.parametrize("case, device", [(c, d) for c in _REFUSED for d in ("cpu", "tpu")
                                          if d == "tpu" or c not in _TRACED_ONLY])
def test_a_compiled_call_the_cpu_refuses_for_its_dtypes_raises_its_error(case, device):
    # eager mode raises the CPU's error for such a call; a compiled graph computed it (an int softmax truncated to 0)
    fn, x = _REFUSED[case]
    with pytest.raises((NotImplementedError, RuntimeError)) as want:
        fn(x)
    torch._dynamo.reset()
    compiled = torch.compile(fn, backend="tpu")
    for _ in range(2):  # every call, as eager
        with pytest.raises(type(want.value)) as got:
            compiled(x.to(device))
        assert type(got.value) is type(want.value) and str(got.value) == str(want.value)
        assert any("test_compile_checks.py" in n for n in got.value.__notes__)  # the user's line
    # the same function on a dtype the CPU takes
    torch._dynamo.reset()
    torch.testing.assert_close(torch.compile(fn, backend="tpu")(x.to(device).float()).cpu(), fn(x.float()))


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_compiled_polygamma_in_place_matches_the_cpu(device):
    # functionalization did not pair ``polygamma_(self, n)`` with ``polygamma(n, self)`` (arguments swapped) and
    # refused it as a custom op with an aliased output (aot_eager and inductor fail alike)
    def f(x):
        y = x * 1
        y[1:].polygamma_(1)  # through a view
        return torch.Tensor.polygamma_(x * 2, 2), y

    x = torch.rand(5, dtype=torch.float64) + 1
    torch._dynamo.reset()
    got, want = torch.compile(f, backend="tpu")(x.to(device)), f(x)
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)
