"""rms_norm / layer_norm (Pallas, interpret mode) against their references: values and grads."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels.layer_norm import layer_norm, layer_norm_reference
from kernels.rms_norm import rms_norm, rms_norm_reference
from tests.kernels.helpers import assert_close, normal, run_jit

# (kernel, reference, x shape, dtype, parameters given, kwargs). Rows (21, 5) are
# not multiples of block_rows=8; width 40 is not a power of two.
CASES = {
    "rms_weight_f32": (rms_norm, rms_norm_reference, (3, 7, 40), jnp.float32, 1,
                       {"eps": 1e-6}),
    "rms_no_weight_bf16_default_eps": (rms_norm, rms_norm_reference, (5, 40), jnp.bfloat16, 0,
                                       {}),
    "layer_weight_bias_f32": (layer_norm, layer_norm_reference, (3, 7, 40), jnp.float32, 2,
                              {"eps": 1e-5}),
    "layer_weight_only_bf16": (layer_norm, layer_norm_reference, (5, 40), jnp.bfloat16, 1, {}),
    "layer_no_params_f32": (layer_norm, layer_norm_reference, (2, 3, 24), jnp.float32, 0, {}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_norm_matches_reference(name):
    kernel, reference, shape, dtype, n_params, kwargs = CASES[name]
    x = normal(0, shape, dtype, loc=0.5, scale=2.0)  # nonzero mean exercises the centering
    params = [normal(1 + i, shape[-1:], dtype) for i in range(n_params)]
    ct = normal(9, shape, dtype)

    def outputs_and_grads(x, *params):
        results = []
        for fn, extra in ((kernel, {"block_rows": 8, "interpret": True}), (reference, {})):
            call = lambda x, *p, fn=fn, extra=extra: fn(x, *p, **kwargs, **extra)  # noqa: E731
            out, vjp = jax.vjp(call, x, *params)
            results.append((out, vjp(ct)))
        return results

    (out, grads), (ref_out, ref_grads) = run_jit(outputs_and_grads, x, *params)
    assert_close(out, ref_out, dtype, what="output")
    for label, grad, ref_grad in zip(("x", "weight", "bias"), grads, ref_grads):
        assert_close(grad, ref_grad, dtype, what=f"d{label}")


@pytest.mark.parametrize("kernel", [rms_norm, layer_norm])
def test_norm_rejects_bad_input(kernel):
    with pytest.raises(ValueError, match="does not match"):
        kernel(np.zeros((4, 8), np.float32), np.ones((7,), np.float32), interpret=True)
    with pytest.raises(ValueError, match="0-d input"):
        kernel(np.float32(1.0), interpret=True)
