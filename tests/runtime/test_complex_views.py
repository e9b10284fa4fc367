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


def test_compiled_functions_return_lazy_conjugates_and_real_views_of_inputs_with_their_values():
    # AOTAutograd made a returned view of an input again from the input by as_strided of its reported layout:
    # that dropped the conjugate bit (a returned x.conj() was x) and put x[:, 1:].imag at other elements
    # (view_as_real's views report dense strides); x.conj().imag (a lazy negation) had no row. Returned copied
    x = torch.tensor([[1 + 2j, -3 + 0.5j, 4 - 1j], [0.5j, 2, -1 - 1j]])

    def f(t):
        return t.conj(), t[1:, 1:].conj(), t.conj().imag, t.conj() * 2, t[:, 1:].imag, t[1:].real, t.imag

    got = torch.compile(f, backend="tpu")(x.to("tpu"))
    for g, w in zip(got, f(x), strict=True):
        assert torch.equal(g.cpu(), w.resolve_conj().resolve_neg())
