"""Several targets from one capture: checking one target of a validation run, and captures a test's targets share."""

from __future__ import annotations

import functools
from typing import Callable

from converter.api import capture_program

#: The targets of ``converter.api.TARGETS``, in the order the tests list them.
ALL = ("tpu", "stablehlo", "onnx", "litert")


def assert_target_passed(report, target: str) -> None:
    """``target`` matched PyTorch, and every other target of ``report`` it was compared with."""
    result = report.target(target)
    failed = [(c.input_index, c.error.name, c.error.detail) for c in result.comparisons if not c.error.passed]
    assert result.passed, (result.status, result.message, failed)
    cross = [(c.reference, c.target, c.error.name) for c in report.cross
             if target in (c.reference, c.target) and not c.error.passed]
    assert not cross, cross


def one_capture(make: Callable[..., tuple]) -> Callable:
    """Decorator: ``make(*key)`` returns ``(model, args)`` or ``(model, args, dynamic_shapes)``; the decorated
    function returns their ``capture_program`` result, captured once per key on this worker, which
    ``converter.api.build`` turns into each target's artifact (torch.export is most of a small export's time).
    A test module using it keeps its tests on one worker (an ``xdist_group`` mark)."""

    @functools.cache
    def program(*key):
        model, args, *dynamic = make(*key)
        return capture_program(model, args, dynamic_shapes=dynamic[0] if dynamic else None)

    return functools.wraps(make)(program)
