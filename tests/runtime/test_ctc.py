"""``F.ctc_loss`` on the tpu device: losses and gradients against PyTorch on CPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime

T, B, C = 7, 3, 5
INPUT_LENGTHS, TARGET_LENGTHS = [7, 5, 6], [3, 2, 0]  # one empty target


@pytest.fixture(scope="module")
def data():
    torch.manual_seed(0)
    logits = torch.randn(T, B, C)
    padded = torch.randint(1, C, (B, 3))
    padded[1, 1] = padded[1, 0]  # a repeated label: the alignment needs a blank between them
    concatenated = torch.cat([padded[b, :n] for b, n in enumerate(TARGET_LENGTHS)])
    return logits, {"padded": padded, "concatenated": concatenated}


def _loss_and_grad(logits, targets, lengths, device, reduction="mean", zero_infinity=False,
                   input_lengths=INPUT_LENGTHS):
    x = logits.clone().to(device).requires_grad_()
    if lengths == "ints":
        il, tl = input_lengths, TARGET_LENGTHS
    else:  # tensors on the CPU (torch's usual), or on the device (a read back)
        where = "cpu" if lengths == "cpu" or device == "cpu" else device
        il, tl = torch.tensor(input_lengths).to(where), torch.tensor(TARGET_LENGTHS).to(where)
    loss = F.ctc_loss(x.log_softmax(-1), targets.to(device), il, tl, reduction=reduction,
                      zero_infinity=zero_infinity)
    loss.sum().backward()
    return loss.detach().cpu(), x.grad.cpu()


@pytest.mark.parametrize("lengths", ["ints", "cpu", "tpu"])
@pytest.mark.parametrize("layout", ["padded", "concatenated"])
def test_ctc_loss_matches_cpu(data, layout, lengths):
    logits, targets = data
    for reduction in ("none", "mean", "sum"):
        got = _loss_and_grad(logits, targets[layout], lengths, "tpu", reduction)
        expected = _loss_and_grad(logits, targets[layout], lengths, "cpu", reduction)
        torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5, msg=reduction)
        torch.testing.assert_close(got[1], expected[1], rtol=1e-5, atol=1e-6, msg=reduction)


def test_ctc_loss_zero_infinity_drops_impossible_alignments(data):
    logits, targets = data
    short = [2, 5, 6]  # 2 steps cannot emit 3 labels: an infinite loss
    inf = _loss_and_grad(logits, targets["padded"], "ints", "tpu", "none", input_lengths=short)[0]
    assert inf[0] == float("inf") and torch.isfinite(inf[1:]).all()
    got = _loss_and_grad(logits, targets["padded"], "cpu", "tpu", "mean", True, input_lengths=short)
    expected = _loss_and_grad(logits, targets["padded"], "cpu", "cpu", "mean", True, input_lengths=short)
    torch.testing.assert_close(got[0], expected[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got[1], expected[1], rtol=1e-5, atol=1e-6)


def test_ctc_loss_gradient_of_log_probs_follows_torch_convention(data):
    # torch's _ctc_loss_backward adds exp(log_probs) * grad (it cancels through log_softmax)
    logits, targets = data
    log_probs = logits.log_softmax(-1)
    grads = []
    for device in ("cpu", "tpu"):
        lp = log_probs.clone().to(device).requires_grad_()
        F.ctc_loss(lp, targets["padded"].to(device), INPUT_LENGTHS, TARGET_LENGTHS, reduction="sum").backward()
        grads.append(lp.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-5, atol=1e-6)
    assert (grads[1][INPUT_LENGTHS[1]:, 1] == 0).all()  # nothing after a sequence's input length


def test_ctc_loss_in_fused_mode_matches_strict(data):
    logits, targets = data
    strict = _loss_and_grad(logits, targets["concatenated"], "cpu", "tpu")
    with tpu_runtime.set_eager_mode("fused"):
        fused = _loss_and_grad(logits, targets["concatenated"], "cpu", "tpu")
    torch.testing.assert_close(fused[0], strict[0], rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(fused[1], strict[1], rtol=1e-6, atol=1e-7)


def test_tensor_length_overloads_called_directly(data):
    # aten._ctc_loss.Tensor / _ctc_loss_backward.Tensor: lengths as CPU or tpu tensors, CPU targets
    logits, targets = data
    log_probs = logits.log_softmax(-1)
    il, tl = torch.tensor(INPUT_LENGTHS), torch.tensor(TARGET_LENGTHS)
    aten = torch.ops.aten
    nll, alpha = aten._ctc_loss.Tensor(log_probs, targets["padded"], il, tl, 0, False)
    grad = aten._ctc_loss_backward.Tensor(torch.ones(B), log_probs, targets["padded"], il, tl, nll, alpha, 0, False)
    for where in ("cpu", "tpu"):
        lp = log_probs.to("tpu")
        got_nll, got_alpha = aten._ctc_loss.Tensor(lp, targets["padded"], il.to(where), tl.to(where), 0, False)
        got_grad = aten._ctc_loss_backward.Tensor(torch.ones(B).to("tpu"), lp, targets["padded"].to("tpu"),
                                                  il.to(where), tl.to(where), got_nll, got_alpha, 0, False)
        torch.testing.assert_close(got_nll.cpu(), nll, rtol=1e-5, atol=1e-5, msg=where)
        torch.testing.assert_close(got_grad.cpu(), grad, rtol=1e-5, atol=1e-6, msg=where)


@pytest.mark.parametrize("case", ["input_too_long", "batch_mismatch", "too_few_targets", "negative_input",
                                  "negative_target"])
def test_ctc_loss_argument_checks_as_the_cpu(case):
    # the CPU refuses these; the device computed a loss (for one input length given to a batch of 2: two losses)
    lp = torch.randn(5, 2, 4).log_softmax(2)
    two = torch.ones(2, 3, dtype=torch.long)
    targets, il, tl, message = {
        "input_too_long": (two, [5, 6], [3, 3], "input_lengths to have value at most 5"),
        "batch_mismatch": (two, [5], [3, 3], "input_lengths must be of size batch_size"),
        "too_few_targets": (torch.ones(4, dtype=torch.long), [5, 5], [3, 3], "to have size 6 at dimension 0"),
        "negative_input": (two, [5, -1], [3, 3], "input_lengths to have value at least 0"),
        "negative_target": (two, [5, 5], [3, -1], "target_lengths to have value at least 0")}[case]
    with pytest.raises(RuntimeError, match=message):
        F.ctc_loss(lp, targets, il, tl, reduction="none")
    with pytest.raises(RuntimeError, match=message):
        F.ctc_loss(lp.to("tpu"), targets.to("tpu"), il, tl, reduction="none")


def test_ctc_loss_backward_of_a_large_batch():
    # enough elements (> plans._PROBE_NUMEL) that a CPU probe of the backward op would shrink its inputs to size-1
    # dims while its length lists stay: the CPU kernel trusts them and read out of bounds (the process crashed)
    torch.manual_seed(0)
    t, b, c, s = 50, 16, 21, 10
    logits = torch.randn(t, b, c)
    targets = torch.randint(1, c, (b, s))
    lengths = [s - i % 4 for i in range(b)]
    grads = []
    for device in ("cpu", "tpu"):
        x = logits.clone().to(device).requires_grad_()
        F.ctc_loss(x.log_softmax(-1), targets.to(device), [t] * b, lengths, reduction="sum").backward()
        grads.append(x.grad.cpu())
    torch.testing.assert_close(grads[1], grads[0], rtol=1e-4, atol=1e-5)
