"""Calls where the tpu device must answer as PyTorch on the CPU does: the same result, or the same error."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime

_I = torch.tensor([0, 1])
_F64 = torch.ones(2, dtype=torch.float64)

#: name → a call on ``(zeros(3), index, float64 source)`` of one device that the CPU refuses.
REFUSED = {
    "index_add source dtype": lambda z, i, s: z.index_add(0, i, s),
    "index_add_ source dtype": lambda z, i, s: z.index_add_(0, i, s),
    "index_add float index": lambda z, i, s: z.index_add(0, i.float(), s.float()),
    "index_copy source dtype": lambda z, i, s: z.index_copy(0, i, s),
    "index_copy int32 index": lambda z, i, s: z.index_copy(0, i.int(), s.float()),
    "index_reduce source dtype": lambda z, i, s: z.index_reduce(0, i, s, "prod"),
    "index_fill int32 index": lambda z, i, s: z.index_fill_(0, i.int(), 1.0),
    "index_put source dtype": lambda z, i, s: z.index_put((i,), s, accumulate=True),
    "setitem source dtype": lambda z, i, s: z.__setitem__(i, s),
    "setitem mask source dtype": lambda z, i, s: z.__setitem__(z > -1, torch.ones(3, dtype=s.dtype, device=s.device)),
    "put source dtype": lambda z, i, s: z.put_(i, s),
    "put int32 index": lambda z, i, s: z.put(i.int(), s.float()),
    "take int32 index": lambda z, i, s: z.take(i.int()),
    "t of 3-d": lambda z, i, s: z.view(3, 1, 1).t(),
    "as_strided past the storage": lambda z, i, s: z.as_strided((2, 2), (1, 2)),
    "as_strided of a view past the storage": lambda z, i, s: z[1:].as_strided((2,), (1,), 2),
    "as_strided negative offset": lambda z, i, s: z.as_strided((2,), (1,), -1),
    "view of a transpose": lambda z, i, s: z.add(torch.arange(6.0, device=z.device).view(2, 3)).t().view(-1),
    "copy_ not broadcastable": lambda z, i, s: z.view(3, 1).expand(3, 2).clone().copy_(torch.zeros(3, 3, device=z.device)),
    # the CPU's kernel checks these, its meta kernel does not (XLA computed something)
    "index_add source shape": lambda z, i, s: z.view(3, 1).expand(3, 2).index_add(0, i, s.float()),
    "conv2d negative padding": lambda z, i, s: F.conv2d(z.view(1, 1, 3, 1).expand(1, 1, 3, 3), z[:1].view(1, 1, 1, 1),
                                                        padding=-1),
    "masked_scatter uint8 mask": lambda z, i, s: z.masked_scatter(z.to(torch.uint8), s.float()),
    "histogramdd bins count": lambda z, i, s: torch.histogramdd(z.view(1, 3), [1, 1]),
    "arange integer step 0": lambda z, i, s: torch.arange(0, 4, 0.5, dtype=torch.int64, device=z.device),
    "cumsum dtype bool": lambda z, i, s: z.cumsum(0, dtype=torch.bool),  # (NotImplementedError: no bool kernel)
    "amax of an empty dim": lambda z, i, s: z.view(3, 1)[:0].amax(0),  # (IndexError; the meta's is a RuntimeError)
    "cumprod dtype bool": lambda z, i, s: z.cumprod(0, dtype=torch.bool),
}

ACCEPTED = {
    "index_add int32 index": lambda z, i, s: z.index_add(0, i.int(), s.float(), alpha=2),
    "setitem python number": lambda z, i, s: z.__setitem__(i, 2) or z,
    # a mask filled by a one-element host tensor is a masked_fill, its value cast as a scalar (was refused for its dtype)
    "setitem mask host value": lambda z, i, s: z.__setitem__(z > -1, torch.tensor(2.5, dtype=torch.float64)) or z,
    "index_put_ mask host value": lambda z, i, s: z.index_put_((z > -1,), torch.tensor([7], dtype=torch.int64)),
    "take": lambda z, i, s: z.add(1).take(i),
    "as_strided within the storage": lambda z, i, s: z.add(torch.arange(3.0, device=z.device))[1:].as_strided((2,), (1,), 1),
    "t of 1-d": lambda z, i, s: z.add(1).t(),
    "is_pinned": lambda z, i, s: z.is_pinned(),
    "index_add source shape": lambda z, i, s: z.view(3, 1).expand(3, 2).index_add(1, i, s.float().view(1, 2).expand(3, 2)),
    "conv2d zero padding": lambda z, i, s: F.conv2d(z.view(1, 1, 3, 1).add(1), z[:1].view(1, 1, 1, 1).add(2), padding=0),
}


def _on(device, fn):
    return fn(torch.zeros(3, device=device), _I.to(device), _F64.to(device))


@pytest.mark.parametrize("name", REFUSED)
def test_refused_as_on_cpu(name):
    with pytest.raises(Exception) as want:
        _on("cpu", REFUSED[name])
    with pytest.raises(want.type) as got:
        _on("tpu", REFUSED[name])
    assert str(got.value).splitlines()[0] == str(want.value).splitlines()[0]


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted_as_on_cpu(name):
    want, got = _on("cpu", ACCEPTED[name]), _on("tpu", ACCEPTED[name])
    if isinstance(want, torch.Tensor):
        assert torch.equal(got.cpu(), want)
    else:
        assert got == want


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_accumulating_scatters_of_bool_are_logical_or_and_and(mode):
    def run(device):
        t = torch.tensor([[True, False, True], [False, False, True]], device=device)
        idx = torch.tensor([[0, 0, 1], [2, 2, 0]], device=device)
        return [t.clone().scatter_(1, idx, True, reduce="add"), t.clone().scatter_(1, idx, False, reduce="multiply"),
                t.clone().scatter_add_(1, idx, t), t.clone().scatter_reduce_(1, idx, t, "sum", include_self=False),
                t.clone().scatter_reduce_(1, idx, t, "prod"),
                t.clone().index_add_(1, torch.tensor([0, 0, 1], device=device), t),
                t.clone().index_put_((torch.tensor([0, 0], device=device),), torch.tensor(True, device=device),
                                     accumulate=True),
                t.clone().put_(torch.tensor([0, 0, 4], device=device), torch.tensor([True, False, True], device=device),
                               accumulate=True)]

    with tpu_runtime.set_eager_mode(mode):
        got = [g.cpu() for g in run("tpu")]
    for g, w in zip(got, run("cpu")):
        assert torch.equal(g, w)


def test_debug_mode_does_not_compare_uninitialized_outputs():
    x = torch.ones(64, device="tpu")
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True):
        for _ in range(3):
            junk = torch.full((64,), 123.0)  # the CPU's empty_like may reuse this memory
            del junk
            out = torch.empty_like(x).fill_(2.0).cpu() + x.new_empty(64).fill_(1.0).cpu()
    assert torch.equal(out, torch.full((64,), 3.0))


@pytest.mark.parametrize("shape", [(0, 3), (3, 0), (2, 0, 3)])
@pytest.mark.parametrize("dim", [0, 1])
def test_unique_slices_of_empty_tensors(shape, dim):
    def run(device):
        x = torch.zeros(shape, device=device)
        out = []
        for f in (torch.unique, torch.unique_consecutive):
            try:
                out.append([(tuple(r.shape), r.dtype) for r in f(x, dim=dim, return_inverse=True, return_counts=True)])
            except RuntimeError as e:
                out.append(str(e))
        return out

    assert run("tpu") == run("cpu")


def test_to_meta_keeps_shape_and_dtype():
    t = torch.ones(2, 3, dtype=torch.float16, device="tpu").to("meta")
    assert t.device.type == "meta" and t.shape == (2, 3) and t.dtype == torch.float16


def test_forward_mode_ad_with_python_numbers_and_glu():
    """torch.func.jvp/jacfwd compare a tangent's metadata through ``.to("meta")`` (it came back a CPU tensor,
    and ``x * 2`` failed); F.glu's forward derivative is its own op (glu_jvp)."""
    import torch.autograd.forward_ad as fwAD
    from torch.func import jacfwd, jvp

    def run(device):
        g = torch.Generator().manual_seed(0)
        x, t = (torch.randn(4, 6, dtype=torch.float64, generator=g).to(device) for _ in range(2))
        out = [jvp(lambda v: v * 2 + 1, (x,), (t,))[1], jacfwd(lambda v: (v * 3).sum(0))(x)]
        with fwAD.dual_level():
            out.append(fwAD.unpack_dual(torch.nn.functional.glu(fwAD.make_dual(x, t), 1)).tangent)
        return [o.cpu() for o in out]

    for got, want in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(got, want)


