"""Every kernel lowers for TPU (Pallas → Mosaic) and CUDA (Pallas → Triton IR) from a CPU host.

``jax.export`` lowers for a platform without its device, so the Pallas lowering
rules of both accelerator backends run in CI: unsupported ops, bad block
shapes or index maps fail here. What cannot run without the device is the
backend's own compiler (libtpu's Mosaic passes, Triton → PTX); the benchmark
script exercises that on a real machine.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest
from jax import export

import kernels._common as common
from kernels import flash_attention, int8_matmul, layer_norm, paged_attention, rms_norm

tpu_info = pytest.importorskip("jax._src.pallas.mosaic.tpu_info")

S = jax.ShapeDtypeStruct
BF16 = jnp.bfloat16
_KERNEL_CALLS = ("tpu_custom_call", "__gpu$xla.gpu.triton")


def _grad(fn, argnums):
    return lambda *a: jax.grad(lambda *a: fn(*a).astype(jnp.float32).sum(), argnums=argnums)(*a)


def _cases():
    """name → (function, argument specs, number of Pallas kernels expected).

    A norm's gradient needs only its backward kernel (the forward output is dead).
    """
    q, kv = S((1, 4, 200, 128), BF16), S((1, 2, 200, 128), BF16)
    return {
        "flash_attention_causal_gqa_fwd_bwd": (
            _grad(lambda q, k, v: flash_attention(q, k, v, causal=True), (0, 1, 2)),
            (q, kv, kv), 3),
        "flash_attention_bool_mask_fwd_bwd": (
            _grad(lambda q, k, v, m: flash_attention(q, k, v, mask=m), (0, 1, 2)),
            (q, kv, kv, S((1, 1, 200, 200), jnp.bool_)), 3),
        "flash_attention_f32_d80": (
            lambda q, k, v: flash_attention(q, k, v),
            (S((2, 2, 64, 80), jnp.float32),) * 3, 1),
        "rms_norm_fwd_bwd": (_grad(lambda x, w: rms_norm(x, w), (0, 1)),
                             (S((64, 1000), BF16), S((1000,), BF16)), 1),
        "layer_norm_fwd_bwd": (_grad(lambda x, w, b: layer_norm(x, w, b), (0, 1, 2)),
                               (S((64, 1024), BF16), S((1024,), BF16), S((1024,), BF16)), 1),
        "int8_matmul": (lambda x, w, s: int8_matmul(x, w, s),
                        (S((8, 512), BF16), S((512, 384), jnp.int8), S((384,), jnp.float32)), 1),
        "paged_attention": (
            lambda q, k, v, t, n: paged_attention(q, k, v, t, n),
            (S((2, 8, 128), BF16), S((2, 32, 16, 128), BF16), S((2, 32, 16, 128), BF16),
             S((2, 8), jnp.int32), S((2,), jnp.int32)), 1),
    }


@pytest.mark.parametrize("platform, family", [("tpu", "tpu"), ("cuda", "gpu")])
@pytest.mark.parametrize("name", list(_cases()))
def test_kernel_lowers_for_accelerator(monkeypatch, platform, family, name):
    monkeypatch.setattr(common, "backend", lambda: family)
    # Mosaic asks the (absent) device which TPU generation to target.
    monkeypatch.setattr(tpu_info, "get_device_kind", lambda: "TPU v5e")
    fn, specs, expected = _cases()[name]
    exported = export.export(
        jax.jit(fn), platforms=[platform],
        disabled_checks=[export.DisabledSafetyCheck.custom_call(c) for c in _KERNEL_CALLS],
    )(*specs)
    module = exported.mlir_module()
    assert sum(module.count(c) for c in _KERNEL_CALLS) == expected
