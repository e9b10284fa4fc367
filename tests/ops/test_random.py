"""Random ops: shape, dtype, support and statistics (values differ from torch by design).

The lowerings draw from JAX's PRNG with keys from ``ctx.next_key()`` (see
``converter/lowering/ops/random.py``), so they cannot match PyTorch's values; these
tests check what must match instead: shapes, dtypes, supports, moments, and that the
program's ``rng`` argument makes runs reproducible. Ops share two captures (each
capture + XLA compile costs seconds).
"""

from __future__ import annotations

import functools

import jax
import torch
import torch.nn.functional as F

from converter.capture import capture
from converter.lowering import lower
from tests.ops.harness import FnModule, to_jax, to_torch

aten = torch.ops.aten
N = 4096  # samples per statistic: the standard error of a mean is ~1.5% of sigma


@functools.lru_cache(maxsize=None)
def _compiled(fn, args: tuple):
    """Capture ``fn`` once (tensor args are inputs); return ``(run(seed) -> outputs, ops)``."""
    tensors = tuple(a for a in args if isinstance(a, torch.Tensor))
    ep = capture(FnModule(fn, args, {}).eval(), tensors)
    ops = {n.target for n in ep.graph.nodes if n.op == "call_function"}
    prog = lower(ep)
    with jax.enable_x64(True):
        state = {k: jax.numpy.asarray(v) for k, v in prog.state.items()}
        inputs = [to_jax(t) for t in tensors]
    jitted = jax.jit(prog.fn)

    def run(seed: int = 0) -> list:
        with jax.enable_x64(True):
            outs, _ = jitted(state, *inputs, rng=jax.random.key(seed))
        return [to_torch(o) for o in outs]

    return functools.lru_cache(maxsize=None)(run), ops


# ----------------------------------------------------------------------------- factories
def _factories(x, xi):
    return (torch.rand(N), torch.randn(N, dtype=torch.float64), torch.rand_like(x), torch.randn_like(x),
            torch.randint(3, 9, (N,)), torch.randint(5, (N,), dtype=torch.int32), torch.randint_like(xi, 2, 6),
            torch.randint_like(x, 4), torch.randperm(17))


_FACTORY_ARGS = (torch.zeros(64, 64, dtype=torch.bfloat16), torch.zeros(N, dtype=torch.int16))


def _factory_run(seed: int = 0):
    run, ops = _compiled(_factories, _FACTORY_ARGS)
    return run(seed), ops


def test_random_factories_lower_to_the_expected_ops():
    _, ops = _factory_run()
    want = {aten.rand.default, aten.randn.default, aten.rand_like.default, aten.randn_like.default,
            aten.randint.low, aten.randint.default, aten.randint_like.low_dtype, aten.randint_like.default,
            aten.randperm.default}
    assert want <= ops, sorted(map(str, want - ops))


def test_rand_and_randn_statistics():
    (rand, randn, rand_like, randn_like, *_), _ = _factory_run()
    assert rand.shape == (N,) and rand.dtype == torch.float32
    assert 0 <= rand.min() and rand.max() < 1 and abs(rand.mean() - 0.5) < 0.03 and abs(rand.std() - 0.2887) < 0.02
    assert randn.dtype == torch.float64 and abs(randn.mean()) < 0.06 and abs(randn.std() - 1) < 0.05
    assert rand_like.shape == (64, 64) and rand_like.dtype == torch.bfloat16
    assert 0 <= rand_like.float().min() and rand_like.float().max() < 1  # 8 random bits, like torch
    assert randn_like.dtype == torch.bfloat16 and abs(randn_like.float().std() - 1) < 0.05


def test_randint_range_dtype_and_coverage():
    (*_, ri_low, ri, ril, ril_high, perm), _ = _factory_run()
    assert ri_low.dtype == torch.int64 and set(ri_low.unique().tolist()) == set(range(3, 9))
    assert ri.dtype == torch.int32 and set(ri.unique().tolist()) == set(range(5))
    assert ril.dtype == torch.int16 and set(ril.unique().tolist()) == set(range(2, 6))
    assert ril_high.dtype == torch.bfloat16 and set(ril_high.float().unique().tolist()) == {0.0, 1.0, 2.0, 3.0}
    assert perm.dtype == torch.int64 and sorted(perm.tolist()) == list(range(17))


