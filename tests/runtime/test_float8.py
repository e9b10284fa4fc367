"""float8 tensors on the tpu device and in exported programs: conversions and ``torch._scaled_mm``, against CPU."""

import pytest
import torch

import tpu_runtime
from converter import convert
from converter.errors import UnsupportedOpError
from validators import validate

FLOAT8 = [torch.float8_e4m3fn, torch.float8_e5m2, torch.float8_e4m3fnuz, torch.float8_e5m2fnuz]
#: rounding ties, the largest finite values and past them, infinities, NaN, subnormals
_EDGES = torch.tensor([0.0, -0.0, 1.0, 448.0, 449.0, 464.0, 470.0, 480.0, 1e4, -1e4, 57344.0, 60000.0, 61440.0,
                       1e6, float("inf"), -float("inf"), float("nan"), 1e-3, 2.0 ** -9, 2.0 ** -10, 3 * 2.0 ** -10,
                       0.1, 239.0, 240.0, 250.0])


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.dtype == b.dtype and torch.equal(a.float().nan_to_num(7.0), b.float().nan_to_num(7.0))


@pytest.mark.parametrize("dtype", FLOAT8)
def test_conversions_match_cpu(dtype):
    # float8_e4m3fn saturates at +-448 (also inf) in torch; XLA made NaN of what rounds past it
    for src in (torch.float32, torch.bfloat16, torch.float16, torch.float64, torch.int64):
        x = _EDGES.to(src) if src.is_floating_point else torch.tensor([0, 3, -17, 448, 470, 1000, -70000])
        want = x.to(dtype)
        got = x.to("tpu").to(dtype)
        assert _same(got.cpu(), want), (dtype, src)
        assert _same(got.to(torch.float32).cpu(), want.float())
        assert _same(want.to("tpu").cpu(), want)  # uploads and downloads keep the bits' values


def _operands(m: int, k: int, n: int, dtype=torch.float8_e4m3fn, seed: int = 0) -> tuple:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(n, k, generator=g).to(torch.float8_e4m3fn).T


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_scaled_mm_matches_cpu(mode):
    # tensorwise and rowwise scales, bias, float8 results (scale_result divides them), sizes CUDA refuses
    g = torch.Generator().manual_seed(1)
    s, s2 = torch.tensor(0.7), torch.tensor(1.3)
    cases = [
        (_operands(16, 32, 16), dict(scale_a=s, scale_b=s2, out_dtype=torch.float32)),
        (_operands(5, 7, 3), dict(scale_a=s, scale_b=s2, out_dtype=torch.float32)),
        (_operands(16, 32, 24), dict(scale_a=torch.rand(16, 1, generator=g) + 0.5,
                                     scale_b=torch.rand(1, 24, generator=g) + 0.5, out_dtype=torch.bfloat16)),
        (_operands(16, 32, 24), dict(scale_a=s, scale_b=s2, bias=torch.randn(24, generator=g).bfloat16(),
                                     out_dtype=torch.bfloat16)),
        (_operands(16, 32, 24), dict(scale_a=s, scale_b=s2)),
        (_operands(16, 32, 24), dict(scale_a=s, scale_b=s2, scale_result=torch.tensor(3.0),
                                     out_dtype=torch.float8_e4m3fn)),
        (_operands(16, 32, 24, torch.float8_e5m2), dict(scale_a=s, scale_b=s2, out_dtype=torch.float32)),
    ]
    with tpu_runtime.set_eager_mode(mode):
        for (a, b), kw in cases:
            want = torch._scaled_mm(a, b, **kw)
            tpu_kw = {k: v.to("tpu") if isinstance(v, torch.Tensor) else v for k, v in kw.items()}
            got = torch._scaled_mm(a.to("tpu"), b.to("tpu"), **tpu_kw).cpu()
            assert got.shape == want.shape and got.dtype == want.dtype, kw
            if want.dtype.itemsize == 1:
                # a float8 result: torch's CPU kernel rounds values next to a rounding midpoint its own way
                # (seen: exact 0.148408 below the midpoint 0.1484375, torch 0.15625, ours 0.140625), so
                # one float8 step apart, rarely
                torch.testing.assert_close(got.float(), want.float(), rtol=2 ** -3, atol=0)
                assert (got.float() != want.float()).float().mean() <= 0.01, kw
            else:
                torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-5)
    a, b = _operands(16, 32, 16)
    with pytest.raises(ValueError, match="Invalid scaling configuration"):  # (the CPU's refusal: it refuses it too)
        torch._scaled_mm(a.to("tpu"), b.to("tpu"), torch.ones(16, 2, device="tpu"), s2.to("tpu"),
                         out_dtype=torch.float32)


