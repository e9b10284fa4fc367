"""``torch.save`` / ``torch.load`` with tpu tensors and ``map_location="tpu"``."""

from __future__ import annotations

import copy
import io

import pytest
import torch

import tpu_runtime


def _roundtrip(obj, **load_kwargs):
    buf = io.BytesIO()
    torch.save(obj, buf)
    buf.seek(0)
    return torch.load(buf, **load_kwargs)


def _cpu_checkpoint() -> dict:
    g = torch.Generator().manual_seed(0)
    base = torch.randn(4, 6, generator=g)
    return {
        "weight": torch.nn.Parameter(base.clone()),
        "view": base[1:3, 2:],             # shares ``base``'s storage, offset and strided
        "base": base,
        "transposed": base.t(),
        "bf16": torch.randn(3, generator=g).to(torch.bfloat16),
        "ids": torch.arange(5),
        "scalar": torch.tensor(2.5),
        "empty": torch.zeros(0, 3),
        "nested": [torch.ones(2), {"x": torch.full((1,), 7.0)}],
    }


def _assert_on_tpu_and_equal(got, want) -> None:
    if isinstance(want, torch.Tensor):
        assert got.device.type == "tpu" and got.shape == want.shape and got.dtype == want.dtype
        torch.testing.assert_close(got.detach().cpu(), want.detach(), rtol=0, atol=0)
    elif isinstance(want, dict):
        assert got.keys() == want.keys()
        for k in want:
            _assert_on_tpu_and_equal(got[k], want[k])
    else:
        for a, b in zip(got, want, strict=True):
            _assert_on_tpu_and_equal(a, b)


@pytest.mark.parametrize("where", ["tpu", "tpu:0", "device", "dict"])
def test_a_cpu_checkpoint_loads_onto_the_tpu_device(where):
    # the built-in PrivateUse1 deserializer allocated a device storage in C++: a segfault
    ckpt = _cpu_checkpoint()
    location = {"device": torch.device("tpu"), "dict": {"cpu": "tpu"}}.get(where, where)
    got = _roundtrip(ckpt, map_location=location)
    _assert_on_tpu_and_equal(got, ckpt)
    assert isinstance(got["weight"], torch.nn.Parameter) and got["weight"].requires_grad
    got["view"].add_(1.0)  # a loaded tensor is a tensor of its own, usable in place
    torch.testing.assert_close(got["view"].cpu(), ckpt["view"] + 1.0)


@pytest.mark.parametrize("first", ["base", "view"])
def test_tensors_sharing_a_storage_in_a_checkpoint_share_one_on_the_device(first):
    # they loaded as separate tensors: a write through one was not seen through the others as on the CPU
    g = torch.Generator().manual_seed(1)
    base = torch.randn(4, 6, generator=g)
    ckpt = {"view": base[1:3, 2:], "base": base, "transposed": base.t(), "row": base[3]}
    if first == "base":
        ckpt = {"base": ckpt.pop("base"), **ckpt}
    cpu, dev = _roundtrip(ckpt), _roundtrip(ckpt, map_location="tpu")
    for got in (cpu, dev):
        got["view"].mul_(-2.0)
        got["row"].add_(10.0)
    for k in ckpt:
        assert dev[k].stride() == cpu[k].stride() and dev[k].storage_offset() == cpu[k].storage_offset()
        torch.testing.assert_close(dev[k].cpu(), cpu[k], rtol=0, atol=0)
    pointers = {dev[k].untyped_storage().data_ptr() for k in ckpt}
    assert len(pointers) == 1


def test_a_tpu_checkpoint_loads_on_the_tpu_device_and_on_the_cpu():
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.LayerNorm(4)).to("tpu")
    state = model.state_dict()
    for location in (None, "tpu", "cpu"):
        got = _roundtrip(state, map_location=location)
        for k, v in state.items():
            assert got[k].device.type == ("cpu" if location == "cpu" else "tpu")
            torch.testing.assert_close(got[k].cpu(), v.cpu())


