"""``torch.compile(model, backend="tpu")`` on tpu-resident models and inputs, against CPU."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import tpu_runtime
from tests.runtime.conftest import batch, compiled_vs_cpu, tiny_mlp, train_steps
from tpu_runtime import dynamo_backend, values


class _BreakMLP(torch.nn.Module):
    """3 → 4 → 2 with a graph break between the layers (dynamo compiles two graphs)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.a, self.b = torch.nn.Linear(3, 4), torch.nn.Linear(4, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.a(x))
        torch._dynamo.graph_break()
        return self.b(h * 2)


def _no_host_round_trip(monkeypatch) -> None:
    """Make every host transfer of the compiled path and of tpu tensors raise."""
    def refuse(*_a, **_k):
        raise AssertionError("host round trip")

    for name in ("to_jax", "to_torch", "host_array"):
        monkeypatch.setattr(dynamo_backend, name, refuse)
    monkeypatch.setattr(values, "array_to_torch", refuse)


def test_compile_tpu_mlp_inference_and_training_match_cpu(monkeypatch):
    torch._dynamo.reset()
    model = tiny_mlp()
    ref = copy.deepcopy(model)
    x, y = batch()
    model.to("tpu")
    compiled = torch.compile(model, backend="tpu")
    xt, yt = x.to("tpu"), y.to("tpu")
    with torch.no_grad():
        out = compiled(xt)
    assert isinstance(out, tpu_runtime.TpuTensor)
    torch.testing.assert_close(out.cpu(), ref(x), rtol=1e-5, atol=1e-6)

    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1, momentum=0.9)
    got = train_steps(compiled, opt, xt, yt, 2)
    want = train_steps(ref, ref_opt, x, y, 2)
    for p in model.parameters():
        assert isinstance(p, tpu_runtime.TpuTensor) and isinstance(p.grad, tpu_runtime.TpuTensor)
    # warmed up: one more step compiles nothing and never leaves the device
    with monkeypatch.context() as m, tpu_runtime.cache_only():
        _no_host_round_trip(m)
        loss = F.mse_loss(compiled(xt), yt)
        opt.zero_grad()
        loss.backward()
        opt.step()
    got.append(loss.item())
    want += train_steps(ref, ref_opt, x, y, 1)
    assert got == pytest.approx(want, rel=1e-5)
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_compile_tpu_graph_break_gradients_match_cpu():
    model = _BreakMLP()
    ref, got, want = compiled_vs_cpu(model, torch.optim.AdamW, 0.05, *batch(), 2)
    assert got == pytest.approx(want, rel=1e-5)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 2
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad.cpu(), q.grad, rtol=1e-5, atol=1e-6)


def test_compile_tpu_cpu_tensors_dropout_follows_torch_manual_seed():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 64), torch.nn.Dropout(0.5), torch.nn.Linear(64, 4)).train()
    compiled = torch.compile(model, backend="tpu")
    x = torch.randn(16, 8)

    def draw(seed):
        torch.manual_seed(seed)
        return compiled(x)

    a, b, c = draw(1), draw(1), draw(2)
    assert a.device.type == "cpu"
    torch.testing.assert_close(a, b)   # the device generator, seeded by torch.manual_seed
    assert not torch.equal(a, c)
    model.eval()
    torch.testing.assert_close(torch.compile(model, backend="tpu")(x), model(x), rtol=1e-5, atol=1e-6)


