"""Shared parity runs (each costs a capture, a few conversions and jit compiles)."""

from __future__ import annotations

import jax.numpy as jnp
import pytest
import torch

from converter.lowering.registry import override
from tests.validators.models import mlp
from validators import validate

aten = torch.ops.aten


def bad_relu(ctx, x):
    """A deliberately wrong relu lowering: |x| instead of max(x, 0)."""
    return jnp.abs(x)


@pytest.fixture(scope="session")
def passing_report():
    """The MLP on every target, sample + 2 random input sets."""
    model, args = mlp()
    return validate(model, args, targets=("tpu", "litert", "stablehlo"), num_random_inputs=2)


@pytest.fixture(scope="session")
def broken_report(tmp_path_factory):
    """The MLP with relu's lowering broken, on tpu and litert; written to a folder."""
    model, args = mlp()
    with override(aten.relu.default, bad_relu):
        report = validate(model, args, targets=("tpu", "litert"), num_random_inputs=1)
    out = tmp_path_factory.mktemp("broken_report")
    paths = report.write(out)
    return report, out, paths
