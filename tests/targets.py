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


def image_and_line(image: tuple[int, int], line: tuple[int, int]) -> tuple:
    """``dynamic_shapes`` of a model of ``(image [N, 3, H, W], line [N, 4, L])`` (:data:`IMAGE_AND_LINE`): H and W
    dynamic from ``image[0]`` to ``image[1]``, L from ``line[0]`` to ``line[1]``."""
    from torch.export import Dim

    h, w = Dim("H", min=image[0], max=image[1]), Dim("W", min=image[0], max=image[1])
    return {2: h, 3: w}, {2: Dim("L", min=line[0], max=line[1])}


def assert_image_and_line_match(art, model, sizes, rtol: float, atol: float) -> None:
    """``art`` (a conversion of ``model``, see :func:`image_and_line`) equals ``model`` on random inputs of each
    ``(H, W, L)`` of ``sizes``."""
    import numpy as np
    import torch

    for h, w, n in sizes:
        g = torch.Generator().manual_seed(h * w * n)
        image, line = torch.randn(2, 3, h, w, generator=g), torch.randn(2, 4, n, generator=g)
        with torch.no_grad():
            want = model(image, line)
        for got, expected in zip(art(image, line), want, strict=True):
            torch.testing.assert_close(torch.as_tensor(np.asarray(got)), expected, rtol=rtol, atol=atol)


def image_and_line_sample() -> tuple:
    """The sample inputs of an :func:`image_and_line` model: an 8×10 image and a 12-long line, batch 2."""
    import torch

    return torch.randn(2, 3, 8, 10), torch.randn(2, 4, 12)