def test_compile_tpu_seeding_and_rng_state_inside_the_compiled_function_run_eagerly():
    # torch.manual_seed / fork_rng inside a compiled function reach torch.tpu's RNG functions:
    # dynamo calls them (a graph break) instead of tracing them (tracing set_rng_state failed)
    x = torch.ones(8, 8).to("tpu")

    @torch.compile(backend="tpu")
    def seeded(x):
        torch.manual_seed(3)
        return torch.nn.functional.dropout(x, 0.5)

    @torch.compile(backend="tpu")
    def forked(x):
        with torch.random.fork_rng(device_type="tpu"):
            torch.manual_seed(5)
            return torch.rand_like(x)

    a, b = seeded(x).cpu(), seeded(x).cpu()
    assert torch.equal(a, b) and set(a.unique().tolist()) <= {0.0, 2.0}
    state = torch.tpu.get_rng_state()
    c, d = forked(x).cpu(), forked(x).cpu()
    assert torch.equal(c, d) and ((c >= 0) & (c < 1)).all()
    assert torch.equal(torch.tpu.get_rng_state(), state)  # fork_rng restored the generator


def test_compile_tpu_eval_batch_norm_returns_the_saved_statistics_the_device_meta_expects():
    # torch's meta for a non-CPU device gives eval-mode native_batch_norm (C,) saved statistics
    # (the running mean and invstd, as CUDA), where CPU gives empty ones; the row follows the graph
    x, rm, rv = torch.randn(3, 2, 4), torch.randn(2), torch.rand(2) + 0.5
    f = torch.compile(lambda x, rm, rv: torch.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5),
                      backend="tpu")
    y, mean, invstd = (t.cpu() for t in f(x.to("tpu"), rm.to("tpu"), rv.to("tpu")))
    torch.testing.assert_close(y, torch.native_batch_norm(x, None, None, rm, rv, False, 0.1, 1e-5)[0])
    torch.testing.assert_close(mean, rm)
    torch.testing.assert_close(invstd, torch.rsqrt(rv + 1e-5))


def test_compile_tpu_inference_fast_paths_of_attention_and_encoder_layers():
    # eval + no_grad modules take torch's fused fast paths (_native_multi_head_attention,
    # _transformer_encoder_layer_fwd): the compiled graph decomposes them as eager tpu does
    torch._dynamo.reset()  # no code cache left by other tests' compiled modules
    torch.manual_seed(0)
    mha = torch.nn.MultiheadAttention(8, 2, batch_first=True).eval()
    layer = torch.nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True).eval()
    x = torch.randn(2, 3, 8)
    pad = torch.tensor([[False, False, True], [False, False, False]])
    with torch.no_grad():
        want_attn, want_weights = mha(x, x, x, key_padding_mask=pad)
        want_layer = layer(x)
        tx, tpad = x.to("tpu"), pad.to("tpu")
        got_attn, got_weights = torch.compile(mha.to("tpu"), backend="tpu")(tx, tx, tx, key_padding_mask=tpad)
        torch._dynamo.reset()
        got_layer = torch.compile(layer.to("tpu"), backend="tpu")(tx)
    for got, want in ((got_attn, want_attn), (got_weights, want_weights), (got_layer, want_layer)):
        torch.testing.assert_close(got.cpu(), want, rtol=1e-5, atol=1e-5)


def test_compile_large_cpu_outputs_are_handed_over_and_never_alias_inputs(monkeypatch):
    # an output of 1 MiB or more becomes the torch tensor without a copy (DLPack); each stays a
    # tensor of its own, apart from the inputs and the other outputs
    from tpu_runtime import dynamo_backend

    handed, real = [], dynamo_backend._handoff
    monkeypatch.setattr(dynamo_backend, "_handoff", lambda *a: handed.append(real(*a)) or handed[-1])
    torch._dynamo.reset()
    x = torch.randn(512, 1024)  # 2 MiB
    fn = torch.compile(lambda a: (a * 2, a.clone(), a + 1, a.sum()), backend="tpu")
    doubled, cloned, plus, total = fn(x)
    assert [h is not None for h in handed[-1]] == [True, True, True, False]
    torch.testing.assert_close(doubled, x * 2)
    assert cloned.data_ptr() != x.data_ptr() and torch.equal(cloned, x)
    doubled.add_(1)
    cloned.zero_()
    assert torch.equal(plus, x + 1) and torch.equal(doubled, x * 2 + 1) and cloned.abs().sum() == 0


