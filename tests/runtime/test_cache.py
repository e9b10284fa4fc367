"""The shared compile cache: statistics, cache_only, the on-disk cache, torch.compile."""

from __future__ import annotations

import warnings

import pytest
import torch

import tpu_runtime
from tests.runtime.conftest import batch, tiny_mlp


def test_stats_count_hits_and_misses():
    x = torch.randn(4, 3).to("tpu")
    (x - 0.25).cpu()
    before = tpu_runtime.cache_stats()
    for _ in range(3):
        x - 0.25
    after = tpu_runtime.cache_stats()
    assert after.requests - before.requests == 3 and after.hits - before.hits == 3
    assert after.misses == before.misses and after.compile_seconds >= 0


def test_cache_only_raises_on_a_miss_and_allows_hits():
    x = torch.randn(4, 3).to("tpu")
    torch.exp(x).cpu()
    with tpu_runtime.cache_only():
        torch.exp(x).cpu()                           # compiled above: fine
        with pytest.raises(tpu_runtime.CacheMissError, match="cache_only"):
            torch.exp(torch.ones(7, 1).to("tpu"))    # a new signature


@pytest.mark.parametrize("disk", [False, True])
def test_a_miss_in_cache_only_leaves_an_in_place_target_intact(disk, tmp_path):
    # strict eager donates a large in-place target to its executable: with a disk cache the miss was found by
    # running it, and the tensor was gone ("Array has been deleted")
    session_dir = tpu_runtime.cache_dir()
    tpu_runtime.set_cache_dir(tmp_path if disk else None)
    try:
        x = torch.arange(20000.0).to("tpu")  # (80 KB: donated)
        with pytest.raises(tpu_runtime.CacheMissError), tpu_runtime.cache_only():
            x.mul_(3.0)
        assert x[:3].tolist() == [0.0, 1.0, 2.0]
    finally:
        tpu_runtime.set_cache_dir(session_dir)


def test_a_miss_in_cache_only_in_fused_eager_keeps_the_values_pending_in_the_graph():
    # the graph whose compile missed raised, and every value pending in it was lost (a BatchNorm's running
    # statistics, written in place): it now runs, then the miss is raised at the sync
    torch.manual_seed(0)
    with tpu_runtime.set_eager_mode("fused"):
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8)).to("tpu")
        model(torch.randn(16, 4).to("tpu")).sum().item()
        x = torch.randn(5, 4)
        with pytest.raises(tpu_runtime.CacheMissError, match="fused graph"), tpu_runtime.cache_only():
            model(x.to("tpu")).sum().item()  # a new batch size: a new graph
        stats = model[1].running_mean.cpu()  # (raised: "a value of the fused graph was lost")
    assert torch.isfinite(stats).all() and not torch.equal(stats, torch.zeros(8))


def test_float_arguments_of_arithmetic_do_not_recompile():
    x = torch.randn(4, 3).to("tpu")
    (x * 0.125).cpu()
    with tpu_runtime.cache_only():
        for lr in (0.1, 0.01, 0.001):                 # e.g. a learning-rate schedule
            (x * lr).cpu()


def test_disk_cache_serves_a_new_process_view(tmp_path):
    session_dir = tpu_runtime.cache_dir()
    tpu_runtime.set_cache_dir(tmp_path)
    try:
        x = torch.randn(4, 3).to("tpu")
        torch.cos(x).cpu()
        assert any(tmp_path.iterdir()), "nothing was written to the cache directory"
        tpu_runtime.clear_cache()                     # forget everything in memory, as a new process would
        before = tpu_runtime.cache_stats()
        torch.cos(x).cpu()
        after = tpu_runtime.cache_stats()
        assert after.misses - before.misses == 1 and after.disk_hits - before.disk_hits == 1
    finally:
        tpu_runtime.set_cache_dir(session_dir)


