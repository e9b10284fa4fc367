"""Random numbers in an exported model (``torch.rand``, train-mode dropout). The program's seed is a constant: ONNX
and LiteRT refuse them by name (folding the draw crashed, and would bake one draw into the file); a StableHLO module
that draws takes a seed input, a fresh one per call (or ``seed=``), saved and reloaded alike."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from converter.api import convert
from converter.errors import UnsupportedOpError
from exporters.stablehlo import load


class _Noisy(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand(x.shape)


@pytest.mark.parametrize("target", ["onnx", "litert"])
def test_random_numbers_are_refused_by_name_not_baked_in(target):
    with pytest.raises(UnsupportedOpError, match=r"aten\.rand.*test_exporter_random\.py:\d+.*random numbers"):
        convert(_Noisy().eval(), (torch.randn(3),), target=target)


def test_a_stablehlo_module_that_draws_takes_a_seed_per_call(tmp_path):
    x = torch.zeros(64)
    art = convert(_Noisy().eval(), (x,), target="stablehlo")
    first, second = art(x), art(x)
    assert not torch.equal(first, second) and ((first >= 0) & (first < 1)).all()
    assert torch.equal(art(x, seed=7), art(x, seed=7))
    loaded = load(art.save(str(tmp_path / "noisy")))
    assert torch.equal(loaded(x, seed=7), art(x, seed=7))
    np.random.seed(3)
    once = loaded(x)
    np.random.seed(3)
    assert torch.equal(loaded(x), once)
    signature = json.loads((tmp_path / "noisy" / "signature.json").read_text())
    assert signature["random_seed"] is True and "seed: uint32[]" in signature["calling_convention"]
    plain = convert(torch.nn.Linear(3, 2).eval(), (torch.randn(1, 3),), target="stablehlo")
    assert plain.signature()["random_seed"] is False
