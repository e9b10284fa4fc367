"""Debug eager's findings say where the op came from: the user's source line, and in ``backward()`` the autograd
node (with the forward line that made it under anomaly detection), as an error of tpu-export names its line."""

from __future__ import annotations

import re
import warnings

import jax.numpy as jnp
import pytest
import torch

import tpu_runtime
from converter.errors import ParityError
from converter.lowering.registry import override

HERE = re.escape(__file__)


def _line(fn) -> int:
    """The line of ``fn``'s body that holds its return (its single op line)."""
    return fn.__code__.co_firstlineno + 1


def test_a_nan_finding_names_the_users_line():
    def make_nan(t):
        return t.log()

    with tpu_runtime.set_eager_mode("debug"):
        with pytest.raises(tpu_runtime.NonFiniteError,
                           match=rf"aten\.log\.default produced NaN .* at {HERE}:{_line(make_nan)} in make_nan$"):
            make_nan(torch.tensor([-1.0, 2.0]).to("tpu"))


def test_a_nan_passed_on_from_the_host_is_told_apart_from_one_an_op_made():
    def pass_on(t):
        return t.amax()

    made_before = torch.tensor([1.0, -1.0]).to("tpu").sqrt()  # (strict eager: not checked)
    with tpu_runtime.set_eager_mode("debug"):
        for t in (torch.tensor([1.0, float("nan")]).to("tpu"), made_before):
            with pytest.raises(tpu_runtime.NonFiniteError, match=r"aten\.amax\.default produced NaN .* in pass_on; "
                                                                 r"its input 0 already held NaN"):
                pass_on(t)


def _nan_in_backward(w):
    return (w * 0).sqrt().sum()  # forward 0; backward: sqrt's inf times mul's 0 is NaN


@pytest.mark.parametrize("anomaly", [False, True])
def test_a_nan_in_backward_names_the_autograd_node_and_with_anomaly_detection_its_forward_line(anomaly):
    w = torch.tensor([1.0, 2.0]).to("tpu").requires_grad_()
    made = rf"made at {HERE}:{_line(_nan_in_backward)} in _nan_in_backward" if anomaly else \
        r"torch\.autograd\.set_detect_anomaly\(True\) names the forward line"
    with warnings.catch_warnings(), torch.autograd.set_detect_anomaly(anomaly), \
            tpu_runtime.set_eager_mode("debug"):
        warnings.simplefilter("ignore")  # (anomaly detection's warning)
        loss = _nan_in_backward(w)
        with pytest.raises(tpu_runtime.NonFiniteError) as info:
            loss.backward()
    assert re.search(rf"aten\.mul\.Tensor produced NaN .* in MulBackward0 \({made}\) during the backward\(\) at "
                     rf"{HERE}:\d+ in test_a_nan_in_backward", str(info.value)), str(info.value)


def test_a_difference_from_the_cpu_names_the_users_line():
    def negate(t):
        return -t

    t = torch.tensor([[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0]]).to("tpu")  # a shape no other test uses
    with override(torch.ops.aten.neg.default, lambda ctx, x: jnp.abs(x)):  # wrong on purpose
        try:
            with tpu_runtime.set_eager_mode("debug", compare_cpu=True):
                with pytest.raises(ParityError, match=rf"aten\.neg\.default output 0 .* at {HERE}:"
                                                      rf"{_line(negate)} in negate$"):
                    negate(t)
        finally:
            tpu_runtime.clear_cache()
