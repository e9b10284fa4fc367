"""paged_attention (Pallas, interpret mode) against its reference, both schedules."""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

from kernels.paged_attention import paged_attention, paged_attention_reference
from tests.kernels.helpers import assert_close, normal, run_jit

B, H, HKV, D, NUM_PAGES, PAGE, MAX_PAGES = 3, 4, 2, 16, 12, 8, 4


@pytest.fixture(scope="module")
def tables():
    """Shuffled page ids; sequence 1 leaves its unused entries at -1; sequence 2 is empty."""
    ids = np.random.default_rng(0).permutation(NUM_PAGES)[:B * MAX_PAGES].reshape(B, MAX_PAGES)
    ids[1, 2:] = -1
    lengths = np.array([29, 9, 0])  # 29: last page partly filled
    return jnp.asarray(ids, jnp.int32), jnp.asarray(lengths, jnp.int32)


@pytest.mark.parametrize("schedule, dtype", [("loop", jnp.float32), ("grid", jnp.bfloat16)])
def test_paged_attention_matches_reference(tables, schedule, dtype):
    block_tables, lengths = tables
    q = normal(0, (B, H, D), dtype)
    k_pages = normal(1, (HKV, NUM_PAGES, PAGE, D), dtype)
    v_pages = normal(2, (HKV, NUM_PAGES, PAGE, D), dtype)
    out, ref = run_jit(lambda *a: (paged_attention(*a, interpret=True, schedule=schedule),
                                   paged_attention_reference(*a)),
                       q, k_pages, v_pages, block_tables, lengths)
    assert_close(out, ref, dtype)
    np.testing.assert_array_equal(np.asarray(out, np.float32)[2], 0.0)  # empty sequence


def test_paged_attention_rejects_bad_input(tables):
    block_tables, lengths = tables
    q = np.zeros((B, 3, D), np.float32)  # 3 heads over 2 kv heads
    pages = np.zeros((HKV, NUM_PAGES, PAGE, D), np.float32)
    with pytest.raises(ValueError, match="multiple"):
        paged_attention(q, pages, pages, block_tables, lengths, interpret=True)
    with pytest.raises(TypeError):
        paged_attention(np.zeros((B, H, D), np.float32), pages, pages,
                        np.asarray(block_tables, np.float32), lengths, interpret=True)