def test_zero_to_a_complex_power_with_positive_real_part_is_zero():
    def run(device):
        z = torch.tensor([0j, 1j, 2 + 0j], device=device)
        return [z ** (1 + 2j), z ** torch.tensor([0.5 + 0j, 2j, 1 + 1j], device=device),
                torch.tensor([0.0, 2.0], device=device) ** (1 + 2j), z ** 2.5]

    for got, want in zip(run("tpu"), run("cpu")):
        torch.testing.assert_close(got.cpu(), want)


def test_bit_shifts_of_bool_tensors_promote_as_on_cpu():
    def run(device):
        b = torch.tensor([True, False], device=device)
        i = torch.tensor([1, 2], dtype=torch.int8, device=device)
        return [b << 2, b >> 1, i << b, torch.bitwise_left_shift(b, 1), torch.bitwise_right_shift(8, b), i >> 1]

    for got, want in zip(run("tpu"), run("cpu")):
        assert got.dtype == want.dtype and torch.equal(got.cpu(), want)


def test_antialiased_resize_of_uint8_images_matches_cpu():
    img = torch.randint(0, 256, (1, 3, 5, 6), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    for mode in ("bilinear", "bicubic"):
        want = torch.nn.functional.interpolate(img, size=(3, 9), mode=mode, antialias=True)
        got = torch.nn.functional.interpolate(img.to("tpu"), size=(3, 9), mode=mode, antialias=True).cpu()
        # (the CPU's uint8 kernel is fixed point: within one level of the float computation's rounding)
        assert got.dtype == torch.uint8 and (got.int() - want.int()).abs().max() <= 1, mode


def test_index_add_with_a_0d_index_and_index_select_backward():
    x = torch.zeros(5, 6)
    want = x.clone().index_add_(0, torch.tensor(1), torch.ones(1, 6))
    got = x.to("tpu").index_add_(0, torch.tensor(1, device="tpu"), torch.ones(1, 6, device="tpu")).cpu()
    assert torch.equal(got, want)
    w = torch.randn(5, 6, device="tpu", requires_grad=True)
    (w.index_select(0, torch.tensor(1, device="tpu")) * 2).sum().backward()
    assert torch.equal(w.grad.cpu(), torch.zeros(5, 6).index_fill_(0, torch.tensor(1), 2.0))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_views_in_and_out_of_inference_mode(mode):
    a = torch.arange(6.0, device="tpu").reshape(2, 3)
    with tpu_runtime.set_eager_mode(mode):
        with torch.inference_mode():
            views = [a[1:], a.t(), a.unsqueeze(0), a.detach(), a.view(6)]  # (a causal-mask buffer's slice)
            made = torch.ones(3, device="tpu")
        assert not any(v.is_inference() for v in views)
        assert torch.equal(views[1].cpu(), torch.arange(6.0).reshape(2, 3).t())
        v = made.view(3)
        assert v.is_inference()
        with pytest.raises(RuntimeError, match="Inplace update to inference tensor outside InferenceMode"):
            v.add_(1)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int32])
