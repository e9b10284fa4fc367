"""The ``tpu`` device in strict eager mode: transfers, factories, printing, ops (views: test_device_views.py)."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch

import tpu_runtime
from converter.errors import UnsupportedOpError
from tests.runtime.conftest import batch, tiny_mlp


def test_device_is_registered_as_tpu():
    assert torch.device("tpu").type == "tpu"
    assert torch.tpu.is_available() and torch.tpu.device_count() == 1
    t = torch.ones(2).to("tpu")
    assert t.device == torch.device("tpu", 0) and t.is_tpu and isinstance(t, tpu_runtime.TpuTensor)


@pytest.mark.parametrize("dtype", [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.float16])
def test_transfer_roundtrip_keeps_values_and_dtype(dtype):
    x = (torch.randn(4, 3) * 10).to(dtype)
    back = x.to("tpu").cpu()
    assert back.dtype == dtype and back.device.type == "cpu"
    assert torch.equal(back, x)


def test_factories_create_tpu_tensors():
    z = torch.zeros(4, 3, device="tpu")
    o = torch.ones(4, 3, device="tpu", dtype=torch.int64)
    f = torch.full((4, 3), 2.5, device="tpu")
    a = torch.arange(5, device="tpu")
    e = torch.empty(4, 3, device="tpu")
    r = torch.randn(4, 3, device="tpu")
    i = torch.eye(3, device="tpu")
    for t in (z, o, f, a, e, r, i):
        assert t.device.type == "tpu"
    assert torch.equal(z.cpu(), torch.zeros(4, 3)) and torch.equal(o.cpu(), torch.ones(4, 3, dtype=torch.int64))
    assert torch.equal(f.cpu(), torch.full((4, 3), 2.5))
    assert torch.equal(a.cpu(), torch.arange(5)) and a.dtype == torch.int64
    assert e.shape == (4, 3) and r.shape == (4, 3) and r.dtype == torch.float32
    assert torch.equal(i.cpu(), torch.eye(3))


def test_print_item_and_format():
    t = torch.tensor([1.5, -2.0]).to("tpu")
    text = repr(t)
    assert "device='tpu:0'" in text and "1.5000" in text
    assert t.sum().item() == pytest.approx(-0.5)
    assert f"{t[0]:.2f}" == "1.50"
    assert "requires_grad=True" in repr(t.clone().requires_grad_())
    weight = torch.nn.Linear(2, 1).to("tpu").weight
    assert repr(weight).startswith("Parameter containing:\ntensor([[")  # as the CPU's (the first line was dropped)
    assert repr(weight).endswith("device='tpu:0', requires_grad=True)")


def test_numpy_needs_a_copy_to_the_host_as_for_cuda():
    import numpy as np

    t = torch.tensor([1.5, -2.0], requires_grad=True).to("tpu")
    np.testing.assert_array_equal(t.numpy(force=True), [1.5, -2.0])
    for convert in (t.detach().numpy, lambda: np.asarray(t.detach())):
        with pytest.raises(TypeError, match=r"can't convert tpu:0 device type tensor to numpy. Use Tensor.cpu\(\)"):
            convert()


def test_allclose_returns_a_python_bool_as_on_cpu():
    a = torch.tensor([1.0, float("nan"), 3.0])
    for b, kwargs in ((a + 1e-7, {}), (a + 1e-7, {"equal_nan": True}), (a + 1e-7, {"rtol": 0.0, "atol": 0.0}),
                      (torch.ones(1), {})):
        got = torch.allclose(a.to("tpu"), b.to("tpu"), **kwargs)
        assert type(got) is bool and got == torch.allclose(a, b, **kwargs), kwargs


def test_unique_legacy_overload_and_index_fill_gradient_match_cpu():
    # index_fill's backward calls the older aten._unique (it had no route)
    x = torch.tensor([3, 1, 3, 2, 1])
    for got, want in zip(torch.ops.aten._unique(x.to("tpu"), True, True), torch.ops.aten._unique(x, True, True)):
        assert torch.equal(got.cpu(), want)
    src, idx, w = torch.randn(4, 5), torch.tensor([1, 3, 1]), torch.arange(20.0).reshape(4, 5)
    grads = []
    for device in ("cpu", "tpu"):
        a = src.clone().to(device).requires_grad_()
        v = torch.tensor(2.0).to(device).requires_grad_()
        (a.index_fill(1, idx.to(device), v) * w.to(device)).sum().backward()
        grads.append((a.grad.cpu(), v.grad.cpu()))
    for got, want in zip(grads[1], grads[0]):
        torch.testing.assert_close(got, want)


def test_ops_match_cpu():
    x, _ = batch()
    w = torch.randn(3, 5)
    t, tw = x.to("tpu"), w.to("tpu")
    cases = [
        (lambda a, b: a * 0.5 + 1, lambda a, b: a * 0.5 + 1),
        (lambda a, b: a @ b, None),
        (lambda a, b: torch.softmax(a, dim=-1), None),
        (lambda a, b: a.sum(0) / a.abs().max(), None),
        (lambda a, b: (a > 0).to(torch.int64).cumsum(1), None),
    ]
    for fn, _ in cases:
        got, want = fn(t, tw).cpu(), fn(x, w)
        assert got.dtype == want.dtype and got.shape == want.shape
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_copy_between_devices_and_dtypes():
    t = torch.zeros(4, 3, device="tpu")
    t.copy_(torch.ones(3, dtype=torch.int64))       # CPU source, broadcast and cast
    assert torch.equal(t.cpu(), torch.ones(4, 3))
    h = torch.empty(4, 3, dtype=torch.float64)
    h.copy_(t)                                      # tpu source into a CPU tensor
    assert torch.equal(h, torch.ones(4, 3, dtype=torch.float64))
    assert t.to(torch.int32).cpu().dtype == torch.int32


def test_module_to_keeps_parameters_tied_and_converts_dtypes():
    emb, head = torch.nn.Embedding(5, 3), torch.nn.Linear(3, 5, bias=False)
    head.weight = emb.weight
    model = torch.nn.ModuleDict({"emb": emb, "head": head})
    weight = emb.weight
    model.to("tpu")
    assert model["emb"].weight is model["head"].weight is weight
    assert weight.device.type == "tpu" and isinstance(weight, torch.nn.Parameter)
    model.half()
    assert weight.dtype == torch.float16 and weight.cpu().dtype == torch.float16


def test_module_to_keeps_the_attributes_set_on_its_parameters():
    # the swap that moves a parameter in place also swapped its Python attributes away (CUDA's param.data
    # assignment keeps them): training code reads flags such as p._no_weight_decay
    model = torch.nn.Linear(3, 2)
    model.bias._no_weight_decay = True
    model.weight.shard = "row"
    model.to("tpu")
    assert model.bias._no_weight_decay is True and model.weight.shard == "row"
    assert not hasattr(model.weight, "_no_weight_decay")
    model.half()
    assert model.bias._no_weight_decay is True and model.bias.dtype == torch.float16


def test_module_to_keeps_the_gradient_hooks_of_its_parameters():
    # the swap traded the C++ tensor that holds the hooks: a hook that froze a parameter no longer fired
    model, seen = torch.nn.Linear(3, 2), []
    handle = model.weight.register_hook(lambda g: g * 0)
    model.bias.register_post_accumulate_grad_hook(lambda p: seen.append(p.grad.shape))
    model.to("tpu")
    model(torch.ones(4, 3, device="tpu")).sum().backward()
    assert model.weight.grad.abs().sum().item() == 0 and seen == [torch.Size([2])]
    handle.remove()
    model.weight.grad = None
    model(torch.ones(4, 3, device="tpu")).sum().backward()
    assert model.weight.grad.abs().sum().item() > 0


def test_deepcopy_and_pickle():
    model = tiny_mlp().to("tpu")
    clone = copy.deepcopy(model)
    assert torch.equal(clone[0].weight.cpu(), model[0].weight.cpu())
    t = torch.arange(3.0).to("tpu")
    assert torch.equal(pickle.loads(pickle.dumps(t)).cpu(), torch.arange(3.0))


def test_torch_save_and_load_of_a_tpu_checkpoint(tmp_path):
    model = tiny_mlp().to("tpu")
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 3).to("tpu")).sum().backward()
    opt.step()
    torch.save({"model": model.state_dict(), "opt": opt.state_dict()}, tmp_path / "ckpt.pt")
    ckpt = torch.load(tmp_path / "ckpt.pt")  # weights_only=True, torch's default
    assert all(v.device.type == "tpu" for v in ckpt["model"].values())
    restored = tiny_mlp().to("tpu")
    restored.load_state_dict(ckpt["model"])
    opt2 = torch.optim.AdamW(restored.parameters(), lr=0.1)
    opt2.load_state_dict(ckpt["opt"])
    assert torch.equal(restored[0].weight.cpu(), model[0].weight.cpu())
    on_cpu = torch.load(tmp_path / "ckpt.pt", map_location="cpu")  # e.g. a machine without the device
    assert all(v.device.type == "cpu" for v in on_cpu["model"].values())
    assert torch.equal(on_cpu["model"]["0.weight"], model[0].weight.cpu())


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_an_argument_a_lowering_refuses_names_the_users_line(mode):
    # the row exists but refuses these arguments (a complex LDL factorization): the error names the line that ran
    # the op, as for an op with no row (it said "at unknown location")
    a = torch.eye(3, dtype=torch.complex64).to("tpu")
    with tpu_runtime.set_eager_mode(mode), pytest.raises(
            UnsupportedOpError, match=r"linalg_ldl_factor_ex\.default for target 'tpu' at .*test_device\.py:\d+ in "
                                      r"test_an_argument.*complex LDL"):
        torch.linalg.ldl_factor(a)


def test_unsupported_op_names_the_op_and_fallback_is_reported():
    cpu, coefficients = torch.randn(3, 4), torch.randn(2, 3)
    t = cpu.to("tpu")
    # the error names the user's line (it said "at unknown location")
    with pytest.raises(UnsupportedOpError, match=r"aten\._compute_linear_combination\.default for target 'tpu' at "
                                                 r".*test_device\.py:\d+ in test_unsupported_op.*set_cpu_fallback"):
        torch.ops.aten._compute_linear_combination(t, coefficients.to("tpu"))
    tpu_runtime.set_cpu_fallback(True)
    try:
        out = torch.ops.aten._compute_linear_combination(t, coefficients.to("tpu"))
    finally:
        tpu_runtime.set_cpu_fallback(False)
    want = torch.ops.aten._compute_linear_combination(cpu, coefficients)
    assert out.device.type == "tpu" and torch.equal(out.cpu(), want)
    assert tpu_runtime.fallback_report()["aten._compute_linear_combination.default"] >= 1


@torch.library.custom_op("tpu_export_tests::conj_twice", mutates_args=(), device_types="cpu")
def _conj_twice(x: torch.Tensor) -> torch.Tensor:
    """A CPU-only op whose CPU code makes a lazy conjugate (``x.conj()``) and reads it."""
    return x.conj() * 2


def test_the_cpu_fallback_runs_cpu_code_with_lazy_conjugates_resolved():
    # torch excludes the Conjugate key inside the device's kernels: the CPU op run there read x.conj() as x
    z = torch.tensor([1 + 2j, -3 + 0.5j])
    tpu_runtime.set_cpu_fallback(True)
    try:
        got = _conj_twice(z.to("tpu"))
    finally:
        tpu_runtime.set_cpu_fallback(False)
    assert torch.equal(got.cpu(), torch.tensor([2 - 4j, -6 - 1j]))


def test_sparse_gradients_raise_that_the_device_has_no_sparse_layout():
    emb = torch.nn.Embedding(5, 3, sparse=True).to("tpu")
    loss = emb(torch.tensor([1, 2], device="tpu")).sum()
    with pytest.raises(UnsupportedOpError, match=r"at .*test_device\.py:\d+ .*sparse tensors have no layout on the "
                                                 r"tpu device \(for nn.Embedding and nn.EmbeddingBag, use sparse=False"):
        loss.backward()


def test_mixing_a_cpu_tensor_raises_like_torch():
    with pytest.raises(RuntimeError, match="same device"):
        torch.ones(4, 3).to("tpu") + torch.ones(4, 3)


def test_tensor_constructor_tolist_data_setter_and_indexing():
    t = torch.tensor([[1.0, 2.0, 3.0]] * 4, device="tpu")
    assert t.device.type == "tpu" and t.tolist()[3] == [1.0, 2.0, 3.0]
    p = torch.nn.Parameter(torch.zeros(4, 3).to("tpu"))
    with torch.no_grad():
        p.data = t * 2                               # torch's C++ shallow copy plus our storage
    assert torch.equal(p.cpu(), torch.tensor([[2.0, 4.0, 6.0]] * 4))
    idx = torch.tensor([0, 2])
    assert torch.equal(t[idx].cpu(), t.cpu()[idx])   # CPU index tensors are accepted, as for CUDA
    assert torch.equal(t[t > 1.5].cpu(), t.cpu()[t.cpu() > 1.5])  # data-dependent shape: counted, then run


def test_inplace_view_ops_change_the_tensor_and_keep_aliasing():
    t = torch.arange(6.0).reshape(2, 3).to("tpu")
    t.unsqueeze_(0)
    t.transpose_(1, 2)
    assert t.shape == (1, 3, 2) and t.cpu().tolist() == [[[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]]
    t.squeeze_(0)
    t[0, 1] = 100.0
    assert t.cpu().tolist() == [[0.0, 100.0], [1.0, 4.0], [2.0, 5.0]]


def test_lstm_inference_uses_the_fused_cell_kernel():
    torch.manual_seed(0)
    lstm = torch.nn.LSTM(3, 4, batch_first=True)
    x = torch.randn(2, 5, 3)
    with torch.no_grad():
        want, (h, c) = lstm(x)
        got, (th, tc) = lstm.to("tpu")(x.to("tpu"))
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(tc.cpu(), c, rtol=1e-5, atol=1e-6)


def test_multihead_attention_inference_fast_path():
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    pad = torch.tensor([[False, False, True], [False, False, False]])
    with torch.no_grad():
        want, want_w = mha(x, x, x, key_padding_mask=pad)
        tx = x.to("tpu")
        got, got_w = mha.to("tpu")(tx, tx, tx, key_padding_mask=pad.to("tpu"))
        no_weights = mha(tx, tx, tx, key_padding_mask=pad.to("tpu"), need_weights=False)[1]
    torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(got_w.cpu(), want_w, rtol=1e-5, atol=1e-6)
    assert no_weights is None  # as the CPU's (an empty tensor came back)


@pytest.mark.parametrize("mask_check", [True, False])
def test_transformer_encoder_inference_with_a_padding_mask_gives_the_cpus_packed_result(mask_check):
    # the packed (nested tensor) path's zeros at padded positions: the device answered "not left-aligned" and took
    # the padded path (other values there); with mask_check=False the packing raised "unsupported op
    # aten._nested_tensor_from_mask". A mask that is not left-aligned takes the padded path, as on the CPU.
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    enc = torch.nn.TransformerEncoder(layer, 2, enable_nested_tensor=True, mask_check=mask_check).eval()
    x = torch.randn(3, 5, 8)
    pad = torch.zeros(3, 5, dtype=torch.bool)
    pad[1, 3:], pad[2, 1:] = True, True
    unaligned = torch.tensor([[True, False, False, False, False]] * 3)
    device = copy.deepcopy(enc).to("tpu")
    for mask, packed in [(pad, True), (unaligned, False)] if mask_check else [(pad, True)]:
        with torch.no_grad():
            want = enc(x, src_key_padding_mask=mask)
            got = device(x.to("tpu"), src_key_padding_mask=mask.to("tpu")).cpu()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
        assert bool(want[mask].any()) != packed  # the CPU's path: zeros at padded positions where it packed


def test_pin_memory_and_a_pinning_dataloader_work_with_tpu_as_the_accelerator():
    assert torch.accelerator.current_accelerator().type == "tpu"
    x = torch.randn(3, 2)
    pinned = x.pin_memory()  # would ask a pinned allocator no Python backend can provide
    assert pinned is not x and torch.equal(pinned, x) and not x.is_pinned()
    data = torch.utils.data.TensorDataset(torch.arange(8.0).reshape(4, 2))
    (batch,) = next(iter(torch.utils.data.DataLoader(data, batch_size=2, pin_memory=True)))
    assert torch.equal(batch.to("tpu", non_blocking=True).cpu(), torch.tensor([[0.0, 1.0], [2.0, 3.0]]))


def test_torch_tpu_memory_statistics_and_timing_events():
    import gc

    gc.collect()  # nothing left over from earlier tests is freed while we count
    before = torch.tpu.memory_allocated()
    x = torch.zeros(256, 256).to("tpu")  # 256 KiB of float32
    assert torch.tpu.memory_allocated() - before >= 256 * 256 * 4
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() > 0
    assert "allocated_bytes.all.current" in torch.tpu.memory_stats()
    del x
    torch.tpu.empty_cache()
    assert torch.tpu.memory_allocated() <= before + 1024
    start, end = torch.tpu.Event(enable_timing=True), torch.tpu.Event(enable_timing=True)
    start.record()
    (torch.ones(64, 64).to("tpu") @ torch.ones(64, 64).to("tpu")).sum()
    end.record()
    assert end.query() and start.elapsed_time(end) >= 0.0
    with pytest.raises(RuntimeError, match="enable_timing"):
        torch.tpu.Event().elapsed_time(end)


def test_torch_tpu_streams_order_work_on_the_one_stream():
    s = torch.tpu.Stream()
    with torch.tpu.stream(s):
        y = torch.ones(3).to("tpu") * 2
    torch.tpu.current_stream().wait_stream(s)
    event = s.record_event()
    torch.tpu.default_stream().wait_event(event)
    assert s.query() and event.query()
    s.synchronize()
    assert torch.equal(y.cpu(), torch.full((3,), 2.0))


@pytest.mark.parametrize("make", [
    lambda d: torch.hann_window(8, device=d),
    lambda d: torch.hamming_window(7, periodic=False, device=d),
    lambda d: torch.kaiser_window(6, True, 8.0, device=d, dtype=torch.float64),
    lambda d: torch.tril_indices(3, 4, 1, device=d),
    lambda d: torch.triu_indices(4, 3, -1, device=d),
    lambda d: torch.fft.fftfreq(7, 0.5, device=d),  # (torch's kernel fills slices of an empty tensor: it raised)
    lambda d: torch.fft.rfftfreq(6, device=d, dtype=torch.float64),
], ids=["hann", "hamming", "kaiser", "tril_indices", "triu_indices", "fftfreq", "rfftfreq"])
def test_window_and_index_factories_on_the_device(make):
    got, want = make("tpu"), make("cpu")
    assert got.device.type == "tpu" and got.dtype == want.dtype
    assert torch.equal(got.cpu(), want)


def test_stft_with_a_device_window_matches_cpu():
    x = torch.randn(32, generator=torch.Generator().manual_seed(2))
    got = torch.stft(x.to("tpu"), 8, return_complex=True, window=torch.hann_window(8, device="tpu"))
    want = torch.stft(x, 8, return_complex=True, window=torch.hann_window(8))
    torch.testing.assert_close(got.abs().cpu(), want.abs(), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_view_as_another_dtype_reinterprets_the_bits_as_on_cpu(mode):
    # aten.view.dtype had no lowering (float bit tricks, float8 as bytes)
    x = torch.randn(2, 8, generator=torch.Generator().manual_seed(0))
    cases = [(x, torch.int32), (x, torch.uint8), (x, torch.float16), (x, torch.int64),
             (x.to(torch.float8_e4m3fn), torch.uint8), (torch.arange(8, dtype=torch.uint8).reshape(2, 4), torch.float32),
             (x > 0, torch.uint8), (x.to(torch.complex64), torch.float32)]
    with tpu_runtime.set_eager_mode(mode):
        for src, dtype in cases:
            got, want = src.to("tpu").view(dtype).cpu(), src.view(dtype)
            assert got.dtype == want.dtype and got.shape == want.shape
            assert torch.equal(got.view(torch.uint8), want.view(torch.uint8)), (src.dtype, dtype)
        exponent = (x.to("tpu").view(torch.int32) >> 23) & 0xFF
        assert torch.equal(exponent.cpu(), (x.view(torch.int32) >> 23) & 0xFF)
        # it is a view: writes through it (and through views of it) reach the base, and the base's reach it
        for src, dtype in [(x, torch.int32), (x, torch.uint8), (torch.arange(8, dtype=torch.uint8), torch.int16),
                           (x.to(torch.complex64), torch.float64), (x > 0, torch.uint8)]:
            want, got = src.clone(), src.to("tpu")
            view_want, view_got = want.view(dtype), got.view(dtype)
            if dtype == torch.uint8 and src.dtype == torch.bool:
                view_want[..., ::3], view_got[..., ::3] = 1, 1
            else:  # (+1 on a float's bits: no denormal, which XLA on the CPU flushes to zero)
                view_want[..., ::3] += 1
                view_got[..., ::3] += 1
            want.mul_(2) if not want.dtype == torch.bool else want.logical_not_()
            got.mul_(2) if not got.dtype == torch.bool else got.logical_not_()
            assert torch.equal(got.cpu().view(torch.uint8), want.view(torch.uint8)), (src.dtype, dtype)
            assert torch.equal(view_got.cpu().view(torch.uint8), view_want.view(torch.uint8)), (src.dtype, dtype)


@pytest.mark.parametrize("make", [
    lambda: torch.ones(2, device="tpu:1"),
    lambda: torch.randn(2, device=torch.device("tpu", 2)),
    lambda: torch.ones(2).to("tpu:1"),
    lambda: torch.ones(2).to("tpu").to("tpu:1"),
    lambda: torch.nn.Linear(2, 2).to("tpu:1"),
], ids=["factory", "random factory", "cpu to", "tpu to", "module to"])
def test_a_device_index_other_than_zero_is_refused(make):
    # it was silently mapped to tpu:0 (CUDA refuses an invalid ordinal)
    with pytest.raises(RuntimeError, match=r"tpu device \d does not exist: torch.tpu.device_count\(\) is 1"):
        make()
    assert torch.ones(1, device="tpu:0").device == torch.ones(1).to("tpu").to("tpu:0").device == torch.device("tpu:0")


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_call_torch_refuses_raises_torchs_own_error(mode):
    # it raised the runtime's ShapeInferenceError (not a RuntimeError, hinting at the CPU fallback),
    # so a user's ``except RuntimeError`` / ``except IndexError`` missed it
    x, w = torch.randn(2, 3), torch.randn(4, 4)
    for call, error in ((lambda a, b: a @ b, RuntimeError), (lambda a, b: a.sum(5), IndexError),
                        (lambda a, b: a + b, RuntimeError), (lambda a, b: a.view(5), RuntimeError)):
        with pytest.raises(error) as want:
            call(x, w)
        with tpu_runtime.set_eager_mode(mode), pytest.raises(error) as got:
            call(x.to("tpu"), w.to("tpu"))
        assert str(got.value) == str(want.value)
        assert "test_device.py" in got.value.__notes__[0]


def test_like_and_new_ops_make_their_result_on_the_device_they_name():
    # zeros_like(tpu_tensor, device="cpu") and friends returned tpu tensors
    x = torch.arange(6.0).view(2, 3).to("tpu")
    on_cpu = [torch.zeros_like(x, device="cpu"), torch.ones_like(x, device="cpu"), torch.full_like(x, 2, device="cpu"),
              torch.empty_like(x, device="cpu"), torch.randint_like(x, 5, device="cpu"), x.new_zeros(3, device="cpu"),
              x.new_full((2,), 3.0, device="cpu"), torch.linspace(x[0, 0], x[1, 2], 4, device="cpu")]
    assert all(type(t) is torch.Tensor and t.device.type == "cpu" for t in on_cpu)
    assert on_cpu[2].sum().item() == 12
    torch.testing.assert_close(on_cpu[-1], torch.linspace(0.0, 5.0, 4))
    g = torch.Generator().manual_seed(0)
    drawn = torch.rand_like(x, device="cpu", generator=g)
    assert torch.equal(drawn, torch.rand(2, 3, generator=g.manual_seed(0)))  # the CPU generator, as on the CPU
    assert all(t.device.type == "tpu" for t in (torch.zeros_like(x), torch.rand_like(x), x.new_ones(2),
                                                torch.zeros_like(torch.ones(2), device="tpu")))


def test_torch_tpu_answers_what_libraries_ask_a_device_module():
    # accelerate / transformers call these on torch.<device>: they raised AttributeError
    assert torch.tpu.is_bf16_supported() and torch.tpu.is_built()
    free, total = torch.tpu.mem_get_info()
    assert 0 <= free <= total and torch.tpu.get_device_properties(0).total_memory == total
    x = torch.ones(1024, device="tpu")
    torch.tpu.reset_peak_memory_stats()
    assert torch.tpu.max_memory_allocated() >= torch.tpu.memory_allocated() >= x.numel() * 4
    assert torch.tpu.max_memory_reserved() >= 0 and "allocated_bytes.all.current" in torch.tpu.memory_summary()
    torch.tpu.init()
    torch.tpu.seed_all()
    with pytest.raises(ValueError, match="tpu device 1 does not exist"):
        torch.tpu.get_device_properties(1)
    # torch.autocast("tpu") without a dtype computes in bfloat16, TPU's matmul type
    with torch.autocast("tpu"):
        assert torch.nn.Linear(4, 4).to("tpu")(torch.randn(2, 4, device="tpu")).dtype == torch.bfloat16


def test_torch_tensor_of_tpu_scalars_reads_each_as_on_cuda():
    # torch.tensor reads each element with item() below the Python dispatch key (a PrivateUse1 kernel)
    a = torch.tensor([1.5, 2.5]).to("tpu")
    assert torch.equal(torch.tensor([a[0], a[1]]), torch.tensor([1.5, 2.5]))
    assert torch.equal(torch.as_tensor([a.sum(), a.mean()]), torch.tensor([4.0, 2.0]))
    on_tpu = torch.tensor([a[1]], device="tpu")
    assert on_tpu.device.type == "tpu" and torch.equal(on_tpu.cpu(), torch.tensor([2.5]))


def test_torch_tpu_streams_and_events_are_torch_streams_and_events():
    # torch's stream APIs take them (CUDA code ported as is): ``record_stream`` keeps nothing to do on the one
    # stream, ``torch.accelerator.set_stream`` accepts it; every tpu stream stands for the one stream.
    s = torch.tpu.Stream(priority=-1)
    assert isinstance(s, torch.Stream) and isinstance(torch.tpu.Event(), torch.Event)
    assert s.priority == -1 and s.device == torch.device("tpu", 0) and s == torch.tpu.current_stream()
    x = torch.ones(3).to("tpu") + 1
    x.record_stream(s)
    torch.accelerator.set_stream(s)
    assert torch.equal(x.cpu(), torch.full((3,), 2.0))
    with pytest.raises(ValueError, match="does not exist"):
        torch.tpu.Stream(device="tpu:1")
