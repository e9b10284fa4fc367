"""Every Pallas kernel takes an empty input (no batch, no rows, no keys, no cache) as its reference does.

On an accelerator a model's lowering dispatches to the Pallas kernel, so an empty batch that the
reference (and torch) handles must not reach a zero-sized block.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.flash_attention import flash_attention, flash_attention_reference
from kernels.int8_matmul import int8_matmul, int8_matmul_reference
from kernels.layer_norm import layer_norm, layer_norm_reference
from kernels.paged_attention import paged_attention, paged_attention_reference
from kernels.rms_norm import rms_norm, rms_norm_reference
from tests.kernels.helpers import normal


def _attention(q, k, **kwargs):
    """flash attention over q of ``q`` and k / v of ``k``, kernel and reference."""
    q, k = normal(0, q), normal(1, k)
    return (lambda q, k: flash_attention(q, k, k, interpret=True, **kwargs),
            lambda q, k: flash_attention_reference(q, k, k, **kwargs)), (q, k)


def _int8(lead, k, n):
    """int8 matmul of [*lead, k] by a [k, n] weight."""
    w = jnp.ones((k, n), jnp.int8)
    return (lambda x, s: int8_matmul(x, w, s, interpret=True),
            lambda x, s: int8_matmul_reference(x, w, s)), (normal(0, (*lead, k)), normal(1, (n,)))


def _norm(kernel, reference, shape):
    """A norm of ``shape`` with a weight."""
    return (lambda x, w: kernel(x, w, interpret=True), reference), (normal(0, shape), normal(1, shape[-1:]))


CASES = {
    "attention, no batch": lambda: _attention((0, 2, 4, 8), (0, 2, 5, 8)),
    "attention, no queries": lambda: _attention((1, 2, 0, 8), (1, 2, 5, 8), causal=True),
    "attention, no keys": lambda: _attention((1, 2, 3, 8), (1, 1, 0, 8), mask=np.ones((3, 0), bool)),
    "int8 matmul, no rows": lambda: _int8((2, 0), 4, 3),
    "int8 matmul, no contraction": lambda: _int8((3,), 0, 5),
    "int8 matmul, no outputs": lambda: _int8((3,), 4, 0),
    "layer norm, no rows": lambda: _norm(layer_norm, layer_norm_reference, (0, 3, 8)),
    "layer norm, no features": lambda: _norm(layer_norm, layer_norm_reference, (4, 0)),
    "rms norm, no rows": lambda: _norm(rms_norm, rms_norm_reference, (0, 8)),
    "rms norm, no features": lambda: _norm(rms_norm, rms_norm_reference, (2, 3, 0)),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_empty_input_gives_the_reference_result_and_gradients(case):
    (kernel, reference), args = CASES[case]()
    out, vjp = jax.vjp(kernel, *args)
    ref_out, ref_vjp = jax.vjp(reference, *args)
    assert out.shape == ref_out.shape and out.dtype == ref_out.dtype
    np.testing.assert_array_equal(np.asarray(out), np.asarray(ref_out))
    cotangent = jnp.ones(out.shape, out.dtype)
    for grad, ref_grad in zip(vjp(cotangent), ref_vjp(cotangent)):
        assert grad.shape == ref_grad.shape
        np.testing.assert_allclose(np.asarray(grad), np.asarray(ref_grad), atol=1e-6)


@pytest.mark.parametrize("batch, pages_per_sequence", [(0, 2), (2, 0)])
def test_paged_attention_of_no_sequence_or_no_cache_is_the_reference_result(batch, pages_per_sequence):
    q, pages = normal(0, (batch, 2, 8)), normal(1, (1, 3, 4, 8))
    tables = np.zeros((batch, pages_per_sequence), np.int32)
    lengths = np.zeros((batch,), np.int32)
    ref = paged_attention_reference(q, pages, pages, tables, lengths)
    for schedule in ("loop", "grid"):
        out = paged_attention(q, pages, pages, tables, lengths, interpret=True, schedule=schedule)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_array_equal(np.asarray(out), np.asarray(ref))
