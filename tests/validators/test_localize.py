"""First-divergence localization: a deliberately broken lowering is found at its node and source line."""

from __future__ import annotations

import jax
import numpy as np
import pytest
import torch

import tests.validators.models as models_module
from converter.lowering.interpreter import run_graph
from converter.lowering.registry import override
from tests.validators.conftest import bad_relu
from tests.validators.models import mlp, relu_line
from validators import validate

aten = torch.ops.aten


@pytest.mark.parametrize("target, method", [("tpu", "intermediates"), ("litert", "extra-outputs")])
def test_broken_lowering_is_localized_to_its_node_and_source_line(broken_report, target, method):
    report, _, _ = broken_report
    t = report.target(target)
    assert t.status == "fail"
    loc = t.localization
    assert loc.method == method
    assert loc.kind == "op"
    assert loc.node == "relu" and loc.op == "aten.relu.default"
    assert loc.location["file"] == models_module.__file__
    assert loc.location["line"] == relu_line()
    assert loc.location["module_path"] == "act"
    assert loc.error is not None and not loc.error.passed
    assert loc.isolated is not None and not loc.isolated.passed
    # every node before the culprit is within tolerance; the culprit is the first failure
    names = [n.name for n in loc.profile]
    assert all(n.passed for n in loc.profile[: names.index("relu")])
    assert not loc.profile[names.index("relu")].passed


def test_target_translation_bug_is_localized_with_the_targets_own_intermediates(monkeypatch):
    """Break LiteRT's rule for max(x, 0) (clamp to [-1, 1]): only LiteRT diverges, at the relu node."""
    from exporters.litert import rules
    from exporters.litert.rules.elementwise import elementwise

    def clamping_max(em, eqn, a, b):
        x = b if a.is_const else a
        return elementwise(em, eqn, "RELU_N1_TO_1", [x])

    monkeypatch.setitem(rules.RULES, jax.extend.core.primitives.max_p, clamping_max)
    model, args = mlp()
    args = (args[0] * 4,)  # pre-activations well beyond 1
    report = validate(model, args, targets=["tpu", "litert"], num_random_inputs=0)
    assert report.target("tpu").passed
    loc = report.target("litert").localization
    assert loc.method == "extra-outputs"
    assert loc.node == "relu" and loc.location["line"] == relu_line()
    assert loc.kind == "translation"  # the lowering table is right; LiteRT's translation is not
    assert loc.isolated is not None and loc.isolated.passed
    assert any(c.target == "litert" and not c.error.passed for c in report.cross)


def test_observer_sees_every_node_and_leaves_outputs_unchanged(passing_report):
    _, args = mlp()
    program = passing_report.target("tpu").artifact.program
    state = {k: jax.numpy.asarray(v) for k, v in program.state.items()}
    x = jax.numpy.asarray(args[0].numpy())
    seen = []
    with_observer, _ = run_graph(program, state, (x,), observer=lambda node, value: seen.append(node.name))
    plain, _ = program.fn(state, x)
    np.testing.assert_array_equal(np.asarray(with_observer[0]), np.asarray(plain[0]))
    expected = [n.name for n in program.exported.graph.nodes if n.op != "output"]
    assert seen == expected


def test_target_that_cannot_take_extra_outputs_is_localized_by_proxy():
    """A builder refusing the probed program: the lowered program's intermediates stand in, and the report says so."""
    import exporters.litert as litert
    from converter.errors import ExportError
    from validators.localize import ProbedProgram

    def no_probes(program, **options):
        if isinstance(program, ProbedProgram):
            raise ExportError("extra outputs are not supported")
        return litert.build(program, **options)

    model, args = mlp()
    with override(aten.relu.default, bad_relu):
        report = validate(model, args, targets=["litert"], num_random_inputs=0, builders={"litert": no_probes})
    loc = report.target("litert").localization
    assert loc.method == "proxy" and loc.node == "relu" and loc.location["line"] == relu_line()
    assert "extra outputs are not supported" in loc.note and "stand in" in loc.note
    assert "proxy" in report.to_markdown()