def test_corrupt_disk_entry_is_recompiled(tmp_path):
    session_dir = tpu_runtime.cache_dir()
    tpu_runtime.set_cache_dir(tmp_path)
    try:
        x = torch.randn(4, 3).to("tpu")
        want = torch.sin(x).cpu()
        entries = [p for p in tmp_path.rglob("*") if p.is_file()]
        assert entries
        for p in entries:
            p.write_bytes(b"\x00garbage" * 7)
        tpu_runtime.clear_cache()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = torch.sin(x).cpu()
        assert torch.equal(got, want)
        assert any("persistent compilation cache" in str(w.message) for w in caught)
    finally:
        tpu_runtime.set_cache_dir(session_dir)


def test_torch_compile_backend_shares_the_cache():
    model = tiny_mlp()
    x, _ = batch()
    compiled = torch.compile(model, backend="tpu")
    before = tpu_runtime.cache_stats()
    out = compiled(x)
    torch.testing.assert_close(out, model(x), rtol=1e-5, atol=1e-6)
    mid = tpu_runtime.cache_stats()
    assert mid.requests > before.requests
    compiled(x)
    assert tpu_runtime.cache_stats().hits > mid.hits


def test_convert_target_tpu_module_uses_the_shared_cache():
    from torch.export import Dim

    from converter import convert

    model = tiny_mlp()
    x, _ = batch()
    tpu = convert(model, (x,), target="tpu", dynamic_shapes={"input": {0: Dim("batch", min=2, max=64)}})
    before = tpu_runtime.cache_stats()
    torch.testing.assert_close(tpu(x), model(x), rtol=1e-5, atol=1e-6)
    mid = tpu_runtime.cache_stats()
    assert (mid.requests - before.requests, mid.misses - before.misses) == (1, 1)
    with tpu_runtime.cache_only():
        tpu(x)                                        # compiled above: a hit in the shared cache
        with pytest.raises(tpu_runtime.CacheMissError, match="TpuModule"):
            tpu(torch.randn(7, 3))                    # a batch size never compiled, in memory or on disk
    after = tpu_runtime.cache_stats()
    assert after.hits - mid.hits == 1
    assert (tpu.stats.requests, tpu.stats.hits, tpu.stats.misses) == (3, 1, 2)


def test_convert_target_tpu_module_keeps_tpu_inputs_on_the_device(monkeypatch):
    from converter import convert
    from tpu_runtime import module

    model = tiny_mlp()
    x, _ = batch()
    tpu = convert(model, (x,), target="tpu")
    want = model(x)
    torch.testing.assert_close(tpu(x), want, rtol=1e-5, atol=1e-6)  # CPU in, CPU out

    def refuse(*_a, **_k):
        raise AssertionError("host round trip")

    for name in ("to_jax", "to_torch", "host_array"):
        monkeypatch.setattr(module, name, refuse)
    got = tpu(x.to("tpu"))                                             # tpu in, tpu out, no host copy
    assert got.device.type == "tpu"
    monkeypatch.undo()
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("device", ["cpu", "tpu"])
def test_a_compiled_graph_is_freed_with_its_executables_once_dynamo_lets_it_go(device):
    # each compiled graph stayed for good (~4 MB), even after torch._dynamo.reset(): its cache entries were never
    # dropped, and the tracebacks JAX keeps in C++ for each executable held dynamo's transformed code, whose
    # release is what makes dynamo remove the globals that hold the compiled function
    import gc

    from tpu_runtime.cache import CACHE

    def graphs():  # the cache's torch.compile entries (eager ops add their own)
        return sum(isinstance(k, tuple) and k[0] == "dynamo" for k in CACHE._entries)

    x = torch.randn(4, 8).to(device).requires_grad_()
    torch._dynamo.reset()
    gc.collect()
    before = graphs()
    torch.compile(lambda t: (t.sin() * 3).sum(), backend="tpu")(x).backward()
    torch.testing.assert_close(x.grad.cpu(), 3 * x.detach().cpu().cos())
    assert graphs() == before + 2  # forward and backward
    torch._dynamo.reset()
    gc.collect()
    assert graphs() == before
