"""Every model family of ``examples/models.py`` through the "tpu" and "stablehlo" targets.

Per family: one conversion per target (module-scoped fixtures), compared with
PyTorch fp32 (max relative error ≤ 1e-4, see ``tests/models/compare.py``); the
StableHLO artifact is saved, reloaded with ``exporters.stablehlo.load`` and must
agree with the tpu target. A conversion failure is kept and re-raised by each
test that needs it, so the test fails with the converter's own message (e.g.
the ``UnsupportedOpError`` naming the missing op) instead of erroring in setup.

Then the runtime behaviours: the compile cache with a dynamic batch dim,
BatchNorm running stats written back in train mode, a dynamic StableHLO export
reloaded at two batch sizes, ``TpuModule.stablehlo()``, and the error for an
unsupported op.
"""

from __future__ import annotations

import copy
import inspect
from dataclasses import dataclass
from typing import Any

import pytest
import torch
from torch.export import Dim

from converter import convert
from converter.api import prepare
from exporters.stablehlo import build as build_stablehlo
from tpu_runtime.module import build as build_tpu
from converter.errors import UnsupportedOpError
from examples.models import FAMILIES, cnn, mlp
from exporters.stablehlo import load
from tests.models.compare import FP32_REL_TOL, assert_outputs_close, flat_outputs

# torch.export warns that nn.LSTM/nn.GRU assign ``_flat_weights`` while being traced; the
# weights are still captured as parameters, so the warning is noise for these tests.
pytestmark = pytest.mark.filterwarnings("ignore:The tensor attributes self.rnn._flat_weights:UserWarning")

#: The same JAX program through jax.jit (tpu) and through jax.export (stablehlo)
#: on one backend: only XLA fusion differences are allowed between the two.
SAME_PROGRAM_REL_TOL = 1e-6


@dataclass
class Outcome:
    """A conversion (and run) kept for several tests: its value or the error it raised."""

    value: Any = None
    error: BaseException | None = None

    def get(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


def _attempt(fn) -> Outcome:
    try:
        return Outcome(fn())
    except Exception as e:  # kept and re-raised by every test that uses this outcome
        return Outcome(error=e)


def _clone(args: tuple) -> tuple:
    return tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args)


# --------------------------------------------------------------------------- family fixtures


@pytest.fixture(scope="module", params=list(FAMILIES))
def family(request) -> dict:
    """One zoo model, its sample inputs and its PyTorch fp32 outputs."""
    model, args = FAMILIES[request.param]()
    with torch.no_grad():
        expected = flat_outputs(model(*_clone(args)))
    return {"name": request.param, "model": model, "args": args, "expected": expected}


@pytest.fixture(scope="module")
def program(family) -> Outcome:
    """Capture + passes + lowering once per family; both targets are built from it (as convert() does)."""
    return _attempt(lambda: prepare(family["model"], _clone(family["args"]), target="tpu"))


@pytest.fixture(scope="module")
def tpu_run(family, program) -> Outcome:
    """The "tpu" target once per family, and its outputs on the sample inputs."""

    def run():
        module = build_tpu(program.get())
        return module, flat_outputs(module(*_clone(family["args"])))

    return _attempt(run)


@pytest.fixture(scope="module")
def stablehlo_run(family, program, tmp_path_factory) -> Outcome:
    """The "stablehlo" target once per family, saved, reloaded, run on the sample inputs."""

    def run():
        artifact = build_stablehlo(program.get())
        path = artifact.save(str(tmp_path_factory.mktemp(family["name"]) / "model"))
        loaded = load(path)
        return loaded, flat_outputs(loaded(*_clone(family["args"])))

    return _attempt(run)


def test_family_tpu_matches_torch(family, tpu_run):
    _, got = tpu_run.get()
    assert_outputs_close(got, family["expected"], FP32_REL_TOL, f"{family['name']}/tpu")


def test_family_stablehlo_matches_torch(family, stablehlo_run):
    loaded, got = stablehlo_run.get()
    assert "stablehlo" in loaded.mlir_text
    assert_outputs_close(got, family["expected"], FP32_REL_TOL, f"{family['name']}/stablehlo")


def test_family_stablehlo_reload_matches_tpu(family, tpu_run, stablehlo_run):
    _, tpu_out = tpu_run.get()
    _, shlo_out = stablehlo_run.get()
    assert_outputs_close(shlo_out, tpu_out, SAME_PROGRAM_REL_TOL, f"{family['name']}/stablehlo vs tpu")


# --------------------------------------------------------------------------- dynamic batch, compile cache

BATCH = {0: Dim("batch", min=2, max=64)}


@pytest.fixture(scope="module")
def mlp_dynamic():
    """The mlp captured with a dynamic batch dim (sample batch 4), for the tpu target."""
    model, (x,) = mlp()
    return _attempt(lambda: (model, convert(model, (x,), target="tpu", dynamic_shapes={"x": BATCH})))