def test_compile_tpu_optimizer_step_matches_cpu():
    # dynamo rewrites AdamW's addcmul_/addcdiv_(value=) into inductor's prims.fma: decomposed here
    torch._dynamo.reset()
    model, x, _ = tiny_mlp(), *batch()
    ref = copy.deepcopy(model)
    model.to("tpu")
    opt, ref_opt = torch.optim.AdamW(model.parameters(), lr=0.05), torch.optim.AdamW(ref.parameters(), lr=0.05)
    model(x.to("tpu")).square().sum().backward()
    torch.compile(opt.step, backend="tpu")()
    ref(x).square().sum().backward()
    ref_opt.step()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.detach().cpu(), q.detach(), rtol=1e-5, atol=1e-6)


def test_compile_tpu_moves_a_constant_made_inside_to_the_device():
    # torch.tensor(3).to("tpu") inside the function: the fake mode folds it into a constant
    torch._dynamo.reset()
    x = torch.randn(2, 4)
    fn = torch.compile(lambda t: t * torch.tensor(3).to(t.device) + torch.arange(4, device=t.device), backend="tpu")
    torch.testing.assert_close(fn(x.to("tpu")).cpu(), x * 3 + torch.arange(4))


def _cache_like(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    # what HF's DynamicCache does inside the forward: torch.tensor(data, device=...) then cat onto it
    keys = torch.tensor([], device=x.device)
    keys = torch.cat([keys, (x @ w).flatten()])
    return (keys * torch.tensor([1.0, -2.0, 0.5], device=x.device).repeat(2)).sum()


def test_compile_tpu_takes_torch_tensor_made_on_the_device_inside():
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(2, 4), torch.randn(4, 3, requires_grad=True)
    wt = w.detach().to("tpu").requires_grad_()
    out = torch.compile(_cache_like, backend="tpu")(x.to("tpu"), wt)
    out.backward()
    ref = _cache_like(x, w)
    ref.backward()
    torch.testing.assert_close(out.cpu(), ref.detach(), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), w.grad, rtol=1e-5, atol=1e-5)
    assert torch.tensor([1, 2], device="tpu").cpu().tolist() == [1, 2]  # outside a trace: unchanged


def test_compile_tpu_trains_hf_t5_and_matches_cpu():
    # T5's decoder builds its cache with torch.tensor([], device=...) inside the forward
    transformers = pytest.importorskip("transformers")
    torch._dynamo.reset()
    torch.manual_seed(0)
    cfg = transformers.T5Config(vocab_size=64, d_model=16, d_kv=4, d_ff=32, num_layers=1, num_heads=4,
                                dropout_rate=0.0, decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(cfg)
    ids, labels = torch.randint(0, 64, (2, 6)), torch.randint(0, 64, (2, 4))
    ref = model(input_ids=ids, labels=labels).loss
    ref.backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    ref = ref.detach()  # its autograd graph held the CPU parameters, which model.to swaps
    model.to("tpu")
    out = torch.compile(model, backend="tpu")(input_ids=ids.to("tpu"), labels=labels.to("tpu"))
    out.loss.backward()
    torch.testing.assert_close(out.loss.detach().cpu(), ref, rtol=1e-5, atol=1e-6)
    assert len(grads) > 10
    for n, p in model.named_parameters():
        if n in grads:
            torch.testing.assert_close(p.grad.cpu(), grads[n], rtol=1e-4, atol=1e-5, msg=n)


def test_compile_tpu_output_view_takes_a_dense_gradient_from_eager():
    # the compiled graph returns a transposed view; its gradient comes from eager code (dense): the
    # traced backward expected the view's strides (wav2vec2's CTC head does this)
    torch._dynamo.reset()
    torch.manual_seed(0)
    x, w = torch.randn(3, 4, 5), torch.randn(4, 3, 5)
    xt = x.to("tpu").requires_grad_()
    fn = lambda t: t.softmax(-1).transpose(0, 1)  # noqa: E731
    (torch.compile(fn, backend="tpu")(xt) * w.to("tpu")).sum().backward()
    xc = x.clone().requires_grad_()
    (fn(xc) * w).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-5, atol=1e-6)