def test_rng_argument_makes_runs_reproducible():
    run, _ = _compiled(_factories, _FACTORY_ARGS)
    a, b, c = run(0), run.__wrapped__(0), run(1)  # __wrapped__: a fresh execution, not the cached one
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not torch.equal(a[0], c[0])
    assert not torch.equal(a[0], a[2].float().flatten()[:N])  # two ops in one graph draw different keys


# ----------------------------------------------------------------------------- distributions, dropout
def _distributions(x, mean_t, std_t, probs, ones, q0, v_eye):
    noise = torch.zeros_like(x)
    return (torch.bernoulli(x, 0.3), torch.normal(mean_t, 2.0), torch.normal(1.5, std_t),
            torch.normal(mean_t, std_t), torch.empty_like(x).uniform_(-1, 2), torch.empty_like(x).normal_(1, 2),
            torch.empty_like(x).exponential_(4.0), torch.multinomial(probs, 3),
            torch.multinomial(probs, N // 4, replacement=True),
            *aten.native_dropout.default(ones, 0.3, True), aten.native_dropout.default(ones, 1.0, True)[0],
            aten.native_dropout.default(ones, 0.3, False)[1], F.dropout(ones, 0.5, training=True),
            *aten.rrelu_with_noise_functional.default(x - 0.5, noise, 0.1, 0.3, True),
            *aten.rrelu_with_noise_functional.default(x - 0.5, noise, 0.1, 0.3, False),
            F.scaled_dot_product_attention(q0, q0, v_eye, dropout_p=0.25), torch.empty_like(x).bernoulli_(x),
            torch.empty_like(x).geometric_(0.25))


_DIST_ARGS = (torch.linspace(0, 1, N), torch.full((N,), -3.0), torch.full((N,), 0.5),
              torch.tensor([[0.0, 1.0, 3.0, 4.0], [2.0, 0.0, 2.0, 4.0]]), torch.rand(N) + 1,
              torch.zeros(1, 1, 64, 8), torch.eye(64).reshape(1, 1, 64, 64))


def _distribution_run():
    run, ops = _compiled(_distributions, _DIST_ARGS)
    return run(0), ops


def test_distribution_ops_lower_to_the_expected_ops():
    _, ops = _distribution_run()
    want = {aten.bernoulli.p, aten.bernoulli.Tensor, aten.normal.Tensor_float, aten.normal.float_Tensor, aten.normal.Tensor_Tensor,
            aten.uniform.default, aten.normal_functional.default, aten.exponential.default, aten.multinomial.default,
            aten.native_dropout.default, aten.rrelu_with_noise_functional.default,
            aten.scaled_dot_product_attention.default, aten.geometric.default}
    assert want <= ops, sorted(map(str, want - ops))


def test_bernoulli_normal_uniform_exponential_geometric_statistics():
    (bern, n_tf, n_ft, n_tt, uni, nrm, expo, *_), _ = _distribution_run()
    assert bern.dtype == torch.float32 and set(bern.unique().tolist()) <= {0.0, 1.0}
    assert abs(bern.mean() - 0.3) < 0.03
    assert abs(n_tf.mean() + 3) < 0.12 and abs(n_tf.std() - 2) < 0.1
    assert abs(n_ft.mean() - 1.5) < 0.03 and abs(n_ft.std() - 0.5) < 0.03
    assert abs(n_tt.mean() + 3) < 0.03 and abs(n_tt.std() - 0.5) < 0.03
    assert -1 <= uni.min() and uni.max() < 2 and abs(uni.mean() - 0.5) < 0.05
    assert abs(nrm.mean() - 1) < 0.12 and abs(nrm.std() - 2) < 0.1
    assert expo.min() >= 0 and abs(expo.mean() - 0.25) < 0.02
    per_element = _distribution_run()[0][19]  # bernoulli_(p) with p = linspace(0, 1): each element its own p
    assert set(per_element.unique().tolist()) <= {0.0, 1.0} and abs(per_element.mean() - 0.5) < 0.03
    assert per_element[: N // 10].mean() < 0.15 < 0.85 < per_element[-N // 10:].mean()
    geometric = _distribution_run()[0][20]  # trials to the first success: mean 1/p, variance (1 - p)/p^2
    assert geometric.min() >= 1 and torch.equal(geometric, geometric.floor())
    assert abs(geometric.mean() - 4) < 0.2 and abs(geometric.var() - 12) < 1.5


def test_multinomial_with_and_without_replacement():
    without, with_ = _distribution_run()[0][7:9]
    assert without.shape == (2, 3) and without.dtype == torch.int64
    assert set(without[0].tolist()) == {1, 2, 3} and set(without[1].tolist()) == {0, 2, 3}  # zero weight: never
    assert with_.shape == (2, N // 4)
    freq = torch.stack([(with_[0] == k).float().mean() for k in range(4)])
    torch.testing.assert_close(freq, torch.tensor([0.0, 0.125, 0.375, 0.5]), atol=0.05, rtol=0)


def test_native_dropout_train_mode():
    out, mask, p1, eval_mask, functional = _distribution_run()[0][9:14]
    ones = _DIST_ARGS[4]
    assert mask.dtype == torch.bool and abs((~mask).float().mean() - 0.3) < 0.03
    torch.testing.assert_close(out, torch.where(mask, ones / 0.7, torch.zeros(())))
    assert torch.equal(p1, torch.zeros(N)) and bool(eval_mask.all())
    kept = functional != 0
    torch.testing.assert_close(functional[kept], ones[kept] * 2)
    assert abs((~kept).float().mean() - 0.5) < 0.03


def test_rrelu_with_noise_train_and_eval():
    out, noise, ev, ev_noise = _distribution_run()[0][14:18]
    x = _DIST_ARGS[0] - 0.5
    neg = x <= 0
    assert bool(((noise[neg] >= 0.1) & (noise[neg] <= 0.3)).all()) and bool((noise[~neg] == 1).all())
    torch.testing.assert_close(out, x * noise)
    torch.testing.assert_close(ev, torch.where(x >= 0, x, x * 0.2))
    assert torch.equal(ev_noise, torch.zeros(N))


def test_sdpa_attention_dropout():
    # q = k = 0: every weight is 1/64 before dropout; v = I exposes each kept weight.
    out = _distribution_run()[0][18]
    scaled = out * 64 * 0.75  # kept weights are 1/64 / (1 - 0.25)
    kept = scaled > 0.5
    torch.testing.assert_close(scaled[kept], torch.ones(int(kept.sum())))
    assert bool((scaled[~kept] == 0).all()) and abs(kept.float().mean() - 0.75) < 0.03


def _rnn_dropout(x, w):
    # two 1-unit ReLU layers passing their input through: dropout shows in the output as is
    params = [w, w * 0, w, w * 0]
    hx = torch.zeros(2, x.shape[1], 1)
    train = aten.rnn_relu.input(x, hx, params, False, 2, 0.25, True, False, False)[0]
    evaluated = aten.rnn_relu.input(x, hx, params, False, 2, 0.25, False, False, False)[0]
    return train, evaluated


def test_rnn_layers_dropout_between_layers_in_train_mode():
    run, ops = _compiled(_rnn_dropout, (torch.ones(1, N, 1), torch.ones(1, 1)))
    assert aten.rnn_relu.input in ops
    train, evaluated = run(0)
    kept = train != 0
    torch.testing.assert_close(train[kept], torch.full((int(kept.sum()),), 1 / 0.75))
    assert abs(kept.float().mean() - 0.75) < 0.03
    assert torch.equal(evaluated, torch.ones(1, N, 1))
    assert not torch.equal(run(1)[0], train)  # the program's rng argument draws the mask


def test_poisson_statistics():
    rates = torch.cat([torch.full((N,), 0.5), torch.full((N,), 4.0), torch.zeros(8)])
    run, ops = _compiled(torch.poisson, (rates,))
    (draws,) = run(0)
    assert aten.poisson.default in ops and draws.dtype == torch.float32
    assert torch.equal(draws, draws.round()) and draws.min() >= 0 and torch.equal(draws[-8:], torch.zeros(8))
    for i, rate in enumerate((0.5, 4.0)):
        part = draws[i * N:(i + 1) * N]
        assert abs(part.mean() - rate) < 0.05 * rate + 0.03 and abs(part.var() - rate) < 0.12 * rate