def test_load_state_dict_from_a_checkpoint_mapped_to_tpu_trains():
    torch.manual_seed(0)
    ref = torch.nn.Linear(3, 2)
    model = torch.nn.Linear(3, 2).to("tpu")
    model.load_state_dict(_roundtrip(ref.state_dict(), map_location="tpu"))
    x = torch.randn(4, 3)
    torch.testing.assert_close(model(x.to("tpu")).detach().cpu(), ref(x).detach())
    model(x.to("tpu")).sum().backward()
    assert model.weight.grad.device.type == "tpu"


def test_a_missing_tpu_index_and_a_foreign_storage_are_clear_errors():
    with pytest.raises(RuntimeError, match=r"tpu device 1 but torch.tpu.device_count\(\) is 1"):
        _roundtrip({"w": torch.ones(2)}, map_location="tpu:1")
    # torch.load leaves its map_location set after a load that raised (torch.serialization's thread-local
    # state); later unpickling of tpu tensors (pickle.loads, deepcopy of a module by pickling) would still
    # map to tpu:1 until the next torch.load, which this one is
    _roundtrip({"w": torch.ones(2)})
    t = torch.zeros(2, device="tpu")
    with pytest.raises(RuntimeError, match="set_ of a tpu tensor from a storage on cpu"):
        t.set_(torch.ones(2).untyped_storage(), 0, (2,), (1,))


def test_a_saved_tpu_parameter_and_model_load_as_parameters():
    # as on the CPU: torch.save(model) / pickle keep parameters Parameters (an optimizer built on the
    # loaded model finds them) and the attributes set on them; map_location="cpu" gives CPU Parameters
    model = torch.nn.Linear(3, 2).to("tpu")
    model.weight.no_decay = True
    loaded = _roundtrip(model, weights_only=False)
    assert [n for n, _ in loaded.named_parameters()] == ["weight", "bias"]
    assert loaded.weight.device.type == "tpu" and loaded.weight.no_decay is True
    torch.testing.assert_close(loaded.weight.detach().cpu(), model.weight.detach().cpu())
    on_cpu = _roundtrip(model.weight, weights_only=True, map_location="cpu")
    assert type(on_cpu) is torch.nn.Parameter and on_cpu.device.type == "cpu" and on_cpu.no_decay is True


def test_deepcopy_of_tpu_tensors_copies_what_torch_copies():
    # a tensor's deepcopy keeps its .grad and attributes; a parameter's is a new parameter of the values
    t = torch.ones(2).to("tpu").requires_grad_()
    t.grad, t.tag = torch.full((2,), 3.0).to("tpu"), ["x"]
    c = copy.deepcopy(t)
    assert c.requires_grad and c.tag == ["x"] and c.tag is not t.tag
    torch.testing.assert_close(c.grad.cpu(), torch.full((2,), 3.0))
    p = torch.nn.Parameter(torch.ones(2).to("tpu"))
    p.grad = torch.ones(2).to("tpu")
    q = copy.deepcopy(p)
    assert isinstance(q, torch.nn.Parameter) and q.grad is None and q.device.type == "tpu"


def test_storage_pointers_tell_tensors_apart_and_views_share_their_base_s():
    # a tensor subclass's own storage has no data pointer (reading it raised) and every tensor's data_ptr() was 0
    a, b = torch.zeros(4, 3, device="tpu"), torch.zeros(4, 3, device="tpu")
    assert a.untyped_storage().data_ptr() != b.untyped_storage().data_ptr() and a.data_ptr() != b.data_ptr()
    view = a[1:]
    assert view.untyped_storage().data_ptr() == a.untyped_storage().data_ptr()
    assert view.data_ptr() == a.data_ptr() + 3 * a.element_size()
    assert a.untyped_storage().nbytes() == 48


def test_safetensors_and_hugging_face_save_pretrained_of_tpu_models(tmp_path):
    # safetensors (save_pretrained's format) finds tied weights by storage pointer: it raised on tpu tensors
    from safetensors.torch import load_file, save_file
    from transformers import GPT2Config, GPT2LMHeadModel

    linear = torch.nn.Linear(3, 4).to("tpu")
    save_file(linear.state_dict(), str(tmp_path / "linear.safetensors"))
    loaded = load_file(str(tmp_path / "linear.safetensors"))
    assert all(torch.equal(loaded[k], v.cpu()) for k, v in linear.state_dict().items())
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=50, n_positions=16)).to("tpu")
    model.save_pretrained(tmp_path / "gpt2")  # lm_head.weight is tied to wte.weight
    again = GPT2LMHeadModel.from_pretrained(tmp_path / "gpt2")
    for (name, want), got in zip(model.state_dict().items(), again.state_dict().values()):
        assert torch.equal(got, want.cpu()), name
    assert again.lm_head.weight.data_ptr() == again.transformer.wte.weight.data_ptr()


