"""NN lowerings through real modules and dynamic shapes: what an OpInfo cannot show.

* BatchNorm in train mode: torch.export turns the running-stat updates into
  BUFFER_MUTATION outputs; the lowered program must return them as ``mutations``
  equal to what one eager training step leaves in the module's buffers.
* transformers' Llama SDPA path (GQA via repeat_kv) with left padding, whose
  fully masked query rows torch's CPU kernel answers with zeros, not NaN (the
  unpadded Llama/Bert/LSTM/GRU/DLRM families run in tests/models).
* Dynamic spatial sizes: nearest upsampling by an integer factor follows them,
  lowerings that need static sizes raise UnsupportedOpError naming the op.
"""

from __future__ import annotations

import copy

import jax
import numpy as np
import pytest
import torch
import torch.nn.functional as F
from jax import export as jax_export
from torch.export import Dim

from converter.capture import capture
from converter.errors import UnsupportedOpError
from converter.lowering import lower
from tests.ops.harness import to_jax, to_torch

aten = torch.ops.aten


def _run(module: torch.nn.Module, args: tuple, kwargs: dict | None = None):
    ep = capture(module, args, kwargs)
    prog = lower(ep)
    flat = [t for t in torch.utils._pytree.tree_leaves((args, kwargs or {})) if isinstance(t, torch.Tensor)]
    with jax.enable_x64(True):
        state = {k: jax.numpy.asarray(v) for k, v in prog.state.items()}
        outs, muts = jax.jit(prog.fn)(state, *[to_jax(t) for t in flat])
    return ep, [to_torch(o) for o in outs], {k: to_torch(v) for k, v in muts.items()}


@pytest.mark.parametrize("cls,shape", [(torch.nn.BatchNorm2d, (4, 3, 5, 5)), (torch.nn.BatchNorm1d, (6, 3))])
def test_batchnorm_train_mode_updates_running_stats(cls, shape):
    torch.manual_seed(0)
    bn = cls(3, momentum=0.3)
    with torch.no_grad():
        bn.running_mean.uniform_(-1, 1), bn.running_var.uniform_(0.5, 2), bn.weight.uniform_(), bn.bias.uniform_()
    bn.train()
    x = torch.randn(shape) * 2 + 1
    ep, (y,), muts = _run(copy.deepcopy(bn), (x,))
    assert aten._native_batch_norm_legit_functional.default in {n.target for n in ep.graph.nodes}
    expected = bn(x)  # one eager step updates bn's buffers
    torch.testing.assert_close(y, expected.detach(), rtol=1e-5, atol=1e-5)
    assert set(muts) == {"running_mean", "running_var", "num_batches_tracked"}
    torch.testing.assert_close(muts["running_mean"], bn.running_mean, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(muts["running_var"], bn.running_var, rtol=1e-6, atol=1e-6)
    assert int(muts["num_batches_tracked"]) == int(bn.num_batches_tracked) == 1


def test_batchnorm_eval_mode_has_no_mutations():
    bn = torch.nn.BatchNorm2d(3).eval()
    x = torch.randn(2, 3, 4, 4)
    _, (y,), muts = _run(bn, (x,))
    assert muts == {}
    torch.testing.assert_close(y, bn(x).detach(), rtol=1e-5, atol=1e-5)


def _sdpa_calls(ep):
    return [n for n in ep.graph.nodes if n.target is aten.scaled_dot_product_attention.default]


def test_llama_sdpa_path_with_gqa():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                   num_attention_heads=4, num_key_value_heads=2, use_cache=False,
                                   attn_implementation="sdpa")
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(cfg).eval()
    ids = torch.randint(0, 64, (2, 7))
    mask = torch.ones(2, 7, dtype=torch.long)
    mask[1, :2] = 0  # left padding
    ep, outs, _ = _run(model, (ids,), {"attention_mask": mask})
    assert _sdpa_calls(ep)
    with torch.no_grad():
        expected = model(ids, attention_mask=mask).logits
    torch.testing.assert_close(outs[0], expected, rtol=1e-4, atol=1e-4)



class _Fn(torch.nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


def _export_dynamic_height(fn, x):
    """Capture with a dynamic dim 2 and jax.export with a symbolic height."""
    ep = capture(_Fn(fn), (x,), dynamic_shapes=({2: Dim("h", min=2, max=64)},))
    prog = lower(ep, options={"composites": False})  # jax 0.10 cannot lower composites with symbolic dims
    shape = jax_export.symbolic_shape(", ".join(["h" if i == 2 else str(d) for i, d in enumerate(x.shape)]))
    with jax.enable_x64(True):
        return jax_export.export(jax.jit(lambda t: prog.fn({}, t)[0]))(jax.ShapeDtypeStruct(shape, np.float32))


def test_nearest_upsample_by_integer_factor_with_dynamic_height():
    exported = _export_dynamic_height(lambda t: F.interpolate(t, scale_factor=(3, 2)), torch.randn(1, 2, 4, 5))
    x = torch.randn(1, 2, 7, 5)
    with jax.enable_x64(True):
        (got,) = exported.call(np.asarray(x))
    np.testing.assert_array_equal(np.asarray(got), F.interpolate(x, scale_factor=(3, 2)).numpy())


@pytest.mark.parametrize("fn,op", [  # (bilinear resizing and adaptive pools' values take dynamic sizes:
    # tests/test_exporter_dynamic_resize.py, test_exporter_dynamic_spatial.py)
    (lambda t: F.interpolate(t, scale_factor=1.7), "aten.upsample_nearest2d.vec"),  # (floor(size * 1.7) rounds)
    (lambda t: F.adaptive_max_pool2d(t, (3, 2), return_indices=True)[1].float(), "aten.adaptive_max_pool2d.default"),
], ids=["nearest_fractional", "adaptive_max_indices"])
def test_static_size_lowerings_reject_dynamic_spatial_dims(fn, op):
    with pytest.raises(UnsupportedOpError, match=rf"{op}.*(static|dynamic) spatial sizes"):
        _export_dynamic_height(fn, torch.randn(1, 2, 6, 4))
