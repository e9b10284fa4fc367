"""``model.to("tpu")`` / ``.half()`` when PyTorch's in-place swap of a parameter would be refused: one clear error
before anything moves (``tpu_runtime/module_moves.py``), instead of "Couldn't swap ..." with the model half moved."""

from __future__ import annotations

import weakref

import pytest
import torch
import torch.nn as nn

import tpu_runtime  # noqa: F401  (registers the device)


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(4, 4), nn.LayerNorm(4), nn.Linear(4, 2))


def test_move_after_a_cpu_pass_with_gradients_is_refused_before_anything_moves():
    net = _net()
    out = net(torch.randn(2, 4))  # its graph holds the parameters
    with pytest.raises(RuntimeError, match=r"(?s)cannot move Sequential \(at .*test_module_moves.py:\d+.*"
                                           r"1\.weight \(an autograd graph or a view still holds it\).*"
                                           r"Nothing was moved.*torch\.no_grad"):
        net.to("tpu")
    assert {p.device.type for p in net.parameters()} == {"cpu"}
    del out  # the fix the message gives: the graph gone, the move goes through
    net.to("tpu")
    assert {p.device.type for p in net.parameters()} == {"tpu"}


def test_dtype_change_of_a_tpu_model_whose_graph_is_held_is_refused_before_anything_changes():
    net = _net().to("tpu")
    out = net(torch.randn(2, 4, device="tpu"))
    with pytest.raises(RuntimeError, match=r"cannot move Sequential .*refuses 1\.weight"):
        net.half()
    assert {p.dtype for p in net.parameters()} == {torch.float32}
    del out
    net.half()
    assert {p.dtype for p in net.parameters()} == {torch.float16}


def test_weak_reference_to_a_parameter_is_named():
    net = _net()
    held = weakref.ref(net[2].bias)
    with pytest.raises(RuntimeError, match=r"2\.bias \(a weak reference to it exists\)"):
        net.to("tpu")
    assert held() is not None and net[2].bias.device.type == "cpu"


@pytest.mark.parametrize("dtype_change", [False, True])
def test_weak_reference_to_the_first_parameter_is_named(dtype_change):
    # the first parameter is the one being copied when the check runs: its weak references are asked about too
    net = _net().to("tpu") if dtype_change else _net()
    held = weakref.ref(net[0].weight)
    with pytest.raises(RuntimeError, match=r"refuses 0\.weight \(a weak reference to it exists\)\. Nothing was moved"):
        net.half() if dtype_change else net.to("tpu")
    assert held() is not None and {(p.device.type, p.dtype) for p in net.parameters()} == \
        {("tpu" if dtype_change else "cpu", torch.float32)}


def test_ordinary_moves_are_untouched():
    # no graph held (under no_grad, after backward, an optimizer's state), tied weights, a second move, a dtype change
    net = _net()
    with torch.no_grad():
        ref = net(torch.randn(2, 4))
    net(torch.randn(2, 4)).sum().backward()
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    tied = nn.Linear(4, 4)
    tied.weight = net[0].weight
    both = nn.ModuleList([net, tied]).to("tpu").to("tpu")
    assert tied.weight is net[0].weight and net[0].weight.device.type == "tpu"
    assert net[0].weight.grad.device.type == "tpu" and opt.param_groups[0]["params"][0] is net[0].weight
    both.to(torch.float64)
    assert net[0].weight.dtype is torch.float64 and ref.device.type == "cpu"


@pytest.mark.parametrize("dtype_change", [False, True])
def test_recurrent_layers_after_other_modules_move(dtype_change):
    """An RNN holds weak references to its weights (``_flat_weight_refs``) and drops them itself before they are
    swapped: an RNN after another module, or a second RNN, moves; a weak reference of the user's is still named."""
    torch.manual_seed(0)
    net = nn.ModuleDict({"emb": nn.Embedding(10, 4), "lstm": nn.LSTM(4, 6, batch_first=True), "gru": nn.GRU(6, 3)})
    ids = torch.randint(0, 10, (2, 5))

    def run(m, dev):
        with torch.no_grad():
            h, _ = m["lstm"](m["emb"](ids.to(dev)))
            return m["gru"](h)[0].cpu()

    want = run(net, "cpu")
    moved = net.to("tpu").half().float() if dtype_change else net.to("tpu")
    assert moved["gru"].weight_hh_l0.device.type == "tpu"
    torch.testing.assert_close(run(moved, "tpu"), want, atol=1e-2 if dtype_change else 1e-5, rtol=1e-2)
    other = nn.ModuleDict({"emb": nn.Embedding(10, 4), "lstm": nn.LSTM(4, 6)})
    held = weakref.ref(other["lstm"].weight_hh_l0)
    with pytest.raises(RuntimeError, match=r"lstm\.weight_hh_l0 \(a weak reference to it exists\)"):
        other.to("tpu")
    assert held() is not None and {p.device.type for p in other.parameters()} == {"cpu"}