def test_max_pool_indices_never_point_into_padding(dtype):
    x = torch.full((1, 1, 4, 4), torch.finfo(dtype).min if dtype.is_floating_point else torch.iinfo(dtype).min,
                   dtype=dtype)
    if dtype.is_floating_point:
        x.fill_(float("-inf"))
    want = torch.nn.functional.max_pool2d(x, 3, 2, padding=1, return_indices=True)[1]
    got = torch.nn.functional.max_pool2d(x.to("tpu"), 3, 2, padding=1, return_indices=True)[1].cpu()
    assert torch.equal(got, want)


def test_deepcopy_of_a_non_leaf_and_backward_with_a_cpu_gradient_raise_as_on_other_devices():
    a = torch.ones(3, device="tpu", requires_grad=True)
    with pytest.raises(RuntimeError, match="graph leaves"):
        __import__("copy").deepcopy(a * 2)
    with pytest.raises(RuntimeError, match="expected device tpu:0 but got cpu"):
        (a * 2).backward(torch.ones(3))
    (a * 2).sum().backward(torch.tensor(1.0))  # a 0-d CPU gradient is allowed, as on CUDA
    assert a.grad.device.type == "tpu" and torch.equal(a.grad.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("mode,shape,size", [("linear", (1, 2, 4), (0,)), ("bilinear", (1, 2, 4, 4), (0, 2)),
                                             ("bicubic", (1, 2, 4, 4), (2, 0)), ("trilinear", (1, 1, 2, 2, 2), (0, 1, 1)),
                                             ("nearest-exact", (1, 2, 4), (0,))])
def test_interpolate_to_an_empty_size_raises_as_on_the_cpu(mode, shape, size):
    # the decompositions divided by the output size: ZeroDivisionError instead of torch's check
    x = torch.randn(*shape)
    with pytest.raises(RuntimeError) as cpu:
        torch.nn.functional.interpolate(x, size=size, mode=mode)
    with pytest.raises(RuntimeError, match="Input and output sizes should be greater than 0") as tpu:
        torch.nn.functional.interpolate(x.to("tpu"), size=size, mode=mode)
    assert str(tpu.value).split("\n")[0] == str(cpu.value).split("\n")[0]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_nearest_interpolation_of_an_empty_batch_runs_as_on_the_cpu(mode):
    # torch's meta kernel of upsample_nearest* hands torch._check an int for an empty input (a TypeError): the CPU
    # resizes an empty batch and refuses empty channels or spatial dims with its own RuntimeError
    calls = [((0, 2, 4, 4), {"scale_factor": 2}), ((0, 2, 4), {"size": 7}),
             ((0, 1, 2, 3, 3), {"scale_factor": 2, "mode": "nearest-exact"}), ((0, 2, 4, 4), {"size": (3, 5)})]
    with tpu_runtime.eager_mode(mode):
        for shape, kwargs in calls:
            x = torch.zeros(shape, requires_grad=True)
            xt = x.detach().to("tpu").requires_grad_()
            want, got = torch.nn.functional.interpolate(x, **kwargs), torch.nn.functional.interpolate(xt, **kwargs)
            want.sum().backward()
            got.sum().backward()
            assert got.shape == want.shape and xt.grad.shape == x.grad.shape == shape
        for shape in ((2, 0, 3, 3), (1, 2, 0, 4)):
            with pytest.raises(RuntimeError) as cpu:
                torch.nn.functional.interpolate(torch.zeros(shape), scale_factor=2)
            with pytest.raises(RuntimeError) as tpu:
                torch.nn.functional.interpolate(torch.zeros(shape, device="tpu"), scale_factor=2)
            assert str(tpu.value).split("\n")[0] == str(cpu.value).split("\n")[0]


def test_a_convolution_over_zero_input_channels_gives_torchs_empty_result():
    # torch answers an empty tensor of its own shape; the lowering's non-empty one was refused as a shape mismatch
    x, w = torch.randn(2, 0, 3, 3), torch.ones(2, 0, 1, 1)
    want = torch.nn.functional.conv2d(x, w)
    got = torch.nn.functional.conv2d(x.to("tpu"), w.to("tpu"))
    assert got.shape == want.shape == (2, 0, 3, 3)


@pytest.mark.parametrize("mode", ["strict", "fused", "compile"])
def test_a_value_times_a_bool_mask_keeps_ieee_nan_and_signed_zero(mode):
    # XLA rewrites x * convert(mask) into select(mask, x, 0): inf * False gave 0 where the CPU gives nan (renorm's
    # gradient at p=inf), and -2 * False +0 where the CPU gives -0
    x = torch.tensor([[float("inf"), float("nan"), 1.0, -float("inf"), -2.0]], dtype=torch.float64)
    m = torch.tensor([[True, False, False, False, False]] * 3)

    def f(x, m):  # (the converted masks: XLA's rewrite also matches a separate convert in one graph)
        return x * m, m * float("inf"), torch.mul(m, x.float()), x * m.double(), m.to(torch.complex64) * x.cfloat()

    run = torch.compile(f, backend="tpu") if mode == "compile" else f
    with tpu_runtime.set_eager_mode("strict" if mode == "compile" else mode):
        got = run(x.to("tpu"), m.to("tpu"))
    for g, w in zip(got, f(x, m)):
        torch.testing.assert_close(g.cpu(), w, equal_nan=True, rtol=0, atol=0)
        g, w = (torch.view_as_real(t) if t.is_complex() else t for t in (g.cpu(), w))
        assert torch.equal(g.signbit() & ~w.isnan(), w.signbit() & ~w.isnan())  # (a NaN's sign is x86's)


@pytest.mark.parametrize("mode", ["fused", "compile"])
@pytest.mark.parametrize("norm", ["layer_norm", "batch_norm", "instance_norm"])
def test_max_pool_gradient_after_a_norm_in_one_graph(mode, norm):
    # the lowering found each window's maximum by comparing the window with reduce_window's result, and XLA
    # computed the norm's output once for each of the two, a rounding apart: no element matched, the window's first
    # element took the gradient (errors of 1.0 in fused eager and torch.compile; strict eager was right)
    import torch.nn.functional as F

    norms = {"layer_norm": lambda t: F.layer_norm(t, (3, 3, 3)),
             "batch_norm": lambda t: F.batch_norm(t, None, None, training=True),
             "instance_norm": F.instance_norm}

    def f(t):
        return F.max_pool3d(norms[norm](t), 2, ceil_mode=True).sum()

    x = torch.randn(2, 4, 3, 3, 3, generator=torch.Generator().manual_seed(0))
    xc, xt = x.clone().requires_grad_(), x.to("tpu").requires_grad_()
    f(xc).backward()
    if mode == "compile":
        torch._dynamo.reset()
        torch.compile(f, backend="tpu")(xt).backward()
    else:
        with tpu_runtime.set_eager_mode("fused"):
            f(xt).backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_max_pool_indices_of_windows_with_nans_are_the_cpus(mode):
    # torch's CPU kernels take an element greater than the maximum so far, or NaN: the last NaN of a window (the
    # device reported the first, which also sent the window's gradient elsewhere)
    nan = float("nan")
    x = torch.tensor([[[[1.0, nan, 2.0, nan], [nan, 0.0, 5.0, 1.0], [1.0, 2.0, 3.0, 4.0], [nan, nan, nan, nan]]]])
    calls = [lambda t: F.max_pool2d(t, 2, return_indices=True), lambda t: F.max_pool2d(t, 3, 1, 1, return_indices=True),
             lambda t: F.adaptive_max_pool2d(t, 3, return_indices=True),
             lambda t: F.max_pool1d(t[0], 2, return_indices=True), lambda t: F.adaptive_max_pool1d(t[0], 3, True),
             lambda t: F.max_pool3d(t, (1, 2, 2), return_indices=True)]
    with tpu_runtime.eager_mode(mode):
        for call in calls:
            (values, indices), (got_values, got_indices) = call(x), call(x.to("tpu"))
            assert torch.equal(got_indices.cpu(), indices)
            assert torch.equal(got_values.cpu().isnan(), values.isnan())