def _torch(model, x):
    with torch.no_grad():
        return model(x)


def test_dynamic_batch_new_shape_compiles_once_and_is_cached(mlp_dynamic):
    model, tpu = mlp_dynamic.get()
    for batch in (6, 11):  # sizes no other test uses: each is new to the module's cache
        x = torch.randn(batch, 16)
        misses, hits = tpu.stats.misses, tpu.stats.hits
        assert_outputs_close(tpu(x), _torch(model, x), FP32_REL_TOL, f"mlp batch {batch}")
        assert (tpu.stats.misses, tpu.stats.hits) == (misses + 1, hits), "a new batch size compiles once"
        assert_outputs_close(tpu(x), _torch(model, x), FP32_REL_TOL, f"mlp batch {batch} again")
        assert (tpu.stats.misses, tpu.stats.hits) == (misses + 1, hits + 1), "the same shape hits the cache"
    assert tpu.stats.requests == tpu.stats.hits + tpu.stats.misses


def test_dynamic_batch_steady_state_does_not_recompile(mlp_dynamic):
    model, tpu = mlp_dynamic.get()
    x = torch.randn(5, 16)
    tpu(x)  # first call at batch 5 may compile
    misses, seconds, hits = tpu.stats.misses, tpu.stats.compile_seconds, tpu.stats.hits
    for _ in range(5):
        y = tpu(x)
    assert tpu.stats.misses == misses
    assert tpu.stats.compile_seconds == seconds
    assert tpu.stats.hits == hits + 5
    assert_outputs_close(y, _torch(model, x), FP32_REL_TOL, "mlp steady state")


def test_stablehlo_method_returns_stablehlo_text(mlp_dynamic):
    _, tpu = mlp_dynamic.get()
    text = tpu.stablehlo()
    assert isinstance(text, str) and "stablehlo" in text


def test_stablehlo_dynamic_batch_runs_at_two_batch_sizes_after_reload(tmp_path):
    model, (x,) = mlp()
    artifact = convert(model, (x,), target="stablehlo", dynamic_shapes={"x": BATCH})
    loaded = load(artifact.save(str(tmp_path / "mlp_dynamic")))
    assert loaded.signature["dynamic_dims"], loaded.signature
    for batch in (3, 9):
        x = torch.randn(batch, 16)
        assert_outputs_close(loaded(x), _torch(model, x), FP32_REL_TOL, f"reloaded mlp batch {batch}")


# --------------------------------------------------------------------------- training mode


def test_batchnorm_running_stats_written_back_in_train_mode():
    model, (x,) = cnn()
    model.train()
    initial = {k: v.clone() for k, v in model.named_buffers()}
    reference = copy.deepcopy(model)
    tpu = convert(model, (x,), target="tpu")
    got = tpu(x.clone())
    expected = reference(x.clone()).detach()
    assert_outputs_close(got, expected, FP32_REL_TOL, "cnn train-mode output")
    state = tpu.state_dict()
    updated = dict(reference.named_buffers())
    assert sum(k.endswith("running_mean") for k in updated) == 2
    for name, want in updated.items():
        assert not torch.equal(want, initial[name]), f"PyTorch did not update {name}; the test model is wrong"
        assert name in state, f"buffer {name} missing from TpuModule.state_dict(): {sorted(state)}"
        assert_outputs_close(state[name], want, FP32_REL_TOL, f"buffer {name}")
    # the written-back stats are the ones the next call updates
    x2 = torch.randn_like(x)
    assert_outputs_close(tpu(x2.clone()), reference(x2.clone()).detach(), FP32_REL_TOL, "cnn second call")
    state = tpu.state_dict()
    for name, want in reference.named_buffers():
        assert_outputs_close(state[name], want, FP32_REL_TOL, f"buffer {name} after two calls")


# --------------------------------------------------------------------------- unsupported op


@torch.library.custom_op("tpu_export_tests::mystery", mutates_args=())
def mystery(x: torch.Tensor) -> torch.Tensor:
    """A custom op no lowering table knows."""
    return x.sin()


@mystery.register_fake
def _(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x)


class UsesMystery(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1
        return mystery(y) * 2


def _mystery_call_line() -> int:
    lines, start = inspect.getsourcelines(UsesMystery.forward)
    return start + next(i for i, line in enumerate(lines) if "mystery(y)" in line)


@pytest.mark.parametrize("target", ["tpu", "stablehlo"])
def test_unsupported_op_error_names_op_target_and_source_line(target):
    with pytest.raises(UnsupportedOpError) as info:
        convert(UsesMystery(), (torch.randn(3),), target=target)
    message = str(info.value)
    assert "tpu_export_tests.mystery.default" in message, message
    assert f"'{target}'" in message, message
    assert f"test_families.py:{_mystery_call_line()}" in message, message
