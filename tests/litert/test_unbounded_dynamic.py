"""A dynamic dim without an upper bound (torch's int_oo) exports and runs at other sizes."""

import torch

from converter import convert


def test_unbounded_dynamic_batch_exports_and_resizes():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()
    x = torch.randn(2, 4)
    art = convert(model, (x,), target="litert", dynamic_shapes=({0: torch.export.Dim("batch")},))
    for n in (2, 5):
        xn = torch.randn(n, 4)
        torch.testing.assert_close(art(xn), model(xn), rtol=1e-4, atol=1e-5)
