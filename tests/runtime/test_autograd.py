"""Autograd and optimizers on tpu tensors, against the same steps on CPU."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime
from tests.runtime.conftest import batch, tiny_mlp, train_steps


_steps = train_steps


def test_backward_gradients_match_cpu():
    model = tiny_mlp()
    ref = copy.deepcopy(model)
    x, y = batch()
    model.to("tpu")
    F.mse_loss(model(x.to("tpu")), y.to("tpu")).backward()
    F.mse_loss(ref(x), y).backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        assert p.grad.device.type == "tpu"
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_backward_of_a_tpu_tensor_runs_on_the_calling_thread(mode):
    # every backward op is Python under the GIL: PyTorch's device thread would only add a hand-off
    import threading

    seen = []
    with tpu_runtime.set_eager_mode(mode):
        w = torch.ones(3, 2).to("tpu").requires_grad_()
        h = torch.ones(4, 3).to("tpu") @ w
        h.register_hook(lambda g: seen.append(threading.get_ident()))
        (h * h).sum().backward()
        assert seen == [threading.get_ident()]
        assert torch.autograd.is_multithreading_enabled()  # the switch was for that call only
        torch.testing.assert_close(w.grad.cpu(), torch.full((3, 2), 24.0))
        # torch.autograd.grad keeps PyTorch's own threading (same result)
        h = torch.ones(4, 3).to("tpu") @ w
        (g,) = torch.autograd.grad((h * h).sum(), w)
        torch.testing.assert_close(g.cpu(), torch.full((3, 2), 24.0))


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_linear_weight_gradient_comes_in_the_weights_layout(mode):
    # weight.t() reports the CPU's strides, so autograd's addmm backward takes the formula that
    # gives the weight's own layout: the gradient is a plain tensor, not a transposed view whose
    # every read (each optimizer op in strict mode, each fusion in fused mode) transposes it
    torch.manual_seed(0)
    ref = torch.nn.Linear(4, 3)
    lin = copy.deepcopy(ref).to("tpu")
    x = torch.randn(5, 4)
    with tpu_runtime.set_eager_mode(mode):
        lin(x.to("tpu")).square().sum().backward()
    ref(x).square().sum().backward()
    g = lin.weight.grad
    assert g.stride() == ref.weight.grad.stride() == (4, 1) and g._chain == ()
    torch.testing.assert_close(g.cpu(), ref.weight.grad, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("optim", [torch.optim.SGD, torch.optim.AdamW])
def test_optimizer_steps_match_cpu(optim):
    model = tiny_mlp()
    ref = copy.deepcopy(model)
    x, y = batch()
    model.to("tpu")
    kwargs = {"lr": 0.05, "momentum": 0.9} if optim is torch.optim.SGD else {"lr": 0.05}
    got = _steps(model, optim(model.parameters(), **kwargs), x.to("tpu"), y.to("tpu"), 3)
    want = _steps(ref, optim(ref.parameters(), **kwargs), x, y, 3)
    assert got == pytest.approx(want, rel=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_manual_seed_makes_device_dropout_reproducible():
    x = torch.ones(4, 3).to("tpu")

    def draw():
        torch.manual_seed(123)
        return F.dropout(x, 0.5, training=True).cpu()

    a, b = draw(), draw()
    assert torch.equal(a, b)
    assert set(a.unique().tolist()) <= {0.0, 2.0}
    torch.manual_seed(124)
    assert not torch.equal(F.dropout(x, 0.5, training=True).cpu(), a) or a.numel() < 4


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("reentrant", [False, True])
def test_activation_checkpointing_replays_dropout_masks(mode, reentrant):
    # torch.utils.checkpoint saves the device RNG state (torch.tpu.get_rng_state under
    # torch.tpu.device) and restores it for the recomputation: the gradients equal those of the
    # plain forward with the same seed; without it, the recomputed dropout drew new masks
    import tpu_runtime
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Dropout(0.5), torch.nn.Linear(16, 4)).to("tpu")
    x = torch.randn(5, 8).to("tpu").requires_grad_()
    grads = []
    with tpu_runtime.set_eager_mode(mode):
        for ckpt in (True, False):
            torch.manual_seed(1)
            out = checkpoint(model, x, use_reentrant=reentrant) if ckpt else model(x)
            out.sum().backward()
            grads.append(x.grad.cpu())
            x.grad = None
    assert (grads[1] != 0).any()
    torch.testing.assert_close(grads[0], grads[1], rtol=1e-6, atol=1e-6)


def test_fork_rng_restores_the_device_generator():
    x = torch.ones(64).to("tpu")
    state = torch.tpu.get_rng_state("tpu:0")
    with torch.random.fork_rng(device_type="tpu"):
        inside = F.dropout(x, 0.5).cpu()
    assert torch.equal(torch.tpu.get_rng_state(), state)
    assert torch.equal(F.dropout(x, 0.5).cpu(), inside)  # the same draw again, after the fork
    torch.tpu.set_rng_state_all(torch.tpu.get_rng_state_all())
    with pytest.raises(ValueError, match="does not exist"):
        torch.tpu.get_rng_state(1)
    with pytest.raises(TypeError, match="RNG state must be a torch.ByteTensor"):  # as torch.set_rng_state
        torch.tpu.set_rng_state(state.float())
    with pytest.raises(RuntimeError, match="size"):
        torch.tpu.set_rng_state(state[:8])


_DRAWS = {
    "randn": lambda g: torch.randn(3, device="tpu", generator=g),
    "rand": lambda g: torch.rand(3, device="tpu", generator=g),
    "randint": lambda g: torch.randint(0, 1000, (3,), device="tpu", generator=g),  # ignored its generator
    "randperm": lambda g: torch.randperm(16, device="tpu", generator=g),  # raised (randperm.generator)
    "normal_": lambda g: torch.empty(3, device="tpu").normal_(generator=g),
    "uniform_": lambda g: torch.empty(3, device="tpu").uniform_(generator=g),
    "exponential_": lambda g: torch.empty(3, device="tpu").exponential_(generator=g),
    "bernoulli": lambda g: torch.bernoulli(torch.full((16,), 0.5, device="tpu"), generator=g),
    "multinomial": lambda g: torch.multinomial(torch.ones(64, device="tpu"), 4, generator=g),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_cpu_generator_seeds_device_random_ops(mode):
    # generator= raised "an explicit torch.Generator cannot be honoured" (randint ignored it): the same
    # generator state gives the same values, the next draw others, and the device generator is untouched
    def draws(seed: int) -> dict:
        g = torch.Generator().manual_seed(seed)
        first = {k: f(g).cpu() for k, f in _DRAWS.items()}
        return first, {k: f(g).cpu() for k, f in _DRAWS.items()}

    with tpu_runtime.set_eager_mode(mode):
        torch.manual_seed(7)
        (a, a2), (b, _), (c, _) = draws(0), draws(0), draws(1)
        after = torch.rand(8, device="tpu").cpu()
        torch.manual_seed(7)
        assert torch.equal(torch.rand(8, device="tpu").cpu(), after)
    for k in _DRAWS:
        assert torch.equal(a[k], b[k]), k
        assert not torch.equal(a[k], c[k]) and not torch.equal(a[k], a2[k]), k
    assert sorted(a["randperm"].tolist()) == list(range(16))


@pytest.mark.parametrize("dropout", ["dropout2d", "alpha_dropout", "feature_alpha_dropout", "bernoulli_"])
def test_channel_and_alpha_dropout_at_the_default_p(dropout):
    # p=0.5 is bernoulli_'s default, so torch leaves it out of the call; the functional twin
    # bernoulli.p has no default (it raised "missing value for argument 'p'")
    x = torch.ones(64, 8, 3, 3).to("tpu").requires_grad_()
    if dropout == "bernoulli_":
        y = torch.empty(64, 8, 3, 3).to("tpu").bernoulli_() * x
    else:
        y = getattr(F, dropout)(x, 0.5, training=True)
    y.sum().backward()
    out, grad = y.detach().cpu(), x.grad.cpu()
    kept = (out != out.min()).float() if "alpha" in dropout else (out != 0).float()
    assert 0.35 < kept.mean() < 0.65
    if dropout == "dropout2d":  # whole channels, scaled by 1 / (1 - p)
        assert torch.equal(kept.amin((2, 3)), kept.amax((2, 3)))
        torch.testing.assert_close(grad, kept * 2)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_multilabel_margin_loss_matches_cpu(mode):
    # labels up to the first -1 (none at all in the third row): torch's decomposition, which the
    # device used to run, scored the positions after the -1 as class 0 (3.59 instead of 0)
    x2 = torch.randn(4, 5, generator=torch.Generator().manual_seed(0))
    t2 = torch.tensor([[3, 0, -1, 1, 2], [1, 2, 3, 4, 0], [-1, 0, 0, 0, 0], [4, 4, -1, 0, 0]])
    import tpu_runtime

    for x, t in ((x2, t2), (x2[0], t2[0])):
        for reduction in ("none", "mean", "sum"):
            w = torch.arange(1.0, 5.0)[: x.shape[0] if x.dim() == 2 else 1].reshape(-1 if x.dim() == 2 else ())
            xc = x.clone().requires_grad_()
            want = F.multilabel_margin_loss(xc, t, reduction=reduction)
            (want * w if reduction == "none" else want).sum().backward()
            with tpu_runtime.set_eager_mode(mode):
                xt = x.to("tpu").requires_grad_()
                got = F.multilabel_margin_loss(xt, t.to("tpu"), reduction=reduction)
                (got * w.to("tpu") if reduction == "none" else got).sum().backward()
                assert got.shape == want.shape, (reduction, x.dim())
                torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-6)
                torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)


_BACKWARD_ERRORS = {
    # linalg_ldl_factor_ex has no lowering (it has a meta kernel)
    "no_lowering": (lambda g: torch.ops.aten._masked_scale(g, torch.ones_like(g, dtype=torch.bool), 2.0),
                    "_masked_scale"),
    # _add_relu.Scalar has neither a row nor a meta kernel: the stand-in gradient that carries
    # the error out of the device thread is shaped like the op's input
    "no_lowering_no_meta": (lambda g: torch.ops.aten._add_relu.Scalar(g, 1.0), "_add_relu"),
}


_BACKWARD_CALLS = {
    "Tensor.backward": lambda loss, t: loss.backward(),  # on the calling thread (TpuTensor.backward)
    "autograd.grad": lambda loss, t: torch.autograd.grad(loss, t),  # on PyTorch's device thread
}


@pytest.mark.parametrize("call", sorted(_BACKWARD_CALLS))
@pytest.mark.parametrize("case", sorted(_BACKWARD_ERRORS))
def test_error_inside_backward_is_raised_not_fatal(case, call):
    grad_fn, name = _BACKWARD_ERRORS[case]

    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            return a * 2

        @staticmethod
        def backward(ctx, g):
            return grad_fn(g)

    t = torch.ones(4, 3).to("tpu").requires_grad_()
    with pytest.raises(Exception, match=name):
        _BACKWARD_CALLS[call](Bad.apply(t).sum(), t)
    # the device still works afterwards (the process was not aborted)
    assert (t.detach() + 1).sum().item() == 24.0


@pytest.mark.parametrize("reentrant", [False, True], ids=["non-reentrant", "reentrant"])
def test_activation_checkpointing_matches_cpu(reentrant):
    from torch.utils.checkpoint import checkpoint

    torch.manual_seed(0)
    block = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Linear(8, 8))
    x = torch.randn(4, 8)
    grads = {}
    for device in ("cpu", "tpu"):
        m = copy.deepcopy(block).to(device)
        xx = x.clone().to(device).requires_grad_()
        checkpoint(m, xx, use_reentrant=reentrant).sum().backward()
        grads[device] = (m[0].weight.grad.cpu(), xx.grad.cpu())
    for a, b in zip(grads["tpu"], grads["cpu"]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


_GRAD_CASES = {
    "vector_norm_p3": lambda x: torch.linalg.vector_norm(x, 3),   # pow_.Scalar's functional twin
    "sgn": lambda x: (x.sgn() * x).sum(),                          # _efficientzerotensor in backward
    "digamma": lambda x: torch.digamma(x.abs() + 1).sum(),         # polygamma(1) in backward
    "softshrink": lambda x: torch.nn.functional.softshrink(x).square().sum(),
    "cdist": lambda x: torch.cdist(x, x.flip(0) * 2).sum(),
    "replicate_pad": lambda x: torch.nn.functional.pad(x[None], (2, 1), mode="replicate").square().sum(),
    "rrelu_eval": lambda x: torch.nn.functional.rrelu(x, training=False).square().sum(),  # writes its noise
    "multi_margin": lambda x: torch.nn.functional.multi_margin_loss(x, torch.tensor([1, 0, 3]).to(x.device), p=2),
    # nn.utils.parametrizations.weight_norm (wav2vec2's positional conv): _weight_norm_interface_backward
    "weight_norm": lambda x: torch._weight_norm(x, torch.arange(1.0, 4.0)[:, None].to(x.device), 0).square().sum(),
}


def test_rrelu_training_slopes_are_drawn_in_range_and_the_gradient_uses_them():
    torch.manual_seed(0)
    x = (-torch.rand(2000) - 0.1).to("tpu").requires_grad_(True)
    y = torch.nn.functional.rrelu(x, 0.1, 0.3, training=True)
    y.sum().backward()
    slopes = (y / x).detach().cpu()
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6 and slopes.std() > 0.03
    torch.testing.assert_close(x.grad.cpu(), slopes)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_rrelu_in_place_writes_the_input_and_its_gradient_uses_the_slopes(mode):
    # rrelu_with_noise_ ran rrelu_with_noise (which returns one tensor and writes noise) as its functional twin and
    # paired the result's rows with (self, noise): "output with shape [2000] doesn't match the broadcast shape []"
    torch.manual_seed(0)
    with tpu_runtime.set_eager_mode(mode):
        leaf = (-torch.rand(2000) - 0.1).to("tpu").requires_grad_(True)
        x = leaf * 1
        y = torch.nn.functional.rrelu(x, 0.1, 0.3, training=True, inplace=True)
        assert y is x
        y.sum().backward()
        slopes = (y / leaf).detach().cpu()
    assert slopes.min() >= 0.1 - 1e-6 and slopes.max() <= 0.3 + 1e-6 and slopes.std() > 0.03
    torch.testing.assert_close(leaf.grad.cpu(), slopes)


@pytest.mark.parametrize("case", sorted(_GRAD_CASES))
def test_gradients_of_less_common_ops_match_cpu(case):
    fn = _GRAD_CASES[case]
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(5))
    ref = x.clone().requires_grad_(True)
    fn(ref).backward()
    t = x.to("tpu").requires_grad_(True)
    fn(t).backward()
    torch.testing.assert_close(t.grad.cpu(), ref.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=["complex64", "complex128"])
def test_complex_values_and_gradients_match_cpu(dtype):
    g = torch.Generator().manual_seed(4)
    x, y = torch.randn(2, 3, generator=g, dtype=dtype), torch.rand(2, 3, generator=g, dtype=dtype) + 0.5

    def fn(a, b):
        z = torch.complex(a, b) * torch.polar(b, a)
        z = torch.fft.fft(z ** 2 * torch.conj(z), dim=1)
        return torch.view_as_real(z).sum() + z.angle().sum()

    ref = [x.clone().requires_grad_(True), y.clone().requires_grad_(True)]
    fn(*ref).backward()
    got = [x.to("tpu").requires_grad_(True), y.to("tpu").requires_grad_(True)]
    out = fn(*got)
    out.backward()
    assert out.dtype == dtype
    torch.testing.assert_close(out.detach().cpu(), fn(x, y), rtol=1e-5, atol=1e-5)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g.grad.cpu(), r.grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_fractional_max_pool_trains_as_on_cpu(mode):
    # fractional_max_pool2d/3d and their backward had no lowering (fractional_max_pool3d_backward: no meta in torch)
    g = torch.Generator().manual_seed(3)
    for x, kernel, size in ((torch.randn(2, 3, 9, 11, generator=g), (2, 3), (4, 5)),
                            (torch.randn(1, 2, 6, 7, 8, generator=g), (2, 2, 3), (3, 4, 3))):
        fn = torch.nn.functional.fractional_max_pool2d if x.dim() == 4 else torch.nn.functional.fractional_max_pool3d
        samples = torch.rand(x.shape[:2] + (len(kernel),), generator=g)
        ref = x.clone().requires_grad_()
        fn(ref, kernel, output_size=size, _random_samples=samples).square().sum().backward()
        with tpu_runtime.set_eager_mode(mode):
            xt = x.to("tpu").requires_grad_()
            out = fn(xt, kernel, output_size=size, _random_samples=samples.to("tpu"))
            out.square().sum().backward()
            torch.testing.assert_close(xt.grad.cpu(), ref.grad)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_segment_reduce_trains_on_the_device_as_on_cpu(mode):
    # segment_reduce and its backward have rows (they raised 'unsupported op')
    g = torch.Generator().manual_seed(0)
    data, lengths = torch.randn(6, 3, generator=g), torch.tensor([2, 0, 4])
    x = data.clone().requires_grad_()
    with tpu_runtime.set_eager_mode(mode):
        xt = data.to("tpu").requires_grad_()
        for reduce in ("sum", "mean", "max", "prod"):
            got = torch.segment_reduce(xt, reduce, lengths=lengths.to("tpu"), initial=0.5)
            want = torch.segment_reduce(x, reduce, lengths=lengths, initial=0.5)
            (got * torch.arange(9.0).view(3, 3).to("tpu")).sum().backward()
            (want * torch.arange(9.0).view(3, 3)).sum().backward()
            torch.testing.assert_close(got.detach().cpu(), want.detach())
            torch.testing.assert_close(xt.grad.cpu(), x.grad)


def test_forward_mode_ad_make_dual_gives_the_tangent():
    import torch.autograd.forward_ad as fwAD

    x, v = torch.randn(4), torch.randn(4)

    def tangent(device):
        with fwAD.dual_level():
            d = fwAD.make_dual(x.to(device), v.to(device))
            return fwAD.unpack_dual(d.exp() * d).tangent.cpu()

    torch.testing.assert_close(tangent("tpu"), tangent("cpu"))


def _write_into_a_view(x):
    out = torch.zeros(4, device=x.device)
    out[1:3] = x.sin()  # a dual written into a view of a plain tensor: its base's tangent is laid out as the base
    return out


def _dual_of_a_view(x):
    import torch.autograd.forward_ad as fwAD

    with fwAD.dual_level():  # a view primal, and a transposed tangent: each tangent is laid out as its primal
        row = fwAD.unpack_dual(fwAD.make_dual(x[1], x[0] * 2).sin()).tangent
        grid = x.reshape(2, 2) if x.numel() == 4 else x.view(1, -1)
        whole = fwAD.unpack_dual(fwAD.make_dual(grid, grid.t().contiguous().t()).exp()).tangent
        return row, whole


@pytest.mark.parametrize("mode", ["strict", "fused"])
@pytest.mark.parametrize("program", ["jvp_write_into_a_view", "make_dual_layouts", "jacfwd_columns"])
def test_forward_mode_ad_of_tangents_laid_out_as_their_primal_as_on_cpu(program, mode):
    # forward AD makes such tangents with aten._new_zeros_with_same_feature_meta, which was unsupported
    from torch.func import jacfwd, jvp

    def run(device):
        x = torch.tensor([[0.5, 1.0], [1.5, -2.0]]).to(device)
        if program == "jvp_write_into_a_view":
            out = jvp(_write_into_a_view, (x[0],), (torch.tensor([1.0, 3.0]).to(device),))
        elif program == "make_dual_layouts":
            out = _dual_of_a_view(x.reshape(-1))
        else:
            def columns(v):
                out = torch.zeros(2, 3, device=v.device)
                for j in range(3):
                    out[:, j] = v[:, 0] * (j + 1) + v[:, 1].exp()
                return out

            out = (jacfwd(columns)(x),)
        return [t.cpu() for t in out]

    with tpu_runtime.set_eager_mode(mode):
        got = run("tpu")
    for g, w in zip(got, run("cpu")):
        torch.testing.assert_close(g, w)
        assert g.stride() == w.stride()


@pytest.mark.parametrize("loss", ["mse_loss", "smooth_l1_loss", "huber_loss"])
def test_mean_loss_of_an_empty_batch_backward_as_on_cpu(loss):
    # a mask that selects nothing: the CPU's loss is NaN and its gradient empty; the backward's decomposition
    # divides by the input's size in python, which raised ZeroDivisionError
    fn = getattr(torch.nn.functional, loss)
    x = torch.zeros(0, 4, device="tpu", requires_grad=True)
    value = fn(x, torch.zeros(0, 4, device="tpu"))
    value.backward()
    assert torch.isnan(value.cpu()) and x.grad.shape == (0, 4)


def test_group_norm_of_an_empty_batch_as_on_cpu():
    # a detection head with no proposals: its reshape to (N, groups, -1) of N = 0 divided by zero
    norm = torch.nn.GroupNorm(1, 3).to("tpu")
    x = torch.randn(0, 3, 5, device="tpu", requires_grad=True)
    out = norm(x)
    out.sum().backward()
    assert out.shape == (0, 3, 5) and x.grad.shape == (0, 3, 5) and norm.weight.grad.abs().sum().item() == 0


def test_cross_entropy_targets_of_the_dtypes_the_cpu_takes():
    # class targets stored as uint8: the CPU takes them for (N, C) logits, the device's gather raised; int32
    # targets, and uint8 ones for (N, C, H, W) logits: the CPU refuses them, the device computed a loss
    torch.manual_seed(0)
    logits, target = torch.randn(4, 5), torch.randint(0, 5, (4,), dtype=torch.uint8)
    losses, grads = [], []
    for device in ("cpu", "tpu"):
        x = logits.clone().to(device).requires_grad_()
        loss = F.cross_entropy(x, target.to(device))
        loss.backward()
        losses.append(loss.detach().cpu())
        grads.append(x.grad.cpu())
        with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte, but got Int"):
            F.cross_entropy(x, target.to(device).int())
        with pytest.raises(RuntimeError, match="expected scalar type Long but found Byte"):
            F.cross_entropy(torch.randn(2, 5, 3, 3, device=device), torch.zeros(2, 3, 3, dtype=torch.uint8,
                                                                                 device=device))
    torch.testing.assert_close(losses[1], losses[0])
    torch.testing.assert_close(grads[1], grads[0])


class _HookFailed(Exception):
    pass


def _raise(*args):
    raise _HookFailed("the hook failed")


@pytest.mark.parametrize("where", ["tensor", "leaf", "node", "node-pre", "accumulated", "module"])
def test_an_exception_raised_by_a_backward_hook_reaches_the_caller(where):
    # PyTorch leaves a hook's exception pending while the engine unwinds through the tpu stream guard,
    # whose destructor asks Python for the device type: that call failed and the process aborted
    torch.manual_seed(0)
    lin = torch.nn.Linear(3, 2).to("tpu")
    x = torch.randn(4, 3).to("tpu").requires_grad_()
    if where == "module":
        lin.register_full_backward_hook(_raise)
    y = lin(x)
    if where == "tensor":
        y.register_hook(_raise)
    elif where == "leaf":
        x.register_hook(_raise)
    elif where == "node":
        y.grad_fn.register_hook(_raise)
    elif where == "node-pre":
        y.grad_fn.register_prehook(_raise)
    elif where == "accumulated":
        lin.weight.register_post_accumulate_grad_hook(_raise)
    with pytest.raises(_HookFailed, match="the hook failed"):
        y.sum().backward()
    # the device works on: a backward without the hook
    w = torch.ones(3, device="tpu", requires_grad=True)
    (w * 2).sum().backward()
    torch.testing.assert_close(w.grad.cpu(), torch.full((3,), 2.0))


def test_a_failing_hook_under_autograd_grad_raises(capsys):
    # torch.autograd.grad does not pass through TpuTensor.backward: the engine's SystemError is what
    # reaches the caller (it no longer aborts the process); the hook's own exception and line are printed
    # first, as Python prints an exception it cannot raise (only the SystemError said anything before)
    x = torch.ones(3, device="tpu", requires_grad=True)
    y = x * 2
    y.register_hook(_raise)
    with pytest.raises(SystemError):
        torch.autograd.grad(y.sum(), x)
    err = capsys.readouterr().err
    assert "Exception ignored in: a backward hook on the tpu device" in err
    assert "_HookFailed: the hook failed" in err and "in _raise" in err
    with pytest.raises(_HookFailed):  # (under .backward() it is raised, not printed)
        y = x * 2
        y.register_hook(_raise)
        y.sum().backward()
    assert "Exception ignored" not in capsys.readouterr().err
    y = x * 3
    (g,) = torch.autograd.grad(y.sum(), x)
    torch.testing.assert_close(g.cpu(), torch.full((3,), 3.0))


@pytest.mark.parametrize("p", [1.0, 2.0])
@pytest.mark.parametrize("mode", ["fused", "compile"])
def test_distances_of_equal_rows_made_in_the_same_graph_are_zero_as_on_the_cpu(mode, p):
    # e = z * s made in the graph that measures it: XLA fused the product into the difference as a multiply-add,
    # e_i - e_i came out ~1e-7, and the gradient at that "distance" was O(1) off the CPU's (0 at distance 0)
    z0 = torch.randn(8, 5, generator=torch.Generator().manual_seed(0))
    z0[5] = z0[2]  # two equal rows: pdist's pair

    def loss(z, s):
        e = z * s
        return torch.cdist(e, e, p=p), torch.pdist(e, p=p)

    def run(device, fn):
        z = z0.to(device, copy=True).requires_grad_()
        c, d = fn(z, 1.5)
        (c.sum() + d.sum()).backward()
        return c.detach().cpu(), d.detach().cpu(), z.grad.cpu()

    want = run("cpu", loss)
    if mode == "compile":
        got = run("tpu", torch.compile(loss, backend="tpu"))
    else:
        with tpu_runtime.set_eager_mode(mode):
            got = run("tpu", loss)
    assert torch.count_nonzero(got[0].diagonal()) == 0 and torch.count_nonzero(got[1] == 0) == 1
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