def test_compile_tpu_checkpointed_dropout_recomputes_the_same_mask():
    # AOTAutograd saves the generator state of a checkpointed region (run_and_save_rng_state) and
    # replays it where backward recomputes the region (run_with_rng_state): the gradient uses the
    # mask the output shows; each call draws a new mask; torch.manual_seed reproduces them
    from torch.utils.checkpoint import checkpoint

    torch._dynamo.reset()

    def region(t):
        return F.dropout(torch.sin(t) * 2, 0.5, training=True) * 3

    fn = torch.compile(lambda t: checkpoint(region, t, use_reentrant=False), backend="tpu")
    x = (torch.rand(64, generator=torch.Generator().manual_seed(0)) + 0.5)
    xt = x.to("tpu").requires_grad_()
    masks = []
    for seed in (7, 8, 7):
        torch.manual_seed(seed)
        y = fn(xt)
        y.sum().backward()
        mask = (y.detach().cpu() != 0).float()
        torch.testing.assert_close(xt.grad.cpu(), mask * torch.cos(x) * 12, rtol=1e-5, atol=1e-5)
        xt.grad = None
        masks.append(mask)
    assert 0 < masks[0].mean() < 1 and not torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])


def test_compile_tpu_linalg_runs_torchs_error_checks():
    # torch.linalg's graphs carry with_effects(_linalg_check_errors): the info is checked after the run
    # and raises torch's own LinAlgError; values and gradients as on CPU
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(0)
    x, b = torch.randn(3, 4, 4, generator=g) + 4 * torch.eye(4), torch.randn(3, 4, 2, generator=g)

    def fn(t):
        return torch.linalg.solve(t, b.to(t.device)) + torch.linalg.inv(t).sum(-1, keepdim=True)

    xt, xc = x.to("tpu").requires_grad_(), x.clone().requires_grad_()
    compiled = torch.compile(fn, backend="tpu")
    got, want = compiled(xt), fn(xc)
    torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=1e-5, atol=1e-5)
    got.pow(2).sum().backward()
    want.pow(2).sum().backward()
    torch.testing.assert_close(xt.grad.cpu(), xc.grad, rtol=1e-4, atol=1e-5)
    with pytest.raises(torch.linalg.LinAlgError, match="singular"):
        compiled(torch.zeros(3, 4, 4).to("tpu"))


def test_tangent_coercion_keeps_the_value_and_reports_the_traced_layout():
    # AOTAutograd coerces each gradient to what the traced graph had: a tpu tensor with the traced
    # strides (the same value: no copy), or the payload where the graph had a plain tensor
    from tpu_runtime.compile_tensors import TpuPayload

    g = torch.arange(6.0).reshape(2, 3).to("tpu")
    as_view = g.__coerce_same_metadata_as_tangent__((1, 2), type(g))
    assert type(as_view) is type(g) and as_view._payload_stride == (1, 2)
    assert as_view._payload.stride() == (1, 2)
    torch.testing.assert_close(as_view.cpu(), g.cpu())
    as_plain = g.__coerce_same_metadata_as_tangent__(None, torch.Tensor)
    assert type(as_plain) is TpuPayload and as_plain.tensor is g
    assert as_plain.__coerce_same_metadata_as_tangent__(None, torch.Tensor) is as_plain


