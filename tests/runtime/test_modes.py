"""Eager modes: fused graphs and their cache, debug checks, mode switching."""

from __future__ import annotations

import copy

import jax.numpy as jnp
import numpy as np
import pytest
import torch
import torch.nn.functional as F

import tpu_runtime
from converter.errors import ParityError
from converter.lowering.registry import override
from tests.runtime.conftest import batch, tiny_mlp, train_steps
from tpu_runtime.eager import fused
from tpu_runtime.eager.lazy import LazyRef


def _train(model, x, y, steps):
    opt = torch.optim.AdamW(model.parameters(), lr=0.05)
    return train_steps(model, opt, x, y, steps)


def test_set_eager_mode_call_and_context_manager():
    assert tpu_runtime.get_eager_mode() == "strict"
    with tpu_runtime.set_eager_mode("fused"):
        assert tpu_runtime.get_eager_mode() == "fused"
        with tpu_runtime.eager_mode("debug", check_nan=False):
            assert tpu_runtime.get_eager_mode() == "debug"
        assert tpu_runtime.get_eager_mode() == "fused"
    assert tpu_runtime.get_eager_mode() == "strict"
    with pytest.raises(ValueError, match="unknown eager mode"):
        tpu_runtime.set_eager_mode("lazy")


def test_env_var_picks_the_default_mode(monkeypatch):
    from tpu_runtime import eager

    monkeypatch.setenv("TPU_EAGER_MODE", "fused")
    assert eager.default_mode() == "fused"
    monkeypatch.setenv("TPU_EAGER_MODE", "bogus")
    with pytest.raises(ValueError, match="TPU_EAGER_MODE"):
        eager.default_mode()


