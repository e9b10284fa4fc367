"""Views of tpu tensors: writes through them reach the base, and they report the CPU's strides and offsets."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_inplace_writes_through_views_reach_the_base(mode):
    x = torch.arange(12.0).reshape(4, 3)
    with tpu_runtime.set_eager_mode(mode):
        t = x.to("tpu")
        t[:, 1].add_(100)            # select: column 1
        t.t()[0].mul_(-1)            # transpose + select: column 0
        t.view(-1)[-1] = 7           # view of everything: last element
        t[1:3, :2].fill_(0)          # slice of a slice
        x[:, 1] += 100               # the CPU source changes after the upload: the device copy must not
        x.t()[0] *= -1
        x.view(-1)[-1] = 7
        x[1:3, :2] = 0
        assert torch.equal(t.cpu(), x)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_inplace_ops_cast_to_the_target_and_scalars_keep_their_sign(mode):
    x = torch.randn(2, 3)
    with tpu_runtime.set_eager_mode(mode):
        h = torch.zeros(2, 3, dtype=torch.float16).to("tpu")
        h.add_(x.to("tpu"), alpha=0.5)  # a float32 result written into a float16 tensor
        h.mul_(3.0).mul_(3.0)           # the same python float twice: one cached device scalar
        t = x.to("tpu")
        signs = torch.cat([(t.abs() + 1) * -0.0, (t.abs() + 1) * 0.0]).reciprocal().cpu()
        with pytest.raises(RuntimeError, match="broadcast shape"):
            t[0].add_(t * 1)
        with pytest.raises(RuntimeError, match="refer to a single memory location"):  # (the CPU: overlap first)
            t[0].add_(t)
    assert h.dtype == torch.float16
    torch.testing.assert_close(h.cpu(), (x * 0.5).half() * 3.0 * 3.0, rtol=2e-3, atol=2e-3)
    assert (signs[:2] == float("-inf")).all() and (signs[2:] == float("inf")).all()


def test_views_see_later_writes_to_the_base():
    t = torch.zeros(4, 3).to("tpu")
    row, col = t[2], t.transpose(0, 1)[1]
    t.add_(1)
    t[2, 1] = 5
    assert torch.equal(row.cpu(), torch.tensor([1.0, 5.0, 1.0]))
    assert torch.equal(col.cpu(), torch.tensor([1.0, 1.0, 5.0, 1.0]))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_permuted_views_report_the_cpu_strides_and_undo_to_the_base_layout(mode):
    x = torch.arange(24.0).reshape(2, 3, 4)
    with tpu_runtime.set_eager_mode(mode):
        t = x.to("tpu")
        p = t.permute(2, 0, 1)
        assert p.stride() == x.permute(2, 0, 1).stride() and not p.is_contiguous()
        assert p.transpose(0, -1).stride() == x.permute(2, 0, 1).transpose(0, -1).stride()
        back = p.permute(1, 2, 0)  # undoes p: t's layout, and t's values with no view to replay
        assert back.is_contiguous() and back.stride() == x.stride()
        back.mul_(2)
        assert torch.equal(t.cpu(), x * 2) and torch.equal(p.cpu(), (x * 2).permute(2, 0, 1))
        c = p.contiguous()  # a copy now: a dense tensor with p's values
        assert c.is_contiguous() and torch.equal(c.cpu(), (x * 2).permute(2, 0, 1))
        p[0].fill_(-1)  # a select of the permuted view still writes into t
        x = x * 2
        x.permute(2, 0, 1)[0].fill_(-1)
        assert torch.equal(t.cpu(), x)
        t.transpose_(0, 2)  # in place: t becomes the permuted view, with its strides
        assert t.stride() == x.transpose(0, 2).stride() and torch.equal(t.cpu(), x.transpose(0, 2))
        r = t.transpose(0, 2).reshape(4, 6).t()  # a permute of a reshape of the storage: true strides too
        assert r.stride() == x.reshape(4, 6).t().stride() and torch.equal(r.cpu(), x.reshape(4, 6).t())
        xt = x.transpose(0, 2)  # as_strided of a permuted view indexes its storage, as on the CPU
        for size, stride in ((t.size(), t.stride()), ((2, 3), (1, 4)), ((4, 2), (2, 5))):
            assert torch.equal(t.as_strided(size, stride).cpu(), xt.as_strided(size, stride))


_LAID_OUT_VIEWS = {
    "rows": lambda a: a[1:3],
    "columns": lambda a: a[:, 1:5:2],
    "select": lambda a: a[2],
    "column": lambda a: a[:, 3],
    "expand": lambda a: a[1:2].expand(3, 6),
    "unsqueeze": lambda a: a[:, 2:].unsqueeze(1),
    "diagonal": lambda a: a.diagonal(1),
    "split": lambda a: a.split(2, dim=1)[1],
    "unbind": lambda a: a.t().unbind(0)[4],
    "slice_of_transpose": lambda a: a.t()[2:5, 1:],
    "transpose_of_slice": lambda a: a[1:, 2:].t(),
    "chain": lambda a: a[1:].view(3, 2, 3).permute(2, 0, 1)[1:, :, 1],
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("view", sorted(_LAID_OUT_VIEWS))
def test_views_report_the_cpu_strides_and_storage_offset(view, mode):
    # a view of a tensor whose layout is known reports what the CPU does: slices and selects their
    # offsets, expands their zero strides; as_strided of it indexes the storage from its offset
    make = _LAID_OUT_VIEWS[view]
    x = torch.arange(24.0).reshape(4, 6)
    with tpu_runtime.set_eager_mode(mode):
        t = x.to("tpu")
        got, want = make(t), make(x)
        assert (got.shape, got.stride(), got.storage_offset()) == (want.shape, want.stride(), want.storage_offset())
        assert got.is_contiguous() == want.is_contiguous() and torch.equal(got.cpu(), want)
        assert torch.equal(got.as_strided((2, 2), (1, 3)).cpu(), want.as_strided((2, 2), (1, 3)))
        assert torch.equal(got.as_strided((3,), (2,), 5).cpu(), want.as_strided((3,), (2,), 5))
        if view != "expand":  # written through, the base sees it
            got.mul_(-1)
            want.mul_(-1)
            assert torch.equal(t.cpu(), x)
        assert torch.equal(make(t).contiguous().cpu(), make(x).contiguous())


def test_write_through_expanded_view_is_refused():
    t = torch.zeros(1, 3).to("tpu")
    with pytest.raises(RuntimeError, match="more than one element"):
        t.expand(4, 3).add_(1)
    with pytest.raises(RuntimeError, match="more than one element"):  # a tensor value: the CPU checks too
        t.expand(4, 3).fill_(torch.tensor(2.0))
    with pytest.raises(RuntimeError, match="more than one element"):
        t.t().expand(3, 2)[0] = 4.5


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_fill_through_expanded_view(mode):
    """fill_/zero_ write one number into every element: the CPU allows them through an expanded view."""
    def run(device):
        b = torch.zeros(2, 1, dtype=torch.int64, device=device)
        e = b.expand(2, 3)
        e[0].fill_(4.5)       # a select of the expanded view, its elements one
        e[1:, 1:].fill_(7)
        c = torch.ones(3, device=device)
        c[None].expand(2, 3).zero_()
        c[None].expand(2, 3)[1] = torch.tensor([1.0, 2.0, 3.0], device=device)  # x.expand(2, 3)[1] does not overlap
        return b.cpu(), e.cpu(), c.cpu()

    with tpu_runtime.set_eager_mode(mode):
        got = run("tpu")
    for g, w in zip(got, run("cpu")):
        assert g.dtype == w.dtype and torch.equal(g, w)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_polygamma_in_place_takes_its_arguments_the_other_way_round(mode):
    x = torch.rand(2, 5) + 0.5
    want = x.clone()
    want[1, 1:4].polygamma_(2)
    with tpu_runtime.set_eager_mode(mode):
        t = x.to("tpu")
        assert t[1, 1:4].polygamma_(2).shape == (3,)  # (the functional op is polygamma(n, self))
        torch.testing.assert_close(t.cpu(), want)
        with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
            torch.ones(3, dtype=torch.long, device="tpu").polygamma_(1)


@pytest.mark.parametrize("split", [lambda x: torch.unsafe_chunk(x, 3, 1), lambda x: torch.unsafe_split(x, 1, 1),
                                   lambda x: torch.unsafe_split_with_sizes(x, [2, 1], 1)],
                         ids=["unsafe_chunk", "unsafe_split", "unsafe_split_with_sizes"])
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_unsafe_splits_are_views_of_their_input_as_on_the_cpu(mode, split):
    # they were copies: a write into a part did not reach the input, and the parts reported dense strides
    results = []
    for device in ("cpu", "tpu"):
        with tpu_runtime.set_eager_mode(mode):
            x = torch.arange(24.0).reshape(2, 3, 4).to(device)
            parts = split(x)
            parts[0].fill_(-1)
            results.append((x.cpu(), [p.stride() for p in parts], [p.storage_offset() for p in parts]))
    assert torch.equal(results[1][0], results[0][0]) and results[1][1:] == results[0][1:]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_nonzero_is_laid_out_column_major_as_on_the_cpu(mode):
    # its result reported dense strides (2, 1): .view(-1) of it worked where the CPU's refuses, and torch.where's
    # columns were strided
    x = torch.tensor([[1, 0, 2], [0, 3, 4]])
    with tpu_runtime.set_eager_mode(mode):
        for fn in (torch.nonzero, torch.argwhere, lambda t: torch.where(t)[1]):
            want, got = fn(x), fn(x.to("tpu"))
            assert (got.stride(), got.storage_offset()) == (want.stride(), want.storage_offset())
            assert torch.equal(got.cpu(), want)
        with pytest.raises(RuntimeError, match="view size is not compatible"):
            torch.nonzero(x.to("tpu")).view(-1)


#: Writes whose source partly overlaps the written tensor in their storage (the CPU refuses them), and writes it
#: takes (the same elements and layout; a source it cannot judge, strided; no overlap).
_OVERLAPS = {"copy_ shifted": (lambda x: x[1:].copy_(x[:-1]), True),
             "add_ transposed": (lambda x: x[:9].view(3, 3).add_(x[:9].view(3, 3).t()), True),
             "add_ shifted": (lambda x: x[2:7].add_(x[:5]), True),
             "out= shifted": (lambda x: torch.add(x[:5], 1, out=x[2:7]), True),
             "add_ itself": (lambda x: x[2:7].add_(x[2:7]), False),
             "add_ strided source": (lambda x: x[:4].add_(x[::3]), False),
             "copy_ disjoint": (lambda x: x[:4].copy_(x[4:8]), False),
             # scatters, index writes and cat refuse their written tensor itself as a source too (assert_no_overlap)
             "scatter_add_ itself": (lambda x: x.scatter_add_(0, torch.tensor([1, 0, 3]).to(x.device), x), True),
             "scatter_ itself": (lambda x: x.scatter_(0, torch.tensor([1, 0]).to(x.device), x), True),
             "scatter_reduce_ itself": (lambda x: x.scatter_reduce_(0, torch.tensor([2]).to(x.device), x, "sum"), True),
             "index_add_ itself": (lambda x: x.index_add_(0, torch.arange(12).flip(0).to(x.device), x), True),
             "index_copy_ view": (lambda x: x[:3].index_copy_(0, torch.tensor([2, 1]).to(x.device), x[1:3]), True),
             "index_put_ itself": (lambda x: x.index_put_((torch.arange(12).to(x.device),), x, accumulate=True), True),
             "cat out= itself": (lambda x: torch.cat([x[:6], x[:6]], out=x), True),
             "index_add_ other": (lambda x: x.index_add_(0, torch.tensor([2, 0]).to(x.device), x[:2].clone()), False)}


@pytest.mark.parametrize("name", list(_OVERLAPS))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_writes_from_a_partly_overlapping_source_are_refused_as_on_the_cpu(mode, name):
    # they were computed as if from a copy
    fn, refused = _OVERLAPS[name]
    results = []
    for device in ("cpu", "tpu"):
        with tpu_runtime.set_eager_mode(mode):
            x = torch.arange(12.0).to(device)
            try:
                fn(x)
                results.append(x.cpu())
            except RuntimeError as e:
                results.append(str(e))
    assert results[1] == results[0] if refused else torch.equal(results[1], results[0])
    assert isinstance(results[0], str) == refused
