"""In-place writes through the views of complex tensors (``.real``, ``.imag``, ``view_as_real``, ``conj()``) and
``view_as_complex``: they reach the base, as on the CPU."""

from __future__ import annotations

import pytest
import torch

import tpu_runtime

_WRITES = {
    "real.mul_": lambda c, f: c.real.mul_(2),
    "imag setitem": lambda c, f: c.imag.__setitem__((1, 2), 7.0),
    "slice.real.mul_": lambda c, f: c[1:3].real.mul_(2),
    "real.slice.add_": lambda c, f: c.real[:, 1:].add_(1),
    "t().imag.fill_": lambda c, f: c.t().imag.fill_(0.5),
    "view_as_real zero_": lambda c, f: torch.view_as_real(c)[..., 1].zero_(),
    "conj().imag.add_": lambda c, f: c.conj().imag.add_(1),
    "row real copy_": lambda c, f: c[0].real.copy_(torch.ones(3, device=c.device)),
    "view_as_complex mul_": lambda c, f: torch.view_as_complex(f).mul_(1j),
    "view_as_complex slice fill_": lambda c, f: torch.view_as_complex(f)[2:].fill_(3 + 1j),
}


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_writes_through_complex_views_reach_the_base(mode):
    torch.manual_seed(0)
    c0, f0 = torch.complex(torch.randn(4, 3), torch.randn(4, 3)), torch.randn(4, 3, 2)
    with tpu_runtime.set_eager_mode(mode):
        for name, write in _WRITES.items():
            c, f = c0.clone(), f0.clone()
            write(c, f)
            ct, ft = c0.to("tpu"), f0.to("tpu")
            write(ct, ft)
            torch.testing.assert_close(ct.cpu(), c, msg=name)
            torch.testing.assert_close(ft.cpu(), f, msg=name)
