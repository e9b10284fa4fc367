"""flash_attention (Pallas, interpret mode) against flash_attention_reference: values and grads."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels._common import PallasUnavailableError
from kernels.flash_attention import flash_attention, flash_attention_reference
from tests.kernels.helpers import assert_close, bernoulli, normal, run_jit


@dataclasses.dataclass(frozen=True)
class Case:
    b: int
    hq: int
    hkv: int
    lq: int
    lk: int
    d: int
    dtype: object = jnp.float32
    causal: bool = False
    mask: str | None = None  # see _mask
    schedule: str = "loop"


def _mask(case: Case):
    b, hq, lq, lk = case.b, case.hq, case.lq, case.lk
    if case.mask is None:
        return None
    if case.mask == "bool_bhqk":  # per-head boolean with one fully masked query row
        keep = bernoulli(7, 0.7, (b, hq, lq, lk))
        keep[0, 1, 3] = False
        return jnp.asarray(keep)
    if case.mask == "add_qk":  # 2-D additive, broadcast over batch and heads
        return normal(7, (lq, lk))
    if case.mask == "bool_keypad":  # key padding [B, 1, 1, Lk]
        lengths = np.array([lk - 5] + [lk] * (b - 1))
        return jnp.asarray((np.arange(lk)[None, :] < lengths[:, None])[:, None, None, :])
    if case.mask == "add_bhqk":  # full additive with -inf entries
        bias = np.asarray(normal(7, (b, hq, lq, lk)))
        return jnp.asarray(np.where(bernoulli(8, 0.2, bias.shape), -np.inf, bias))
    raise ValueError(case.mask)


CASES = {
    # GQA, causal with Lq > Lk (rows past Lk see every key), lengths not block multiples.
    "gqa_causal_lq_gt_lk": Case(1, 4, 2, 40, 24, 16, causal=True),
    # Per-head boolean mask with a fully masked row (torch gives zeros), batch 2.
    "bool_mask_masked_row": Case(2, 2, 2, 33, 33, 16, mask="bool_bhqk"),
    # Single head, batch 1, Lq < Lk, 2-D additive mask, D = 32.
    "single_head_additive": Case(1, 1, 1, 17, 40, 32, mask="add_qk"),
    # MQA, bf16, causal with Lq < Lk plus a key padding mask.
    "mqa_bf16_causal_keypad": Case(2, 2, 1, 20, 37, 16, jnp.bfloat16, True, "bool_keypad"),
    # TPU schedule: GQA, causal, per-head additive mask containing -inf.
    "grid_gqa_causal_additive": Case(1, 4, 2, 33, 20, 16, causal=True, mask="add_bhqk",
                                     schedule="grid"),
    # TPU schedule, bf16, MQA, no mask, D = 32, lengths a block multiple (no padding).
    "grid_bf16_mqa": Case(2, 2, 1, 32, 32, 32, jnp.bfloat16, schedule="grid"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_flash_attention_matches_reference(name):
    case = CASES[name]
    q = normal(0, (case.b, case.hq, case.lq, case.d), case.dtype)
    k = normal(1, (case.b, case.hkv, case.lk, case.d), case.dtype)
    v = normal(2, (case.b, case.hkv, case.lk, case.d), case.dtype)
    ct = normal(3, q.shape, case.dtype)  # random cotangent: every output entry matters
    mask = _mask(case)

    def kernel(q, k, v):
        return flash_attention(q, k, v, mask=mask, causal=case.causal, block_q=16, block_k=16,
                               interpret=True, schedule=case.schedule)

    def reference(q, k, v):
        return flash_attention_reference(q, k, v, mask=mask, causal=case.causal)

    def outputs_and_grads(q, k, v):
        results = []
        for fn in (kernel, reference):
            def loss(q, k, v, fn=fn):
                out = fn(q, k, v)
                return jnp.sum(out.astype(jnp.float32) * ct), out

            grads, out = jax.grad(loss, argnums=(0, 1, 2), has_aux=True)(q, k, v)
            results.append((out, grads))
        return results

    (out, grads), (ref_out, ref_grads) = run_jit(outputs_and_grads, q, k, v)
    assert_close(out, ref_out, case.dtype, what="output")
    for label, grad, ref_grad in zip("qkv", grads, ref_grads):
        assert_close(grad, ref_grad, case.dtype, what=f"d{label}")
    assert np.isfinite(np.asarray(out, np.float32)).all()
    if case.mask == "bool_bhqk":
        np.testing.assert_array_equal(np.asarray(out)[0, 1, 3], 0.0)


def test_flash_attention_default_blocks_and_scale():
    # No explicit blocks: the default shrinks to the (tiny) sequence; custom scale.
    q, k, v = normal(0, (1, 2, 12, 16)), normal(1, (1, 2, 12, 16)), normal(2, (1, 2, 12, 16))
    out, ref = run_jit(lambda q, k, v: (
        flash_attention(q, k, v, scale=0.3, interpret=True),
        flash_attention_reference(q, k, v, scale=0.3)), q, k, v)
    assert_close(out, ref, jnp.float32)


@pytest.mark.parametrize("shapes, kwargs, error", [
    (((1, 3, 8, 16), (1, 2, 8, 16)), {}, ValueError),  # Hq not a multiple of Hkv
    (((1, 2, 8, 16), (1, 2, 8, 32)), {}, ValueError),  # head dims differ
    (((1, 2, 8, 16), (1, 2, 8, 16)), {"mask": np.ones((3, 8), np.float32)}, ValueError),
    (((1, 2, 8, 16), (1, 2, 8, 16)), {"mask": np.ones((8, 8), np.int32)}, TypeError),
    (((1, 2, 8, 16), (1, 2, 8, 16)), {"block_q": 12}, ValueError),
    (((1, 2, 8, 16), (1, 2, 8, 16)), {"schedule": "diagonal"}, ValueError),
])
def test_flash_attention_rejects_bad_input(shapes, kwargs, error):
    q, k = np.zeros(shapes[0], np.float32), np.zeros(shapes[1], np.float32)
    with pytest.raises(error):
        flash_attention(q, k, k, interpret=True, **kwargs)


def test_flash_attention_compiled_on_cpu_is_a_clear_error():
    if jax.default_backend() != "cpu":
        pytest.skip("checks the CPU error only")
    x = np.zeros((1, 1, 8, 16), np.float32)
    with pytest.raises(PallasUnavailableError, match="interpret=True"):
        flash_attention(x, x, x)
