"""resize_, resize_as_, set_ and out= tensors of another shape on the tpu device, against CPU."""

import pytest
import torch

import tpu_runtime

MODES = ["strict", "fused"]


@pytest.mark.parametrize("mode", MODES)
def test_resize_keeps_torchs_storage_semantics(mode):
    # shrinking keeps the storage (growing back within it brings the elements back); a view taken
    # before the shrink still aliases the tensor; growing past the storage keeps the elements in order
    with tpu_runtime.set_eager_mode(mode):
        for device in ("cpu", "tpu"):
            x = torch.arange(6.0, device=device)
            head = x[:2]
            x.resize_(2, 2)
            assert x.shape == (2, 2)
            shrunk = x.cpu().clone()
            x.add_(10)
            seen = head.cpu().clone()
            x.resize_(6)
            back = x.cpu().clone()
            x.resize_(3, 3)
            grown = x.cpu().reshape(-1)[:6].clone()
            if device == "cpu":
                want = shrunk, seen, back, grown
        got = shrunk, seen, back, grown
    for w, g in zip(want, got):
        torch.testing.assert_close(g, w)
    assert x.shape == (3, 3) and x.device.type == "tpu"
    assert x.cpu().reshape(-1)[6:].eq(0).all()  # new elements: uninitialized in torch, zeros here


def test_resize_as_set_and_empty_set():
    x = torch.randn(2, 3).to("tpu")
    y = torch.empty(0, device="tpu")
    y.resize_as_(x)
    assert y.shape == (2, 3)
    z = torch.empty(5, device="tpu")
    z.set_(x)
    z.mul_(2)  # an alias: x changes too
    assert z.shape == (2, 3)
    torch.testing.assert_close(x.cpu(), z.cpu())
    z.set_()
    assert z.shape == (0,) and x.shape == (2, 3)
    with pytest.raises(RuntimeError, match="Could not set tensor of type"):
        z.set_(torch.ones(2, dtype=torch.int64, device="tpu"))


@pytest.mark.parametrize("mode", MODES)
def test_out_tensors_of_another_shape_are_resized(mode):
    # torch resizes out= tensors: silently when empty, with its deprecation warning otherwise; max.dim_max
    # and sum.IntList_out had no functional twin (prims.sum was reported unsupported)
    a, b = torch.randn(3, 4), torch.randn(3, 4)
    want = [torch.cat([a, b]), a + b, a.sum(0), a.max(1).values, a.max(1).indices, torch.xlogy(2.0, a.abs())]
    with tpu_runtime.set_eager_mode(mode):
        ta, tb = a.to("tpu"), b.to("tpu")
        outs = [torch.empty(0, device="tpu") for _ in range(4)] + [torch.empty(0, dtype=torch.int64, device="tpu"),
                                                                   torch.empty(0, device="tpu")]
        torch.cat([ta, tb], out=outs[0])
        with pytest.warns(UserWarning, match=r"had shape \[2, 2\], which does not match the required output shape"):
            torch.add(ta, tb, out=torch.empty(2, 2, device="tpu"))
        torch.add(ta, tb, out=outs[1])
        torch.sum(ta, 0, out=outs[2])
        torch.max(ta, 1, out=(outs[3], outs[4]))
        torch.xlogy(2.0, ta.abs(), out=outs[5])
    for w, o in zip(want, outs):
        assert o.shape == w.shape and o.dtype == w.dtype
        torch.testing.assert_close(o.cpu(), w)