def test_compile_tpu_hf_model_over_new_lengths_has_no_graph_break_in_the_runtime():
    # dynamo's hook is on while AOTAutograd's runtime reads a tpu parameter's payload and while C++
    # asks the device guard its type: it must not try to compile those runtime frames
    transformers = pytest.importorskip("transformers")
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(vocab_size=32, n_embd=16, n_layer=1, n_head=2, n_positions=32)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    fn = torch.compile(copy.deepcopy(model).to("tpu"), backend="tpu")
    for n in (4, 6, 8):
        ids = torch.randint(0, 32, (2, n))
        with torch.no_grad():
            torch.testing.assert_close(fn(ids.to("tpu")).logits.cpu(), model(ids).logits, rtol=1e-4, atol=1e-5)
    assert not counters["graph_break"], [k.splitlines()[0] for k in counters["graph_break"]]


def test_compiled_grouped_mm_trains_in_float32():
    # torch's meta kernel for _grouped_mm takes only bfloat16 (CUDA's rule): transformers routes tpu MoE layers
    # through F.grouped_mm in every dtype, and tracing them in float32 failed before the backend ran
    torch._dynamo.reset()
    g = torch.Generator().manual_seed(4)
    x, w = torch.randn(6, 8, generator=g), torch.randn(2, 8, 16, generator=g)
    offs = torch.tensor([2, 6], dtype=torch.int32)
    xr, wr = x.clone().requires_grad_(), w.clone().requires_grad_()
    F.grouped_mm(xr, wr, offs=offs).tanh().sum().backward()
    fn = torch.compile(lambda a, b, o: F.grouped_mm(a, b, offs=o).tanh().sum(), backend="tpu", fullgraph=True)
    xt, wt = x.to("tpu").requires_grad_(), w.to("tpu").requires_grad_()
    fn(xt, wt, offs.to("tpu")).backward()
    torch.testing.assert_close(xt.grad.cpu(), xr.grad, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(wt.grad.cpu(), wr.grad, rtol=1e-5, atol=1e-5)


def test_async_asserts_raise_as_on_cpu():
    # torch._assert_async (F.one_hot's range check under torch.compile) had no lowering: eager reads the
    # condition back, a compiled graph returns it and the backend runs torch's check after the run
    x = torch.arange(3.0).to("tpu")
    for mode in ("strict", "fused"):
        with tpu_runtime.set_eager_mode(mode):
            torch._assert_async((x >= 0).all(), "negative")
            with pytest.raises(RuntimeError, match="all negative"):
                torch._assert_async((x < 0).all(), "all negative")
    torch._dynamo.reset()
    fn = torch.compile(lambda i: F.one_hot(i, num_classes=3), backend="tpu")
    good, bad = torch.tensor([[0, 1], [2, 1]]), torch.tensor([[0, 3]])
    assert torch.equal(fn(good.to("tpu")).cpu(), F.one_hot(good, num_classes=3))
    with pytest.raises(RuntimeError, match="Class values must be smaller than num_classes"):
        fn(bad.to("tpu"))


def test_compiled_mask_write_of_several_values_matches_cpu():
    # x[mask] = values raised 'needs a single value' under compile; a count mismatch raises torch's error after the run
    torch._dynamo.reset()

    def put(x, m, v):
        y = x.clone()
        y[m] = v
        return y * 2

    fn = torch.compile(put, backend="tpu")
    x = torch.arange(8.0)
    for mask, values in ((x > 4, torch.tensor([10.0, 11.0, 12.0])), (x < 3, torch.tensor([-1.0, -2.0, -3.0]))):
        torch.testing.assert_close(fn(x.to("tpu"), mask.to("tpu"), values.to("tpu")).cpu(), put(x, mask, values))
    with pytest.raises(RuntimeError, match="shape mismatch"):
        fn(x.to("tpu"), (x > 5).to("tpu"), torch.tensor([1.0, 2.0, 3.0]).to("tpu"))


def test_compiled_chunks_and_shared_outputs_match_cpu():
    # Longformer: as_strided chunks of a transposed view (arguments from the tpu tensor's dense strides) raised
    # 'non-contiguous view'; ELECTRA: two outputs viewing one intermediate failed in AOTAutograd for subclass inputs
    torch._dynamo.reset()

    def chunks(x):
        q = (x * 2).transpose(0, 1).reshape(x.shape[1], x.shape[0] // 4, 4)
        return q.as_strided((q.shape[0], q.shape[1] * 2 - 1, 4), (q.stride(0), q.stride(1) // 2, q.stride(2)))

    x = torch.randn(8, 3, generator=torch.Generator().manual_seed(9))
    torch.testing.assert_close(torch.compile(chunks, backend="tpu")(x.to("tpu")).cpu(), chunks(x))

    def heads(t):
        y = t * 2
        return y[0], y[1]

    ref = x.clone().requires_grad_()
    a, b = heads(ref)
    (a.sum() + 3 * b.sum()).backward()
    xt = x.to("tpu").requires_grad_()
    a, b = torch.compile(heads, backend="tpu")(xt)
    (a.sum() + 3 * b.sum()).backward()
    torch.testing.assert_close(xt.grad.cpu(), ref.grad)


def test_compiled_graph_without_tpu_inputs_returns_tpu_tensors_it_makes():
    # the output device came from the inputs only: torch.ones(3, device="tpu") in a compiled function came back on
    # the CPU (DETR's loss moves its criterion .to(device) inside the compiled code)
    torch._dynamo.reset()
    out = torch.compile(lambda x: (torch.ones(3).to("tpu") * 2, x + 1), backend="tpu")(torch.zeros(2))
    assert out[0].device.type == "tpu" and out[1].device.type == "cpu"
    torch.testing.assert_close(out[0].cpu(), torch.full((3,), 2.0))


def test_compiled_empty_tpu_inputs_match_cpu():
    # dynamo's fake of a tensor whose storage has no bytes resized the fake's storage to zero, which raised
    # NotImplementedError (resizePrivateUse1Bytes, a C++-only hook); an empty batch also trains
    torch._dynamo.reset()
    fn = lambda x: (x.sum(0) + 1, torch.cat([x, x * 2]), x.mean())  # noqa: E731
    x = torch.zeros(0, 3)
    for w, g in zip(fn(x), torch.compile(fn, backend="tpu")(x.to("tpu"))):
        assert g.device.type == "tpu" and g.shape == w.shape
        torch.testing.assert_close(g.cpu(), w, equal_nan=True)
    model = torch.nn.Linear(3, 2).to("tpu")
    torch.compile(model, backend="tpu")(x.to("tpu")).sum().backward()
    assert model.weight.grad.cpu().eq(0).all()


def test_a_backward_with_a_data_dependent_shape_falls_back_as_on_cpu():
    # index_put with a boolean mask (wav2vec2's time masking in training) has a backward that reads grad[mask]: a
    # data-dependent shape AOTAutograd cannot trace, so dynamo runs the frame eagerly, as it does for CPU tensors.
    # Traced on the tpu device's backward thread, the exception had ended the engine as a bare SystemError
    torch._dynamo.reset()

    def masked(h, emb, m):
        h = h * 2
        h[m] = emb
        return h

    g = torch.Generator().manual_seed(3)
    h, emb = torch.randn(1, 4, 3, generator=g), torch.randn(3, generator=g)
    m = torch.tensor([[True, False, True, False]])
    hr, er = h.clone().requires_grad_(), emb.clone().requires_grad_()
    masked(hr, er, m).pow(2).sum().backward()
    ht, et = h.to("tpu").requires_grad_(), emb.to("tpu").requires_grad_()
    torch.compile(masked, backend="tpu")(ht, et, m.to("tpu")).pow(2).sum().backward()
    torch.testing.assert_close(ht.grad.cpu(), hr.grad)
    torch.testing.assert_close(et.grad.cpu(), er.grad)
    torch._dynamo.reset()
