"""Suite-wide checks of the test run itself."""

from __future__ import annotations

from importlib.metadata import version

import pytest
import torch
from packaging.version import Version


@pytest.fixture(autouse=True)
def _seeded_global_rng():
    """Every test starts from one global torch RNG state, so an unseeded ``torch.randn`` draws the same values
    whichever tests ran before it on its xdist worker: a tolerance a test's values only sometimes meet fails every
    run, not one run in forty (as ``test_a_frame_dynamo_skips_runs_the_runtimes_kernels_eagerly`` did)."""
    torch.manual_seed(0)
    yield


def pytest_configure(config: pytest.Config) -> None:
    """Refuse ``--dist loadgroup`` where it would not keep a group's tests on one worker.

    Grouped tests share one capture and compile per group (``tests/ops/test_ops.py``, the model families); spread
    over the workers, each worker repeats that work, silently. pytest 9.2 with pytest-xdist 3.8 does that
    (pytest-xdist#1386: xdist tags a grouped test by rewriting its node id, which pytest 9.2 ignores), and made
    the suite take twice the time of its test_ops file.
    """
    if getattr(config.option, "dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    if Version(version("pytest")) >= Version("9.2") and Version(version("pytest-xdist")) <= Version("3.8.0"):
        raise pytest.UsageError(f"--dist loadgroup does not group tests with pytest {version('pytest')} and "
                                f"pytest-xdist {version('pytest-xdist')} (pytest-xdist#1386): "
                                "pip install -e '.[test]' (it pins pytest<9.2)")