def test_fused_ops_are_lazy_until_a_sync_point():
    x = torch.ones(4, 3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        y = (x * 2).sum(0)
        assert type(y._storage.value) is LazyRef and len(fused.GRAPH) >= 2
        assert "8." in repr(y)                      # print is a sync point
        assert len(fused.GRAPH) == 0
        z = y + 1
        tpu_runtime.sync()
        assert type(z._storage.value) is not LazyRef or z._storage.value.concrete is not None
        assert z.sum().item() == 27.0               # item is a sync point


def test_fused_lowering_errors_raise_at_the_op_and_spare_the_graph():
    # an op its lowering refuses (max of an empty tensor) raises at the op, naming it, as in strict
    # eager; the ops recorded before and after it still run
    x = torch.ones(3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        before = x * 2
        with pytest.raises(Exception, match="aten.max.default"):
            torch.zeros(0, 3, device="tpu").max()
        after = before + 1
        assert type(after._storage.value) is LazyRef
        assert after.cpu().tolist() == [3.0, 3.0, 3.0]


def test_fused_graph_flushes_at_the_size_limit(monkeypatch):
    monkeypatch.setattr(fused, "MAX_OPS", 5)
    x = torch.ones(4, 3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        y = x
        for _ in range(6):
            y = y + 1
        assert len(fused.GRAPH) < 5
        assert torch.equal(y.cpu(), torch.full((4, 3), 7.0))
        params = [torch.zeros(2).to("tpu") for _ in range(3)]
        for step in range(2):  # a foreach op counts its outputs: 3 + 3 reach the limit
            torch._foreach_add_(params, 1.0)
            assert len(fused.GRAPH) == 1 - step
        assert all(torch.equal(p.cpu(), torch.full((2,), 2.0)) for p in params)


def _graph_outputs(monkeypatch) -> list:
    """The number of outputs of each fused graph compiled from now on (appended as each one compiles)."""
    real, outputs = fused._graph_fn, []

    def graph_fn(nodes, outs, *packing):
        outputs.append(len(outs))
        return real(nodes, outs, *packing)

    monkeypatch.setattr(fused, "_graph_fn", graph_fn)
    return outputs


def test_a_views_cached_value_is_recomputed_not_made_a_graph_output(monkeypatch):
    outputs = _graph_outputs(monkeypatch)
    x = torch.arange(6.0).reshape(2, 3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        m = x * 2.5                      # a pending value (a new constant: this graph compiles)
        v = m.t()                        # a view of it ...
        w = v + 1                        # ... read once: its value is cached
        assert type(v._cached) is LazyRef
        tpu_runtime.sync()
        assert outputs == [2]            # m and w; not v's transposed copy
        assert v._cached is None
        expected = (torch.arange(6.0).reshape(2, 3) * 2.5).t()
        assert torch.equal(v.cpu(), expected)        # recomputed from its storage when read again
        assert torch.equal(w.cpu(), expected + 1)
        assert torch.equal(m.cpu(), expected.t())


def test_fused_pending_values_nothing_holds_are_not_graph_outputs(monkeypatch):
    # the graph keeps every pending value it handed out until the sync; there only those something else
    # still holds (a tensor, a list) become outputs: the dropped intermediates are never written out
    outputs = _graph_outputs(monkeypatch)
    x = torch.arange(6.0).reshape(2, 3).to("tpu")
    with tpu_runtime.set_eager_mode("fused"):
        a = x * 3.25                     # (a new constant: this graph compiles)
        b = a + 1
        kept = [b * 2]
        del a, b                         # dead: only the graph's list holds their pending values
        tpu_runtime.sync()
        assert outputs == [1]
        assert torch.equal(kept[0].cpu(), (torch.arange(6.0).reshape(2, 3) * 3.25 + 1) * 2)


def test_decompositions_with_named_results_record_one_node():
    # nll_loss_forward's decomposition returns torch's named result type: still traced into one plan (the targets,
    # uploaded in range, need no check node of their own: tpu_runtime.bounds)
    logp = torch.randn(4, 5).log_softmax(1)
    target = torch.tensor([0, 2, 4, 1])
    with tpu_runtime.set_eager_mode("fused"):
        a, b = logp.to("tpu"), target.to("tpu")
        tpu_runtime.sync()
        out = F.nll_loss(a, b)
        assert len(fused.GRAPH) == 1
        torch.testing.assert_close(out.cpu(), F.nll_loss(logp, target))


def test_training_batch_norm_is_one_node_with_its_statistics_written_back():
    torch.manual_seed(0)
    ref = torch.nn.BatchNorm1d(5)
    bn = copy.deepcopy(ref).to("tpu")
    x = torch.randn(6, 5) * 3 + 1
    with tpu_runtime.set_eager_mode("fused"):
        xt = x.to("tpu")
        tpu_runtime.sync()
        y = bn(xt)
        # the functional batch norm, and num_batches_tracked += 1 (torch's decomposition: ~20 ops)
        assert len(fused.GRAPH) == 2
        torch.testing.assert_close(y.cpu(), ref(x), rtol=1e-5, atol=1e-6)
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        torch.testing.assert_close(getattr(bn, name).cpu(), getattr(ref, name), rtol=1e-5, atol=1e-6)
    # eval mode: torch's decomposition takes a CPU-only branch when traced on CPU (empty saved
    # statistics); the trace is refused for that and the op still matches CPU
    bn.eval()
    ref.eval()
    torch.testing.assert_close(bn(x.to("tpu")).cpu(), ref(x), rtol=1e-5, atol=1e-6)


def test_fused_python_floats_are_graph_inputs_one_per_value():
    x = torch.tensor([1.0, -2.0, 3.0, 0.5])
    tx = x.to("tpu")
    for a, b in ((0.5, 0.5), (0.5, 2.0), (float("nan"), -0.0), (0.0, -0.0)):
        with tpu_runtime.set_eager_mode("fused"):
            got = [tx * a + b, tx / b, tx * b - a]
            shared = [v for v in fused.GRAPH.leaves if type(v) is float and v and v == v]
            assert sorted(shared) == sorted({v for v in (a, b) if v and v == v})  # one leaf per value
            got = [t.cpu() for t in got]
        for g, w in zip(got, (x * a + b, x / b, x * b - a)):
            assert torch.equal(g, w) or torch.allclose(g, w, equal_nan=True)
            assert torch.equal(torch.signbit(g), torch.signbit(w))


def _with_reference(steps):
    """The tiny MLP on the device, its batch there, and the losses of ``steps`` strict steps of a copy."""
    model = tiny_mlp()
    ref = copy.deepcopy(model).to("tpu")
    x, y = batch()
    tx, ty = x.to("tpu"), y.to("tpu")
    want = _train(ref, tx, ty, steps)
    return model.to("tpu"), tx, ty, want


def test_fused_training_matches_strict_and_steady_state_hits_the_cache():
    model, tx, ty, want = _with_reference(4)
    with tpu_runtime.set_eager_mode("fused"):
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        got = []
        for step in range(4):
            ctx = tpu_runtime.cache_only() if step == 3 else _null()
            with ctx:  # by the 4th step the graph of a step is a cache hit: nothing compiles
                loss = F.mse_loss(model(tx), ty)
                opt.zero_grad()
                loss.backward()
                assert len(fused.GRAPH) == 0     # the backward's end ran forward + backward (not waited for)
                opt.step()
                assert len(fused.GRAPH) == 0     # the step's end ran the optimizer's graph (not waited for)
                value = model[0].weight._storage.value  # (run: an array, or a LazyRef with its value or packed)
                assert type(value) is not LazyRef or value.concrete is not None or value.packed is not None
                got.append(loss.item())
    assert got == pytest.approx(want, rel=1e-5)


def test_fused_optimizer_step_reuses_the_buffers_it_overwrites(monkeypatch):
    # once the optimizer's graph has run, the old parameters and moments are dead: the graph writes
    # its outputs into their buffers (donated). An array something else still holds is not donated.
    # (Weights of 260 x 260 elements: small outputs are packed instead, see tests/runtime/test_packing.py.)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(260, 260), torch.nn.ReLU(), torch.nn.Linear(260, 260))
    tx, ty = torch.randn(4, 260).to("tpu"), torch.randn(4, 260).to("tpu")
    want = _train(copy.deepcopy(model).to("tpu"), tx, ty, 3)
    model = model.to("tpu")
    donated = []
    real = fused._donation

    def spy(leaves, nodes, outs, replaces, *structure):
        outs, d = real(leaves, nodes, outs, replaces, *structure)
        donated.append(([id(leaves[i]) for i in d], {id(v) for v in leaves}))
        return outs, d

    monkeypatch.setattr(fused, "_donation", spy)
    with tpu_runtime.set_eager_mode("fused"):
        opt = torch.optim.AdamW(model.parameters(), lr=0.05)
        got = _train_steps_holding(model, opt, tx, ty)
    assert got == pytest.approx(want, rel=1e-5)
    held, before = got.held, got.held_value
    ids, leaf_ids = donated[-1]  # the last optimizer step's graph
    assert len(ids) == 3 * 2 - 1  # 2 large parameters, each with its value and 2 moments; minus the held one
    assert id(held) in leaf_ids and id(held) not in ids
    assert not held.is_deleted() and (jnp.asarray(held) == before).all()


def test_strict_in_place_ops_donate_the_buffer_nothing_else_holds(monkeypatch):
    # the old value of an in-place op's target is dead once it is replaced: its buffer is donated to
    # the op's executable (XLA may write the result into it), unless something else holds it
    from tpu_runtime.cache import CACHE
    from tpu_runtime.values import materialize

    donated, real = [], CACHE.compile

    def spy(key, fn, args, describe=lambda: "", donate=()):
        donated.append(donate)
        return real(key, fn, args, describe, donate)

    monkeypatch.setattr(CACHE, "compile", spy)
    cpu = torch.randn(131, 257)  # 134 KB: large enough to be donated; a shape no other test compiles
    with tpu_runtime.set_eager_mode("strict"):
        x = cpu.to("tpu")
        held = materialize(x)
        x.mul_(2)  # the old array is held here: not donated, and intact
        assert donated[-1] == () and not held.is_deleted()
        assert torch.equal(torch.from_numpy(np.array(held)), cpu)
        del held
        x.add_(1)
        assert donated[-1] == (0,)
        ps = [cpu.to("tpu") for _ in range(3)]
        torch._foreach_div_(ps, 4.0)
        assert donated[-1] == (0, 1, 2)
        small = torch.ones(3).to("tpu")
        small.sub_(1)  # a few bytes: a fresh buffer costs less than a donation
        assert donated[-1] == ()
        w, ref = torch.nn.Parameter(cpu.to("tpu")), torch.nn.Parameter(cpu.clone())
        opts = [torch.optim.AdamW([p], lr=0.1, fused=True) for p in (w, ref)]
        for _ in range(2):  # the 2nd step's _fused_adamw_ donates the parameter and both moments
            for p, opt in zip((w, ref), opts):
                p.grad = torch.full_like(p, 0.5)
                opt.step()
        assert len(donated[-1]) == 3
    torch.testing.assert_close(w.detach().cpu(), ref.detach())
    torch.testing.assert_close(x.cpu(), cpu * 2 + 1)
    for p in ps:
        torch.testing.assert_close(p.cpu(), cpu / 4)
    assert small.cpu().tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_clone_keeps_its_value_when_either_side_is_written(mode):
    # a clone holds its source's array (immutable: no copy is made); a write into either side replaces that
    # side's value only, and an array two tensors hold is never donated (large enough to be tried)
    cpu = torch.randn(131, 257)
    with tpu_runtime.set_eager_mode(mode):
        x = cpu.to("tpu")
        c, v, w = x.clone(), x.t().clone(), x.t().contiguous()  # (v, w: a view's value, copied)
        x.mul_(2)
        c.add_(1)
        pending = x.clone()  # (fused: x's value is still pending here)
        x.sub_(cpu.to("tpu"))
        p = torch.nn.Parameter(cpu.to("tpu"))
        before = p.detach().clone()
        opt = torch.optim.AdamW([p], lr=0.1)
        for _ in range(2):
            p.grad = torch.ones_like(p)
            opt.step()
        assert v.stride() == (1, 257) and w.stride() == (131, 1)  # (as the CPU's)
    torch.testing.assert_close(x.cpu(), cpu)
    torch.testing.assert_close(c.cpu(), cpu + 1)
    torch.testing.assert_close(v.cpu(), cpu.t())
    torch.testing.assert_close(w.cpu(), cpu.t())
    torch.testing.assert_close(pending.cpu(), cpu * 2)
    torch.testing.assert_close(before.cpu(), cpu)
    assert not torch.allclose(p.detach().cpu(), cpu)


class _Losses(list):
    held = held_value = None


def _train_steps_holding(model, opt, tx, ty):
    """3 fused training steps; before the last optimizer step, hold the first weight's array."""
    from tpu_runtime.values import materialize

    losses = _Losses()
    for step in range(3):
        loss = F.mse_loss(model(tx), ty)
        opt.zero_grad()
        loss.backward()
        if step == 2:
            losses.held = materialize(model[0].weight)
            losses.held_value = jnp.array(losses.held, copy=True)
        opt.step()
        losses.append(loss.item())
    return losses


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None


def test_debug_mode_names_the_op_that_made_a_nan():
    t = torch.tensor([1.0, -1.0, 4.0]).to("tpu")
    with tpu_runtime.set_eager_mode("debug"):
        ok = t.abs().sqrt()
        assert torch.equal(ok.cpu(), torch.tensor([1.0, 1.0, 2.0]))
        with pytest.raises(tpu_runtime.NonFiniteError, match=r"aten\.sqrt\.default produced NaN"):
            t.sqrt()


def test_debug_mode_compares_each_op_with_cpu():
    def bad_neg(ctx, x):
        return x  # wrong on purpose

    t = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0]]).to("tpu")  # a shape no other test uses
    with override(torch.ops.aten.neg.default, bad_neg):
        try:
            with tpu_runtime.set_eager_mode("debug", compare_cpu=True):
                assert torch.equal((t * 2).cpu(), torch.tensor([[2.0, 4.0, 6.0, 8.0, 10.0]]))
                with pytest.raises(ParityError, match=r"first op that differs from PyTorch CPU: aten\.neg"):
                    -t
            assert "aten.neg.default" in tpu_runtime.debug_report.first
        finally:
            tpu_runtime.clear_cache()


def test_debug_mode_compares_ops_taking_python_floats():
    # the python floats that are plan inputs (mul.Scalar's other, add's alpha) reach the CPU op as floats
    t = torch.tensor([[1.0, -2.0, 3.5]]).to("tpu")
    with tpu_runtime.set_eager_mode("debug", compare_cpu=True, raise_on_error=True):
        before = tpu_runtime.debug_report.compared
        got = [torch.ops.aten.mul.Scalar(t, 0.75), torch.ops.aten.add.Scalar(t, 1.5), t.add(t, alpha=0.5), t * 0.25]
        assert tpu_runtime.debug_report.compared - before == 4
    cpu = t.cpu()
    want = [cpu * 0.75, cpu + 1.5, cpu + cpu * 0.5, cpu * 0.25]
    for g, w in zip(got, want):
        torch.testing.assert_close(g.cpu(), w)


def test_modes_share_one_kernel_library():
    x = torch.randn(4, 3)
    results = {}
    for mode in ("strict", "debug", "fused"):
        with tpu_runtime.set_eager_mode(mode):
            results[mode] = (torch.tanh(x.to("tpu")) * 3).cpu()
    assert torch.equal(results["strict"], results["debug"]) and torch.equal(results["strict"], results["fused"])
    assert jnp.allclose(results["strict"].numpy(), (torch.tanh(x) * 3).numpy(), atol=1e-6)


def test_fused_threads_recording_at_once_get_their_own_values():
    # one graph for every thread: a flush never runs between an op reading its inputs' nodes and
    # appending its own (threads recording at once raised IndexError)
    import threading

    results, errors = {}, []

    def work(i):
        try:
            acc = torch.full((4,), float(i)).to("tpu")
            for k in range(40):
                acc = acc * 1.01 + k
            results[i] = acc.cpu()
        except Exception as e:  # reported below
            errors.append(e)

    with tpu_runtime.set_eager_mode("fused"):
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not errors
    for i in range(4):
        want = torch.full((4,), float(i))
        for k in range(40):
            want = want * 1.01 + k
        torch.testing.assert_close(results[i], want)


def test_fused_graph_that_fails_keeps_the_values_that_do_not_depend_on_the_failing_op():
    """A graph that runs out of memory is rerun op by op: pending values that do not depend on the failing op are
    read as strict eager would give them; the failing op's values raise its error when read."""
    with tpu_runtime.set_eager_mode("fused"):
        x = torch.arange(3.0).to("tpu")
        b = x * 2 + 1
        c = x.clone()
        c.add_(1)  # an in-place update of a pending value
        big = torch.ones(1, device="tpu").expand(2**58).clone()  # 1 EiB: no machine allocates it
        with pytest.raises(RuntimeError, match="RESOURCE_EXHAUSTED"):
            big[0].item()
        assert b.cpu().tolist() == [1.0, 3.0, 5.0] and c.cpu().tolist() == [1.0, 2.0, 3.0]
        with pytest.raises(RuntimeError, match="lost because the graph failed"):
            big.sum().item()


def test_an_interrupted_fused_compile_loses_its_values_loudly(monkeypatch):
    # Ctrl-C while a graph compiled left its pending values pointing into the old graph: the next graph read them
    # as nodes of its own (a wrong value, or an IndexError)
    from tpu_runtime.cache import CACHE

    with tpu_runtime.set_eager_mode("fused"):
        p = torch.zeros(4).to("tpu")
        tpu_runtime.sync()
        p.add_(torch.ones(4).to("tpu").exp())  # pending in the graph that is interrupted

        def interrupted(*args, **kwargs):
            raise KeyboardInterrupt

        with monkeypatch.context() as m:
            m.setattr(CACHE, "compile", interrupted)
            with pytest.raises(KeyboardInterrupt):
                tpu_runtime.sync()
        y = torch.full((4,), 42.0).to("tpu")
        for _ in range(3):
            y = y * 1.0
        with pytest.raises(RuntimeError, match="lost because the graph failed: KeyboardInterrupt"):
            (p + 0).cpu()
        assert y.cpu().tolist() == [42.0] * 4
