"""Debug eager's comparison with the CPU judges each output by what is unique about it (found by
``examples/opinfo_sweep.py --mode debug``: 24 ops whose results matched the CPU's were flagged)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch
import torch.nn.functional as F

import tpu_runtime
from converter.errors import ParityError
from converter.lowering.registry import override

aten = torch.ops.aten


def _compare(fn, *args):
    """``fn(*args)`` on tpu copies in debug eager comparing each op with the CPU (raising on a difference)."""
    tpu = [a.to("tpu") if isinstance(a, torch.Tensor) else a for a in args]
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True, check_nan=False):
        out = fn(*tpu)
        assert tpu_runtime.debug_report.compared > 0
    return out


def test_complex_outputs_are_compared_within_tolerance():
    # fft results were compared exactly (complex is not floating point): every fft was a "difference"
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 10, 7, generator=g)
    _compare(lambda t: (torch.fft.rfft(t), torch.fft.fft2(t.to(torch.complex64)), torch.fft.ifft(t)), x)


def test_a_wrong_imaginary_part_is_flagged():
    z = torch.tensor([[0.5 + 1.0j, -1.0 + 0.25j, 2.0 - 0.5j]])  # a shape no other test uses
    with override(aten.exp.default, lambda ctx, x: jnp.conj(jnp.exp(x))):  # the real part is right
        try:
            with pytest.raises(ParityError, match=r"aten\.exp\.default output 0"):
                _compare(torch.exp, z)
        finally:
            tpu_runtime.clear_cache()


def test_vectors_unique_up_to_a_sign_and_bookkeeping_outputs_are_not_flagged():
    g = torch.Generator().manual_seed(1)
    a = torch.randn(4, 5, 5, generator=g)
    sym = a + a.mT
    _compare(lambda t, s: (torch.linalg.svd(t), torch.linalg.eigh(s), torch.linalg.eig(t), torch.linalg.svdvals(t)),
             a, sym)
    w, idx, offsets = torch.randn(10, 3, generator=g), torch.tensor([1, 2, 4, 5, 4]), torch.tensor([0, 2])
    _compare(lambda w, i, o: F.embedding_bag(i, w, o, mode="sum"), w, idx, offsets)
    logp = torch.randn(12, 2, 6, generator=g).log_softmax(-1)
    targets = torch.tensor([[1, 2, 2], [3, 1, 0]])
    _compare(lambda lp, t: F.ctc_loss(lp, t, [12, 10], [3, 2]), logp, targets)


def _last_max(ctx, x, dim, keepdim=False):
    """``max.dim`` picking the last of equal maxima (the CPU picks the first)."""
    flipped = jnp.flip(x, dim)
    idx = x.shape[dim] - 1 - jnp.argmax(flipped, axis=dim, keepdims=keepdim)
    return jnp.max(x, axis=dim, keepdims=keepdim), idx.astype(jnp.int64)


def _wrong_index(ctx, x, dim, keepdim=False):
    """``max.dim`` with the right values and index 0 everywhere."""
    return jnp.max(x, axis=dim, keepdims=keepdim), jnp.zeros(jnp.max(x, axis=dim, keepdims=keepdim).shape, jnp.int64)


@pytest.mark.parametrize("keepdim", [False, True])
def test_an_index_picking_another_of_equal_values_passes_and_a_wrong_one_is_flagged(keepdim):
    x = torch.tensor([[1.0, 3.0, 3.0, 0.5, 3.0, 2.5, 0.0]] * 3)  # a shape no other test uses; ties for the max
    x[1, 0] = 7.0
    try:
        with override(aten.max.dim, _last_max):
            values, idx = _compare(lambda t: torch.max(t, 1, keepdim=keepdim), x)
        assert idx.cpu().flatten().tolist() == [4, 0, 4]  # the device's own picks, not the CPU's [1, 0, 1]
        tpu_runtime.clear_cache()
        with override(aten.max.dim, _wrong_index):
            with pytest.raises(ParityError, match=r"aten\.max\.dim output 1"):
                _compare(lambda t: torch.max(t, 1, keepdim=keepdim), x)
    finally:
        tpu_runtime.clear_cache()


def test_a_median_of_repeated_values_passes():
    # the sweep's masked.median: nanmedian's index among repeated values
    x = torch.tensor([[2.0, 1.0, 2.0, float("nan"), 2.0], [5.0, 5.0, 1.0, 5.0, 1.0]])
    _compare(lambda t: (t.nanmedian(1), t.median(1), t.sort(1), t.topk(2, 1), t.kthvalue(2, 1), t.cummax(1)), x)


def test_cpu_references_resolve_the_lazy_conjugates_they_make():
    # the CPU's linalg_lu_solve(left=False) and pinv of complex matrices solve with .mH views: run inside the
    # device's kernel (where torch has excluded the Conjugate key) they read them unconjugated and differed
    g = torch.Generator().manual_seed(2)
    a = torch.randn(3, 3, dtype=torch.complex64, generator=g)
    b = torch.randn(4, 3, dtype=torch.complex64, generator=g)
    lu, piv = torch.linalg.lu_factor(a)
    got = _compare(lambda lu, piv, b, a: (torch.linalg.lu_solve(lu, piv, b, left=False), torch.linalg.pinv(a)),
                   lu, piv, b, a)
    torch.testing.assert_close(got[0].cpu(), torch.linalg.lu_solve(lu, piv, b, left=False))


def test_half_precision_is_judged_against_the_exact_result():
    # the device rounds a bfloat16 col2im once (float32 within, as GPUs): 0.05 from the float64 result where the
    # CPU, adding in bfloat16 one patch at a time, is 0.14, outside bfloat16's tolerance of each other. (Every
    # conv_transpose was flagged on CPUs whose oneDNN has no bfloat16 deconvolution and falls back on col2im; the
    # test takes col2im itself, whose CPU kernel rounds per step on any CPU.)
    g = torch.Generator().manual_seed(0)
    cols = (torch.randn(1, 25, 16, generator=g) * 3).bfloat16()
    got = _compare(lambda t: F.fold(t, (8, 8), 5), cols)
    assert not torch.allclose(got.cpu().float(), F.fold(cols, (8, 8), 5).float(), rtol=2e-2, atol=1e-2)
    z = torch.tensor([[0.5, -1.25, 3.0, 7.5, 0.75, 2.0, -4.0]], dtype=torch.bfloat16)  # a shape no other test uses
    try:
        with override(aten.exp.default, lambda ctx, x: jnp.exp(x) * 1.0625):  # wrong by 6%: flagged
            with pytest.raises(ParityError, match=r"aten\.exp\.default output 0"):
                _compare(torch.exp, z)
    finally:
        tpu_runtime.clear_cache()


def test_float64_bessel_functions_are_compared_at_the_cpus_accuracy():
    # torch's float64 J0/J1/Y0/Y1 are up to 8e-7 from SciPy's near x = 5, the device's 1e-14: debug eager flagged them
    x = torch.linspace(4.5, 5.5, 41, dtype=torch.float64)
    _compare(lambda t: [f(t) for f in (torch.special.bessel_j0, torch.special.bessel_j1, torch.special.bessel_y0,
                                       torch.special.bessel_y1)], x)


def test_an_ill_conditioned_float32_op_is_judged_by_its_normwise_error():
    # a training batch norm over two nearly equal rows divides by their tiny spread: the device and the CPU are both
    # a few float32 units of the largest value from the float64 result, 3e-5 apart on values near 1 (levit's flagged)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(1, 24, generator=g).repeat(2, 1) + 1e-3 * torch.randn(2, 24, generator=g)
    w = torch.randn(2, 24, generator=g)
    bn = torch.nn.BatchNorm1d(24).to("tpu")
    _compare(lambda x, w: (bn(x.requires_grad_()) * w).sum().backward(), x, w)


@pytest.mark.parametrize("first", [torch.nn.BatchNorm2d(2), torch.nn.LayerNorm(6), torch.nn.ConvTranspose2d(2, 2, 3)],
                         ids=["batch_norm", "layer_norm", "conv_transpose"])
def test_a_gradient_the_backward_is_not_asked_for_is_not_compared_with_another(first):
    # a first layer's input needs no gradient: its backward's output_mask skips the input's, where the CPU returns
    # None and the device (batch norm's meta kernel) a tensor, or the other way round; the outputs were paired by
    # position among the tensors, so the device's weight gradient was compared with the CPU's bias gradient
    model = torch.nn.Sequential(first, torch.nn.Flatten(), torch.nn.LazyLinear(3))
    x = torch.randn(2, 2, 6, 6, generator=torch.Generator().manual_seed(0))
    model(x)  # (the lazy layer's size)
    model = model.to("tpu")

    def step(x):
        model(x).square().sum().backward()
        return [p.grad for p in model.parameters()]

    _compare(step, x)


@pytest.mark.parametrize("make, dtype, mixed", [
    (lambda: torch.nn.LayerNorm(5), torch.bfloat16, False),
    (lambda: torch.nn.BatchNorm1d(8), torch.float16, False),
    (lambda: torch.nn.InstanceNorm1d(8, affine=True), torch.bfloat16, False),
    (lambda: torch.nn.GroupNorm(2, 8), torch.bfloat16, True),
], ids=["layer_norm bf16", "batch_norm fp16", "instance_norm bf16", "group_norm bf16 in, fp32 params"])
def test_half_precision_norms_train_in_debug_eager_comparing_with_the_cpu(make, dtype, mixed):
    # the saved statistics reach the backward in the dtype torch's meta kernel gives (float32 for layer and batch
    # norms, as on CUDA; the input's for a group norm), which the CPU's backward kernels refused ("expected scalar
    # type BFloat16 but found Float"): every half-precision norm raised in debug eager with compare_cpu
    module = make()
    module = (module if mixed else module.to(dtype)).to("tpu")
    x = torch.randn(3, 8, 5, generator=torch.Generator().manual_seed(0)).to(dtype)

    def step(x):
        module(x.requires_grad_()).float().square().sum().backward()
        return x.grad

    _compare(step, x)


def test_a_batch_norm_over_many_elements_per_channel_is_as_accurate_as_the_cpus():
    # XLA's mean is one running float32 sum: over 686 values near 0.9 it was off by 1.6e-6 where the CPU's cascade sum
    # is 1e-8 off, and the normalized output 1.5e-5 (debug eager flagged a correct training step); a second pass over
    # the residuals makes it the CPU's accuracy
    g = torch.Generator().manual_seed(23)
    x = torch.randn(2, 4, 7, 7, 7, generator=g) * 0.13 + 0.92
    stats = (torch.ones(4), torch.zeros(4), torch.zeros(4), torch.ones(4))

    def norm(x, *s):
        return aten._native_batch_norm_legit_functional.default(x, *s, True, 0.1, 1e-5)[:2]

    exact = norm(x.double(), *(s.double() for s in stats))
    on_cpu = norm(x, *stats)
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True, check_nan=False):
        on_tpu = norm(x.to("tpu"), *(s.to("tpu") for s in stats))
    for cpu, tpu, want in zip(on_cpu, on_tpu, exact):
        cpu_error, tpu_error = ((t.cpu().double() - want).abs().max().item() for t in (cpu, tpu))
        assert tpu_error <= max(4 * cpu_error, 1e-7), (tpu_error, cpu_error)
