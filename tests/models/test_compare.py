"""The comparison helper used by the model tests."""

import math

import pytest
import torch

from tests.models.compare import assert_outputs_close, rel_error


def test_rel_error_is_max_abs_diff_over_max_abs_reference():
    assert rel_error(torch.tensor([1.0, 2.5]), torch.tensor([1.0, -2.0])) == pytest.approx(4.5 / 2.0)


def test_rel_error_floors_the_scale_and_matches_equal_infinities():
    assert rel_error(torch.tensor([1e-7]), torch.tensor([0.0])) == pytest.approx(0.1)
    assert rel_error(torch.tensor([math.inf, 1.0]), torch.tensor([math.inf, 1.0])) == 0.0
    assert rel_error(torch.tensor([math.nan]), torch.tensor([1.0])) == math.inf


def test_assert_outputs_close_checks_shape_dtype_and_exact_integers():
    a = (torch.ones(2, 3), torch.arange(3))
    assert_outputs_close(a, (torch.ones(2, 3) * (1 + 5e-5), torch.arange(3)))
    with pytest.raises(AssertionError, match="rel error"):
        assert_outputs_close(a, (torch.ones(2, 3) * 1.01, torch.arange(3)))
    with pytest.raises(AssertionError, match="values differ"):
        assert_outputs_close(a, (torch.ones(2, 3), torch.tensor([0, 1, 3])))
    with pytest.raises(AssertionError, match="dtype"):
        assert_outputs_close(a, (torch.ones(2, 3, dtype=torch.float64), torch.arange(3)))
    with pytest.raises(AssertionError, match="shape"):
        assert_outputs_close(a, (torch.ones(3, 2), torch.arange(3)))
