"""View ops rebuilt from their recipe (tpu_runtime.view_cache) report what the dispatcher's route gives and stay
views: the same strides, offsets and values as on the CPU, and writes through them reach the base."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime
from tpu_runtime import view_cache

VIEWS = {
    "view": lambda t: t.view(6, 4),
    "t_of_slice": lambda t: t[:, 1].t(),
    "transpose": lambda t: t.transpose(0, 2),
    "permute_then_view": lambda t: t.permute(1, 0, 2).select(0, 1),
    "expand": lambda t: t[:, :1].expand(2, 3, 4),
    "split": lambda t: t.split(1, dim=1)[2],
    "unbind": lambda t: t.unbind(2)[3],
    "unsqueeze_squeeze": lambda t: t.unsqueeze(1).squeeze(1)[1:],
    "diagonal": lambda t: t.diagonal(0, 1, 2),
}


@pytest.mark.parametrize("name", list(VIEWS))
@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_a_view_taken_again_matches_the_cpu_and_writes_through(name, mode):
    fn = VIEWS[name]
    base = torch.arange(24.0).view(2, 3, 4)
    with tpu_runtime.set_eager_mode(mode):
        for _ in range(3):  # the first call takes the route; the others are rebuilt from its recipe
            x = base.to("tpu")
            got, want = fn(x), fn(base.clone())
            assert got.shape == want.shape and got.stride() == want.stride()
            assert got.storage_offset() == want.storage_offset() and got._base is x
            torch.testing.assert_close(got.cpu(), want)
        if name != "expand":  # (a write through an expanded view is refused, as on the CPU)
            got.mul_(-1)
            ref = base.clone()
            fn(ref).mul_(-1)
            torch.testing.assert_close(x.cpu(), ref)


def test_views_in_inference_mode_take_the_route():
    # a view made in inference mode of a normal tensor is a normal view; of an inference tensor, an inference view
    x = torch.randn(3, 4).to("tpu")
    x.t(), x.t()
    with torch.inference_mode():
        y = torch.randn(3, 4).to("tpu")
        assert y.t().is_inference() and not x.t().is_inference()
        assert y.detach().is_inference() and not x.detach().is_inference()
    assert y.t().is_inference() and not x.t().is_inference()
    assert y.detach().is_inference() and not x.detach().is_inference()


def test_recipes_are_remembered_for_plain_views_only():
    x = torch.randn(3, 4).to("tpu")
    x.view(4, 3)
    assert any(r[0] is torch.ops.aten.view.default for r in view_cache._RECIPES.values())
    before = len(view_cache._RECIPES)
    x.detach(), x.as_strided((2, 2), (1, 2))  # their own meanings: never a recipe
    x.view(torch.int32)  # a non-int argument (a dtype): the route every time
    assert len(view_cache._RECIPES) == before
