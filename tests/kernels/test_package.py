"""Package rules: kernels/ never imports torch; every public function is documented."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

import kernels
from kernels import dispatch

KERNELS_DIR = pathlib.Path(kernels.__file__).parent


@pytest.mark.parametrize("path", sorted(KERNELS_DIR.rglob("*.py")), ids=lambda p: p.name)
def test_no_torch_import(path):
    for node in ast.walk(ast.parse(path.read_text())):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        assert not any(n == "torch" or n.startswith("torch.") for n in names), path


@pytest.mark.parametrize("name", [n for n in kernels.__all__ if n != "dispatch"])
def test_public_functions_have_google_docstrings(name):
    doc = inspect.getdoc(getattr(kernels, name))
    assert doc and "Args:" in doc and "Returns:" in doc, name


@pytest.mark.parametrize("name", ["choose", "run", "backend", "choices"])
def test_dispatch_functions_are_documented(name):
    assert inspect.getdoc(getattr(dispatch, name)), name


def test_each_kernel_package_exports_kernel_and_reference():
    for name in dispatch.kernel_names():
        package = __import__(f"kernels.{name}", fromlist=["__all__"])
        assert name in package.__all__ and f"{name}_reference" in package.__all__
