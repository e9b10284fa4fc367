"""``torch.distributions`` samplers of the gamma family on the device: statistics and gradients."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime

D = torch.distributions
N = 8000
#: one worker: the tests sample at the same shapes, whose compiles (~1 s each) they share
pytestmark = pytest.mark.xdist_group("distributions")


def _t(*values):
    return torch.tensor(values).to("tpu")


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _mean_close(samples, want, tol=0.03):
    got = samples.cpu().double().mean(0)
    torch.testing.assert_close(got, torch.tensor(want, dtype=torch.float64).expand_as(got), rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_gamma_beta_dirichlet_binomial_student_chi2_and_lkj_sample_on_the_device(mode):
    # _standard_gamma, _sample_dirichlet and binomial had no rows ('unsupported op'); fused eager runs the three
    # rows (the distributions built on them add only ops every other test runs). The samplers' compiles take ~1 s
    # each (JAX's gamma sampler): the distributions built on one sample it at one shape, [N, 2] or [N, 2, 2]
    with tpu_runtime.set_eager_mode(mode):
        gamma = D.Gamma(_t(2.0, 0.5), _t(1.0, 2.0)).rsample((N,))
        dirichlet = D.Dirichlet(torch.tensor([[2.0, 3.0], [0.5, 0.5]]).to("tpu")).rsample((N,))
        binomial = D.Binomial(10, _t(0.3, 0.7)).sample((N,))
        assert all(s.device.type == "tpu" for s in (gamma, dirichlet, binomial))
        _mean_close(gamma, [2.0, 0.25])
        torch.testing.assert_close(gamma.var(0).cpu(), torch.tensor([2.0, 0.125]), rtol=0.06, atol=0.01)
        _mean_close(dirichlet, [[0.4, 0.6], [0.5, 0.5]])
        torch.testing.assert_close(dirichlet.sum(-1).cpu(), torch.ones(N, 2))
        _mean_close(binomial, [3.0, 7.0])
        assert binomial.cpu().eq(binomial.cpu().round()).all() and binomial.cpu().le(10).all()
        if mode == "fused":
            return
        beta = D.Beta(_t(2.0, 0.5), _t(3.0, 0.5)).rsample((N,))  # (the Dirichlet's [N, 2, 2] sample)
        chi2 = D.Chi2(_t(3.0, 6.0)).rsample((N,))  # (Gamma's [N, 2])
        student = D.StudentT(_t(5.0, 5.0)).rsample((N,))
        lkj = D.LKJCholesky(3, _t(1.0)).sample((4,))
        assert all(s.device.type == "tpu" for s in (beta, chi2, student, lkj))
        _mean_close(beta, [0.4, 0.5])
        _mean_close(chi2, [3.0, 6.0])
        assert abs(student.var().item() - 5 / 3) < 0.15
        corr = (lkj @ lkj.mT).cpu()
        torch.testing.assert_close(corr.diagonal(dim1=-2, dim2=-1), torch.ones(4, 1, 3), rtol=1e-5, atol=1e-5)


def test_reparameterized_gradients_have_the_right_expectation():
    # d E[x] / d alpha: 1 for Gamma(alpha, 1); b / (a + b)^2 for Beta(a, b) (and -a / (a + b)^2 for b); the
    # samples at the shapes of the test above
    alpha = _t(2.0, 0.7).requires_grad_()
    D.Gamma(alpha, _t(1.0, 1.0)).rsample((N,)).mean(0).sum().backward()
    torch.testing.assert_close(alpha.grad.cpu(), torch.ones(2), rtol=0.04, atol=0.04)
    a, b = _t(2.0, 2.0).requires_grad_(), _t(3.0, 3.0).requires_grad_()
    D.Beta(a, b).rsample((N,)).mean(0).sum().backward()
    torch.testing.assert_close(a.grad.cpu(), torch.full((2,), 3 / 25), rtol=0.05, atol=0.005)
    torch.testing.assert_close(b.grad.cpu(), torch.full((2,), -2 / 25), rtol=0.05, atol=0.005)


def test_the_gradient_functions_match_torchs_on_the_same_samples():
    # deterministic in (sample, parameters): torch evaluates approximations of the same quantities
    alpha = torch.tensor([0.3, 1.0, 2.5, 7.0, 12.0, 50.0]).repeat(4)
    x = D.Gamma(alpha, 1.0).sample()
    want = torch._standard_gamma_grad(alpha, x)
    got = torch._standard_gamma_grad(alpha.to("tpu"), x.to("tpu")).cpu()
    torch.testing.assert_close(got, want, rtol=1e-3, atol=1e-5)
    conc = torch.tensor([0.5, 1.0, 2.0, 3.0, 8.0, 20.0]).repeat(4)
    total = conc + torch.tensor([0.7, 1.5, 3.0, 9.0]).repeat_interleave(6)
    xs = D.Beta(conc, total - conc).sample().clamp(1e-4, 1 - 1e-4)
    want = torch._dirichlet_grad(xs, conc, total)
    got = torch._dirichlet_grad(xs.to("tpu"), conc.to("tpu"), total.to("tpu")).cpu()
    torch.testing.assert_close(got, want, rtol=3e-3, atol=1e-5)
