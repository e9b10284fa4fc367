"""Connectionist temporal classification: ``_ctc_loss`` and its backward.

``F.ctc_loss`` reaches the table as ``_ctc_loss`` with the lengths as python ints
(the runtime reads tensor lengths back first: they fix the shapes). The forward
variables ``α`` follow torch's CPU kernel: log space, over the label sequence with
blanks interleaved (``2·S + 1`` states), a ``lax.scan`` over time that freezes each
sequence after its input length. The backward is ``jax.vjp`` of that recursion, in
torch's convention: its ``_ctc_loss_backward`` returns ``exp(log_probs)·g`` plus the
true gradient for the steps inside the input length (the term that cancels through
the ``log_softmax`` every CTC model has in front), zero after it, and zero for the
infinite losses ``zero_infinity`` drops.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import torch

from converter.lowering.registry import lowering

aten = torch.ops.aten


def _logsumexp(*xs):
    """Elementwise ``log(Σ exp(x))`` of arrays that may be ``-inf`` (then so is the result),
    with finite gradients everywhere (no ``0 · inf`` from unreachable states)."""
    m = xs[0]
    for x in xs[1:]:
        m = jnp.maximum(m, x)
    finite = m > -jnp.inf
    shift = jnp.where(finite, m, 0)
    total = sum(jnp.exp(x - shift) for x in xs)
    return jnp.where(finite, jnp.log(jnp.where(finite, total, 1)) + shift, -jnp.inf)


def _padded_targets(targets, target_lengths):
    """The targets as ``[B, S]`` (``S`` = the longest), from a padded 2-D or concatenated 1-D tensor."""
    lengths = np.asarray(target_lengths, np.int64)
    s = int(lengths.max()) if lengths.size else 0
    if targets.ndim == 2:
        return targets[:, :s].astype(jnp.int32)
    if not s:
        return jnp.zeros((lengths.size, 0), jnp.int32)
    offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    idx = np.minimum(offsets[:, None] + np.arange(s)[None, :], targets.shape[0] - 1)
    return jnp.take(targets, jnp.asarray(idx, jnp.int32), axis=0).astype(jnp.int32)


def ctc_alpha(log_probs, targets, input_lengths, target_lengths, blank):
    """Negative log likelihood ``[B]`` and forward variables ``log α`` ``[B, T, 2·S + 1]``.

    ``log_probs`` is ``[T, B, C]``; the lengths are python ints (one per batch entry).
    """
    t_max, batch = log_probs.shape[0], log_probs.shape[1]
    labels = _padded_targets(targets, target_lengths)
    s = labels.shape[1]
    states = 2 * s + 1
    ext = jnp.full((batch, states), blank, jnp.int32).at[:, 1::2].set(labels)
    skip = jnp.zeros((batch, states), bool)  # may jump over the blank between two different labels
    if s > 1:
        skip = skip.at[:, 3::2].set(labels[:, 1:] != labels[:, :-1])
    tl = np.asarray(target_lengths, np.int64)
    valid = jnp.asarray(np.arange(states)[None, :] < 2 * tl[:, None] + 1)
    il = jnp.asarray(np.asarray(input_lengths, np.int64))
    lp_ext = jnp.take_along_axis(log_probs, jnp.broadcast_to(ext[None], (t_max, batch, states)), axis=2)
    neg = jnp.asarray(-jnp.inf, log_probs.dtype)
    first = jnp.arange(states)[None, :] < 2
    alpha0 = jnp.where(first & valid, lp_ext[0], neg)

    def step(alpha, xs):
        t, lpt = xs
        a1 = jnp.concatenate([jnp.full((batch, 1), neg), alpha[:, :-1]], axis=1)
        a2 = jnp.concatenate([jnp.full((batch, 2), neg), alpha[:, :-2]], axis=1)[:, :states]
        new = _logsumexp(alpha, a1, jnp.where(skip, a2, neg)) + lpt
        new = jnp.where(valid, new, neg)
        new = jnp.where((t < il)[:, None], new, alpha)  # frozen after the input length
        return new, new

    last, rest = jax.lax.scan(step, alpha0, (jnp.arange(1, t_max), lp_ext[1:]))
    log_alpha = jnp.concatenate([alpha0[None], rest], axis=0).transpose(1, 0, 2)
    end = jnp.asarray(2 * tl)
    final = jnp.take_along_axis(last, end[:, None], axis=1)[:, 0]
    before = jnp.take_along_axis(last, jnp.maximum(end - 1, 0)[:, None], axis=1)[:, 0]
    before = jnp.where(end > 0, before, neg)
    return -_logsumexp(final, before), log_alpha


def _check_lengths(log_probs, targets, input_lengths, target_lengths):
    """torch's CPU checks of ``_ctc_loss``'s arguments (the lengths are python ints here)."""
    where = " (while checking arguments for ctc_loss_cpu)"
    steps, batch = log_probs.shape[0], (log_probs.shape[1] if log_probs.ndim == 3 else 1)
    if len(input_lengths) != batch:
        raise RuntimeError("input_lengths must be of size batch_size")
    if len(target_lengths) != batch:
        raise RuntimeError("target_lengths must be of size batch_size")
    for name, lengths, most in (("input_lengths", input_lengths, steps), ("target_lengths", target_lengths, None)):
        for v in lengths:
            if v < 0:
                raise RuntimeError(f"Expected {name} to have value at least 0, but got value {v}{where}")
            if most is not None and v > most:
                raise RuntimeError(f"Expected {name} to have value at most {most}, but got value {v}{where}")
    if targets.ndim == 1 and targets.shape[0] < sum(target_lengths):
        raise RuntimeError(f"Expected tensor to have size {sum(target_lengths)} at dimension 0, but got size "
                           f"{targets.shape[0]} for argument #2 'targets'{where}")
    if targets.ndim == 2 and target_lengths and targets.shape[1] < max(target_lengths):
        raise RuntimeError(f"Expected tensor to have size at least {max(target_lengths)} at dimension 1, but got "
                           f"size {targets.shape[1]} for argument #2 'targets'{where}")


@lowering(aten._ctc_loss.default)
def lower__ctc_loss_default(ctx, log_probs, targets, input_lengths, target_lengths, blank=0, zero_infinity=False):
    """_ctc_loss(Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, int blank=0, bool zero_infinity=False) -> (Tensor, Tensor)

    The loss per batch entry (``inf`` for an impossible alignment: ``zero_infinity`` is
    applied by ``ctc_loss`` around this op) and ``log α``, from :func:`ctc_alpha`.

    Raises:
        RuntimeError: torch's argument checks (lengths per batch entry, within the input's time
            steps and not negative; enough targets for the target lengths), with its messages.
    """
    _check_lengths(log_probs, targets, input_lengths, target_lengths)
    return ctc_alpha(log_probs, targets, input_lengths, target_lengths, blank)


@lowering(aten._ctc_loss_backward.default)
def lower__ctc_loss_backward_default(ctx, grad, log_probs, targets, input_lengths, target_lengths,
                                     neg_log_likelihood, log_alpha, blank, zero_infinity=False):
    """_ctc_loss_backward(Tensor grad, Tensor log_probs, Tensor targets, int[] input_lengths, int[] target_lengths, Tensor neg_log_likelihood, Tensor log_alpha, int blank, bool zero_infinity=False) -> Tensor

    ``jax.vjp`` of :func:`ctc_alpha`'s loss, plus ``exp(log_probs)·grad`` inside each input
    length (torch's convention, see the module docstring); zero after it, and for a
    batch entry whose loss is infinite when ``zero_infinity``.
    """
    def nll(lp):
        return ctc_alpha(lp, targets, input_lengths, target_lengths, blank)[0]

    g = grad.astype(log_probs.dtype)
    if zero_infinity:
        g = jnp.where(neg_log_likelihood == jnp.inf, 0, g)
    _, pullback = jax.vjp(nll, log_probs)
    (true_grad,) = pullback(g)
    inside = jnp.arange(log_probs.shape[0])[:, None] < jnp.asarray(np.asarray(input_lengths, np.int64))[None, :]
    return jnp.where(inside[..., None], jnp.exp(log_probs) * g[None, :, None] + true_grad, 0)
