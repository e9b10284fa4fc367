"""Fused graphs return their small outputs packed into one flat array per dtype (:mod:`tpu_runtime.eager.packing`):
later graphs read them as slices of that array, anything else cuts a value out once."""

from __future__ import annotations

import copy

import pytest
import torch

import tpu_runtime
from tests.runtime.conftest import batch, train_steps
from tpu_runtime.eager import fused
from tpu_runtime.eager import lazy
from tpu_runtime.eager.lazy import LazyRef
from tpu_runtime.eager.packing import PACK_MAX, plan_packing


def _mlp() -> torch.nn.Module:
    """A seeded 3 → 5 → 2 MLP (not conftest's tiny one: its graphs are compiled here, not found in the cache)."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(3, 5), torch.nn.ReLU(), torch.nn.Linear(5, 2))


def _trained(steps: int, spy_leaves: list | None = None, monkeypatch=None):
    """The MLP after ``steps`` fused AdamW steps, its optimizer, and a strict reference trained alike."""
    model, x, y = _mlp(), *batch()
    ref = copy.deepcopy(model).to("tpu")
    want = train_steps(ref, torch.optim.AdamW(ref.parameters(), lr=0.05), x.to("tpu"), y.to("tpu"), steps)
    model = model.to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    if spy_leaves is not None:
        real = fused._donation

        def spy(leaves, *rest):
            spy_leaves.append(list(leaves))
            return real(leaves, *rest)

        monkeypatch.setattr(fused, "_donation", spy)
    with tpu_runtime.set_eager_mode("fused"):
        got = train_steps(model, opt, x.to("tpu"), y.to("tpu"), steps)
    assert got == pytest.approx(want, rel=1e-5)
    return model, opt, ref


def _values(model, opt) -> list:
    return [t._storage.value for p in model.parameters() for t in (p, *opt.state[p].values()) if t.dim()]


def test_small_outputs_come_back_packed_and_the_next_graph_reads_their_array_once(monkeypatch):
    leaves: list = []
    model, opt, ref = _trained(3, leaves, monkeypatch)
    values = _values(model, opt)  # the 4 parameters and their 2 moments each: one packed array for all 12
    assert len(values) == 12 and all(type(v) is LazyRef and v.packed is not None for v in values)
    flat = values[0].packed[0]
    assert all(v.packed[0] is flat for v in values)
    assert flat.shape == (3 * sum(p.numel() for p in model.parameters()),)
    # the last step's forward + backward read the parameters the step before packed: one leaf, no array per weight
    forward = leaves[-2]
    shapes = {tuple(p.shape) for p in model.parameters()}
    packed_before = [a for a in forward if getattr(a, "shape", None) == flat.shape]
    assert len(packed_before) == 1 and not [a for a in forward if getattr(a, "shape", None) in shapes]
    for p, q in zip(model.parameters(), ref.parameters()):  # read outside a graph: cut out once, then an array
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)
        v = p._storage.value
        assert type(v) is not LazyRef or (v.concrete is not None and v.packed is None)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_packed_values_are_read_written_and_viewed_as_any_value(mode):
    model, opt, ref = _trained(2)
    w, v = model[0].weight, ref[0].weight
    assert w._storage.value.packed is not None
    with tpu_runtime.set_eager_mode(mode), torch.no_grad():
        row = w[1]  # a view of a packed value
        w.mul_(2)  # written in place: the view sees it
        v.mul_(2)
        b = model[2].bias + 1  # another packed value read by an op
        torch.testing.assert_close(row.cpu(), v[1].cpu())
        torch.testing.assert_close(b.cpu(), ref[2].bias.cpu() + 1)
        for st, ref_st in zip(opt.state[model[2].weight].values(), opt.state[model[2].weight].values()):
            assert torch.equal(st.cpu(), ref_st.cpu())
    torch.testing.assert_close(w.detach().cpu(), v.detach().cpu())


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_packed_value_copied_into_another_tensor_becomes_its_value(mode):
    """``copy_`` of a packed value (its graph has run: no graph to note the write in) into a base tensor and into
    a view: ``load_state_dict`` of a model just trained in fused eager (a target network, an EMA copy)."""
    model, _, ref = _trained(2)
    target = _mlp().to("tpu")
    assert model[0].weight._storage.value.packed is not None
    with tpu_runtime.set_eager_mode(mode):
        target.load_state_dict(model.state_dict())
        rows = torch.zeros(2, 3, device="tpu")
        with torch.no_grad():
            rows[1].copy_(model[0].bias[:3])
    for p, q in zip(target.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach().cpu(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rows.cpu()[1], ref[0].bias.detach().cpu()[:3], rtol=1e-5, atol=1e-6)
    assert not rows.cpu()[0].any()


def test_a_failing_graph_that_read_packed_values_keeps_the_others():
    """The op-by-op rerun of a failed graph (:func:`tpu_runtime.eager.recover.recover`) cuts its slice leaves too."""
    model, _, ref = _trained(2)
    with tpu_runtime.set_eager_mode("fused"), torch.no_grad():
        assert model[0].bias._storage.value.packed is not None
        b = model[0].bias * 2
        big = torch.ones(1, device="tpu").expand(2**58).clone()  # 1 EiB: no machine allocates it
        with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
            big[0].item()
        torch.testing.assert_close(b.cpu(), ref[0].bias.cpu() * 2)


def test_plan_packing_packs_each_dtype_with_enough_small_outputs():
    f32, i64 = torch.float32, torch.int64
    specs = [((3,), f32), ((PACK_MAX + 1,), f32), ((), f32), ((2, 2), f32), ((5,), i64), ((1,), f32), ((7,), f32)]
    kept, groups, slots = plan_packing(specs, donated=0)
    assert groups == ((0, 3, 5, 6),)  # 4 small float32 outputs; the large, 0-d and lone int64 ones alone
    assert kept == (1, 2, 4)
    assert slots == ((3, 0), 0, 1, (3, 3), 2, (3, 7), (3, 8))
    kept, groups, slots = plan_packing(specs, donated=1)  # a donated output (written into its leaf) stays alone
    assert groups == () and kept == tuple(range(7))


def test_a_strict_in_place_op_donating_its_target_reads_a_packed_value():
    # strict eager gives a large target's buffer to the op (run_into); the op's other input, a value a fused graph
    # packed, is cut out first
    torch.manual_seed(0)
    m = torch.nn.Linear(3, 300).to("tpu")
    opt = torch.optim.AdamW(m.parameters(), lr=0.1)
    with tpu_runtime.set_eager_mode("fused"):
        for _ in range(2):
            m(torch.ones(4, 3, device="tpu")).sum().backward()
            opt.step()
    assert m.bias._storage.value.packed is not None
    cpu = torch.randn(300, 300)
    big = cpu.to("tpu")
    with torch.no_grad():
        big.add_(m.bias)  # (strict: the default mode)
    torch.testing.assert_close(big.cpu(), cpu + m.bias.detach().cpu())


def test_a_compiled_call_cuts_the_packed_values_it_reads_in_one_call_per_packed_array(monkeypatch):
    # a compiled function reading the parameters a fused-eager optimizer step returned packed (one array for all)
    model, _, ref = _trained(2)
    params, ref_params = list(model.parameters()), list(ref.parameters())
    assert all(p._storage.value.packed is not None for p in params)
    F = torch.nn.functional
    compiled = torch.compile(lambda ps, x: F.linear(F.relu(F.linear(x, ps[0], ps[1])), ps[2], ps[3]) + ps[4].sum(),
                             backend="tpu")
    x = torch.randn(4, 3).to("tpu")
    want = compiled(ref_params + ref_params[:1], x)  # (compiled here: tracing may print its inputs, which reads them)
    cut_alone: list = []
    real = lazy.unpack
    monkeypatch.setattr(lazy, "unpack", lambda v: cut_alone.append(v) or real(v))
    got = compiled(params + params[:1], x)  # (a value read twice is cut once)
    assert not cut_alone  # one executable cut the four parameters out together
    torch.testing.assert_close(got.detach().cpu(), want.detach().cpu(), rtol=1e-5, atol=1e-6)


def test_a_strict_op_reading_many_packed_values_cuts_them_in_one_call(monkeypatch):
    model, _, ref = _trained(2)
    cut_alone: list = []
    real = lazy.unpack
    monkeypatch.setattr(lazy, "unpack", lambda v: cut_alone.append(v) or real(v))
    with torch.no_grad():  # (strict: the default mode) one foreach op over the four packed parameters
        got = torch._foreach_add(list(model.parameters()), 1)
    assert not cut_alone
    for g, q in zip(got, ref.parameters()):
        torch.testing.assert_close(g.cpu(), q.detach().cpu() + 1, rtol=1e-5, atol=1e-6)
