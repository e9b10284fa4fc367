"""kernels.dispatch: the backend policy, forced choices, unsupported configs, the record."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from kernels import dispatch
from kernels.rms_norm import rms_norm_reference
from tests.kernels.helpers import assert_close, normal, run_jit

pytestmark = pytest.mark.skipif(jax.default_backend() != "cpu",
                                reason="the expected choices are the CPU ones")


@pytest.fixture(autouse=True)
def fresh_record():
    dispatch.reset_choices()
    yield
    dispatch.reset_choices()


def test_backend_is_cpu_here():
    assert dispatch.backend() == "cpu"


def test_cpu_default_is_reference_with_reason():
    choice = dispatch.choose("flash_attention", head_dim=64, dtype=jnp.bfloat16)
    assert (choice.impl, choice.interpret) == ("reference", False)
    assert "cpu" in choice.reason


def test_force_pallas_on_cpu_interprets():
    choice = dispatch.choose("rms_norm", force="pallas", hidden=4096)
    assert (choice.impl, choice.interpret) == ("pallas", True)
    assert "forced" in choice.reason and "interpret" in choice.reason


def test_force_reference():
    choice = dispatch.choose("int8_matmul", force="reference", weight_dtype=jnp.int8)
    assert (choice.impl, choice.reason) == ("reference", "forced reference")


@pytest.mark.parametrize("kernel, config, fragment", [
    ("flash_attention", {"head_dim": 64, "dropout_p": 0.1}, "dropout_p=0.1"),
    ("flash_attention", {"head_dim": 512}, "head_dim=512"),
    ("flash_attention", {"head_dim": 64, "dtype": jnp.float16}, "float16"),
    ("layer_norm", {"hidden": 1 << 20}, "hidden size"),
    ("int8_matmul", {"weight_dtype": jnp.int4}, "not int8"),
    ("paged_attention", {"head_dim": 320}, "head_dim=320"),
])
def test_unsupported_config_falls_back_with_reason(kernel, config, fragment):
    choice = dispatch.choose(kernel, **config)
    assert choice.impl == "reference"
    assert choice.reason.startswith("unsupported config") and fragment in choice.reason
    assert dispatch.choices() == {(kernel, "reference", choice.reason): 1}


def test_force_pallas_on_unsupported_config_raises():
    with pytest.raises(dispatch.UnsupportedKernelError, match="dropout"):
        dispatch.choose("flash_attention", force="pallas", head_dim=64, dropout_p=0.5)


def test_bad_requests_are_errors():
    with pytest.raises(KeyError, match="flash_attention"):  # lists what exists
        dispatch.choose("flash_attn")
    with pytest.raises(TypeError):
        dispatch.choose("rms_norm", hiden=64)  # typo in a config key
    with pytest.raises(ValueError, match="force"):
        dispatch.choose("rms_norm", force="triton")


def test_choices_are_counted_and_formatted():
    for _ in range(3):
        dispatch.choose("rms_norm", hidden=64)
    dispatch.choose("rms_norm", force="pallas", hidden=64)
    record = dispatch.choices()
    assert sum(record.values()) == 4
    assert record[("rms_norm", "reference",
                   "cpu backend: Pallas would only run interpreted")] == 3
    assert record[("rms_norm", "pallas (interpret)", "forced pallas (interpret mode on cpu)")] == 1
    table = dispatch.format_choices()
    assert "pallas (interpret)" in table and "    3" in table
    assert set(dispatch.kernel_names()) == {"flash_attention", "rms_norm", "layer_norm",
                                            "int8_matmul", "paged_attention"}


def test_choose_accepts_the_kernel_function():
    from kernels import layer_norm
    assert dispatch.choose(layer_norm, hidden=8).impl == "reference"
    assert ("layer_norm", "reference") == next(iter(dispatch.choices()))[:2]


def test_run_forced_pallas_matches_default_reference():
    x, w = normal(0, (6, 40)), normal(1, (40,))
    out, ref, direct = run_jit(lambda x, w: (
        dispatch.run("rms_norm", x, w, eps=1e-6, force="pallas", block_rows=8),
        dispatch.run("rms_norm", x, w, eps=1e-6, block_rows=8),
        rms_norm_reference(x, w, eps=1e-6)), x, w)
    assert_close(out, ref, jnp.float32)
    assert_close(ref, direct, jnp.float32)
    impls = {key[1] for key in dispatch.choices()}
    assert impls == {"pallas (interpret)", "reference"}


def test_run_with_dropout_uses_reference():
    q = normal(0, (1, 2, 8, 16))
    out = run_jit(lambda q: dispatch.run("flash_attention", q, q, q, dropout_p=0.5,
                                         dropout_rng=jax.random.PRNGKey(0)), q)
    assert out.shape == q.shape and np.isfinite(np.asarray(out)).all()
    [(key, count)] = dispatch.choices().items()
    assert key[1] == "reference" and "dropout_p=0.5" in key[2] and count == 1
    with pytest.raises(TypeError, match="interpret"):
        dispatch.run("flash_attention", q, q, q, interpret=True)
