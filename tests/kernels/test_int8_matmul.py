"""int8_matmul (Pallas, interpret mode) against its reference; the per-channel quantizer."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.int8_matmul import int8_matmul, int8_matmul_reference, quantize_per_channel
from tests.kernels.helpers import assert_close, normal, run_jit


def _float_weight() -> np.ndarray:
    """A [K=40, N=24] weight (neither a block multiple) with one all-zero column."""
    w = np.array(normal(1, (40, 24)))
    w[:, 5] = 0.0
    return w


@pytest.fixture(scope="module")
def weight():
    return run_jit(quantize_per_channel, jnp.asarray(_float_weight()))


def test_quantize_per_channel_round_trips(weight):
    w = _float_weight()
    w_int8, scales = weight
    assert w_int8.dtype == jnp.int8 and w_int8.shape == (40, 24)
    assert scales.dtype == jnp.float32 and scales.shape == (24,)
    w_int8, scales = np.asarray(w_int8), np.asarray(scales)
    assert np.abs(w_int8.astype(np.int32)).max() == 127
    assert scales[5] == 1.0 and not w_int8[:, 5].any()
    err = np.abs(w_int8.astype(np.float32) * scales - w)
    assert (err <= scales / 2 + 1e-7).all()


@pytest.mark.parametrize("schedule, dtype", [("loop", jnp.float32), ("grid", jnp.bfloat16)])
def test_int8_matmul_matches_reference(weight, schedule, dtype):
    w_int8, scales = weight
    x = normal(0, (2, 5, 40), dtype)  # M = 10 rows over a leading batch dim
    ct = normal(3, (2, 5, 24), dtype)

    def outputs_and_grads(x, scales):
        results = []
        for fn in (lambda x, s: int8_matmul(x, w_int8, s, block_m=8, block_n=16, block_k=16,
                                            interpret=True, schedule=schedule),
                   lambda x, s: int8_matmul_reference(x, w_int8, s)):
            out, vjp = jax.vjp(fn, x, scales)
            results.append((out, vjp(ct)))
        return results

    (out, grads), (ref_out, ref_grads) = run_jit(outputs_and_grads, x, scales)
    assert_close(out, ref_out, dtype, what="output")
    assert_close(grads[0], ref_grads[0], dtype, what="dx")
    assert_close(grads[1], ref_grads[1], jnp.float32 if dtype == jnp.float32 else dtype,
                 what="dscales")


@pytest.mark.parametrize("args, error", [
    (((4, 40), (40, 24), (24,), jnp.float32), TypeError),  # float weight
    (((4, 32), (40, 24), (24,), jnp.int8), ValueError),  # inner dims differ
    (((4, 40), (40, 24), (40,), jnp.int8), ValueError),  # scales not [N]
])
def test_int8_matmul_rejects_bad_input(args, error):
    xs, ws, ss, wdtype = args
    with pytest.raises(error):
        int8_matmul(np.zeros(xs, np.float32), np.zeros(ws, wdtype), np.ones(ss, np.float32),
                    interpret=True)