class _FakeQuant(torch.nn.Module):
    """Rounds through each float8 type and back (float8 simulation, as in quantization-aware training)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return sum(x.to(d).float() * (i + 1) for i, d in enumerate(FLOAT8[:2]))


def test_float8_round_trips_export_and_match_pytorch():
    # stablehlo and onnx (its Cast saturated float8 by default: 1e5 became 57344 instead of inf in e5m2);
    # LiteRT has no float8 type: an error naming the op and the user's line
    x = torch.randn(4, 8) * 300
    x[0, :6] = torch.tensor([float("inf"), -float("inf"), float("nan"), 1e5, 60000.0, 470.0])
    report = validate(_FakeQuant(), (x,), targets=("tpu", "stablehlo", "onnx"), num_random_inputs=0)
    assert report.passed, [(t.target, t.status, t.message) for t in report.targets]
    with pytest.raises(UnsupportedOpError, match=r"aten._to_copy.default .* at .*test_float8.py:\d+ in forward.*"
                                                 r"dtype float8_e4m3fn has no LiteRT type"):
        convert(_FakeQuant(), (x,), target="litert")


def test_debug_mode_compares_float8_ops_with_cpu():
    # its allclose had no float8 kernel; an op torch's CPU lacks for float8 (add) is counted, not compared
    from tpu_runtime.eager.debug import REPORT

    a, b = _operands(16, 32, 16)
    one = torch.tensor(1.0, device="tpu")
    with tpu_runtime.set_eager_mode("debug", check_inf=True, compare_cpu=True):
        x = torch.randn(16, 32).to("tpu").to(torch.float8_e4m3fn)
        torch._scaled_mm(x, b.to("tpu"), one, one, out_dtype=torch.float32)
        torch.cat([a.to("tpu"), x])
        x + x
        assert REPORT.findings == [] and REPORT.compared >= 3 and REPORT.uncompared == 1


@pytest.mark.parametrize("mode", ["strict", "fused"])
def test_functional_scaled_mm_tensorwise_and_rowwise_match_cpu(mode):
    # torch.nn.functional.scaled_mm is _scaled_mm_v2 (it had no row)
    import torch.nn.functional as F

    g = torch.Generator().manual_seed(3)
    a, b = _operands(16, 32, 24)
    S = F.ScalingType
    cases = [(torch.tensor(0.7), S.TensorWise, torch.tensor(1.3), S.TensorWise, torch.float32),
             (torch.rand(16, 1, generator=g) + 0.5, S.RowWise, torch.rand(1, 24, generator=g) + 0.5, S.RowWise,
              torch.bfloat16)]
    with tpu_runtime.set_eager_mode(mode):
        for sa, ra, sb, rb, dtype in cases:
            want = F.scaled_mm(a, b, sa, ra, sb, rb, output_dtype=dtype)
            got = F.scaled_mm(a.to("tpu"), b.to("tpu"), sa.to("tpu"), ra, sb.to("tpu"), rb, output_dtype=dtype).cpu()
            assert got.dtype == want.dtype
            torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-5)
        with pytest.raises(ValueError, match="Invalid scaling configuration"):  # (as the CPU refuses it)
            F.scaled_mm(a.to("tpu"), b.to("tpu"), torch.ones(16, 1).to("tpu"), S.BlockWise1x32,
                        torch.ones(1, 24).to("tpu"), S.RowWise).cpu()