def test_resize_errors_name_the_problem():
    x = torch.zeros(4, 4, device="tpu")
    with pytest.raises(RuntimeError, match=r"resize_ of a view of a tpu tensor \(shape \[1, 2\]\) to \[8\] is not "
                                           r"supported beyond its storage"):
        x[3:, :2].resize_(8)  # (torch moves the storage to a larger one that its other views follow)
    with pytest.raises(RuntimeError, match="cannot resize variables that require grad"):
        torch.zeros(2, device="tpu", requires_grad=True).resize_(3)
    with pytest.raises(RuntimeError, match="negative dimension"):
        x.resize_(-1, 2)
    x[:, :2].resize_(4, 2)  # its own shape: nothing to do


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_resize_of_a_view_lays_it_out_again_from_its_storage_offset(mode):
    def run(device):
        b = torch.arange(12.0, device=device)
        v = b[3:7]
        v.resize_(2, 2)
        v[0, 0] = -1.0  # still a view of b
        t = b.view(3, 4).t()
        t.resize_(2, 3)  # from offset 0, contiguous
        s = b[2:]
        s.resize_(3)
        s.resize_(10)  # within the storage: its elements come back
        return [(r.cpu(), r.stride(), r.storage_offset()) for r in (b, v, t, s)]

    with tpu_runtime.set_eager_mode(mode):
        got = run("tpu")
    for (g, gs, go), (w, ws, wo) in zip(got, run("cpu")):
        assert torch.equal(g, w) and gs == ws and go == wo


def test_is_set_to_compares_storage_offset_sizes_and_strides_as_on_cpu():
    # the op had no route on the device
    for device in ("cpu", "tpu"):
        x = torch.arange(6.0, device=device)
        got = [x.is_set_to(x), x.is_set_to(x.view(2, 3)), x.is_set_to(x.clone()), x.view(2, 3).is_set_to(x.view(2, 3)),
               x[1:].is_set_to(x[1:]), x[1:].is_set_to(x[:5])]
        assert got == [True, False, False, True, True, False], device


def test_a_cpu_tensor_moved_to_the_device_stays_resizable():
    # the upload read the tensor through Tensor.numpy(), which marks its storage non-resizable for good: a later
    # resize_ or out= of another size raised "Trying to resize storage that is not resizable"
    a, b = torch.empty(0), torch.randn(2)
    a.to("tpu"), b.to("tpu"), (b.to("tpu") * 2).cpu()
    torch.add(torch.ones(3), 1, out=a)
    b.resize_(5)
    assert a.tolist() == [2.0, 2.0, 2.0] and b.shape == (5,)


def test_negated_and_conjugated_cpu_views_copy_their_values():
    # host data is read through DLPack, which exports the raw memory: a CPU view with the negative or conjugate bit
    # set must be resolved first (copy_ into a tpu tensor gave the un-negated values; a conjugate raised BufferError)
    neg = torch._neg_view(torch.arange(4.0))
    conj = torch.tensor([1 + 2j, 3 - 4j]).conj()
    for src in (neg, conj, torch._neg_view(torch.arange(4.0).bfloat16())):
        dst = torch.zeros(src.shape, dtype=src.dtype).to("tpu")
        dst.copy_(src)
        assert torch.equal(dst.cpu(), src.resolve_conj().resolve_neg())
    torch._dynamo.reset()
    compiled = torch.compile(lambda t: t * 2 + 1, backend="tpu")
    assert torch.equal(compiled(neg), neg * 2 + 1)


@pytest.mark.parametrize("mode", MODES)
def test_resize_of_a_channels_last_tensor_reads_its_storage_in_channels_last_order(mode):
    x = torch.arange(24.0).reshape(1, 2, 3, 4).contiguous(memory_format=torch.channels_last)
    with tpu_runtime.set_eager_mode(mode):
        results = {}
        for device in ("cpu", "tpu"):
            t = x.clone().to(device)
            t.resize_(2, 6)
            shrunk = t.cpu().clone()
            t.mul_(-1)  # a view of the storage: the write stays
            t.resize_(24)
            back = t.cpu().clone()
            t = x.clone().to(device)[:, :, 1:]  # a view (storage offset 8), laid out from its offset
            t.resize_(4, 4)
            results[device] = shrunk, back, t.cpu(), t.stride()
    want, got = results["cpu"], results["tpu"]
    for w, g in zip(want[:3], got[:3]):
        torch.testing.assert_close(g, w, rtol=0, atol=0)
    assert got[3] == want[3]