@pytest.mark.parametrize("weights_only", [False, True])
@pytest.mark.parametrize("map_location", [None, "cpu"])
def test_a_saved_tpu_tensor_keeps_the_attributes_its_user_set(weights_only, map_location):
    # as torch saves a plain tensor with attributes (_rebuild_from_type_v2); they were dropped
    t = torch.arange(4.0).to("tpu")
    t.note = "kept"
    buf = io.BytesIO()
    torch.save({"t": t}, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=weights_only, map_location=map_location)["t"]
    assert back.note == "kept" and back.device.type == (map_location or "tpu")
    torch.testing.assert_close(back.cpu(), torch.arange(4.0))


@pytest.mark.parametrize("channels_last", [False, True])
def test_deepcopy_keeps_a_view_sharing_its_base_storage(channels_last):
    # as torch's deepcopy of CPU tensors (one copy per storage): a write through the copied view reaches the
    # copied base (they were two separate copies)
    x = torch.zeros(2, 3, 2, 2)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    results = []
    for t in (x.clone(), x.to("tpu")):
        copied = copy.deepcopy({"x": t, "v": t[:, 1:]})
        copied["v"].fill_(3.0)
        assert (copied["v"].stride(), copied["v"].storage_offset()) == (t[:, 1:].stride(), t[:, 1:].storage_offset())
        results.append((copied["x"].sum().item(), t.sum().item()))
    assert results[1] == results[0] == (48.0, 0.0)


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_saved_storage_is_written_once_and_its_tensors_share_it_when_loaded(mode):
    # as torch saves CPU and CUDA tensors: a tied weight's two state-dict entries were two copies in the file,
    # and a view saved beside its base loaded as a tensor of its own
    import zipfile

    model = torch.nn.Sequential(torch.nn.Embedding(6, 4), torch.nn.Linear(4, 6, bias=False)).to("tpu")
    model[1].weight = model[0].weight
    with tpu_runtime.set_eager_mode(mode):
        model[0].weight.data.mul_(2.0)  # (pending in fused eager)
        state = {**model.state_dict(), "row": model[0].weight[2].detach()}
        buf = io.BytesIO()
        torch.save(state, buf)
        records = [n for n in zipfile.ZipFile(buf).namelist() if "/data/" in n]
        assert len(records) == 1
        for location in (None, "cpu"):
            buf.seek(0)
            got = torch.load(buf, map_location=location)
            assert got["0.weight"].device.type == (location or "tpu")
            got["row"].add_(100.0)  # seen through both entries, as on the CPU
            for k in ("0.weight", "1.weight"):
                assert got[k].untyped_storage().data_ptr() == got["row"].untyped_storage().data_ptr()
                want = model[0].weight.detach().cpu().clone()
                want[2] += 100.0
                torch.testing.assert_close(got[k].cpu(), want, rtol=0, atol=0)
        model[0].weight.data.add_(1.0)  # a later save writes the new values
        assert torch.equal(_roundtrip(model.state_dict())["1.weight"].cpu(), model[1].weight.detach().cpu())


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_legacy_format_and_pickle_keep_the_values(dtype):
    # the legacy writer reads storages after the tensors are rebuilt: tpu tensors loaded uninitialized memory
    import pickle

    t = torch.arange(6.0).to(dtype).to("tpu")
    saved = {"t": t, "view": t[2:], "transposed": t.view(2, 3).t()}
    buf = io.BytesIO()
    torch.save(saved, buf, _use_new_zipfile_serialization=False)
    buf.seek(0)
    for got in (torch.load(buf, weights_only=False), pickle.loads(pickle.dumps(saved))):
        for k, want in saved.items():
            assert got[k].device.type == "tpu" and got[k].dtype == dtype
            assert torch.equal(got[k].cpu(), want.cpu()), k
