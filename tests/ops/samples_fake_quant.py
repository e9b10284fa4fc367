"""OpInfo samples: fake quantization (quantization-aware training), per tensor and per channel, values and masks.

The samples hold ties of the rounding (``x / scale`` ending in .5: round half to even), values past the grid
(mask false), and NaN / ±inf (NaN clamps to ``quant_min``; the per-channel kernel takes ±inf there too)."""

import torch

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten
f32, f64, bf16, f16 = torch.float32, torch.float64, torch.bfloat16, torch.float16
NAN, INF = float("nan"), float("inf")


def _values(dt, shape=(4, 6)):
    """Random values spanning past an 8-bit grid of scale 0.1, with ties of the rounding in the first row."""
    x = make(shape, f32, low=-20, high=20)
    x[0] = torch.arange(shape[1]) * 0.1 + 0.05  # (x / 0.1 ends in .5: ties)
    return x.to(dt)


def _special(dt):
    return torch.tensor([[NAN, INF, -INF, 1e30, -0.0, 12.75]], dtype=dt).expand(4, 6).clone()


def _per_tensor(dt):
    return [Sample((_values(dt), 0.1, 0, -128, 127)), Sample((_values(dt), 0.05, 3, 0, 255), name="zero_point"),
            Sample((_special(dt), 0.1, -5, -128, 127), name="special"), Sample((make((0, 3), dt), 0.1, 0, 0, 15),
                                                                                name="empty")]


def _tensor_qparams(dt):
    def qp(scale, zero_point, on=1):
        return torch.tensor([scale]), torch.tensor([zero_point], dtype=torch.int32), torch.tensor([on])
    return [Sample((_values(dt), *qp(0.1, 0), -128, 127)), Sample((_values(dt), *qp(0.05, 3), 0, 255), name="zp"),
            Sample((_values(dt), *qp(0.1, 0, on=0), -128, 127), name="disabled"),
            Sample((_special(dt), *qp(0.1, 2), -128, 127), name="special")]


def _per_channel(dt):
    scale = torch.tensor([0.1, 0.2, 0.7, 0.01])
    zp = torch.tensor([0, -120, 100, -128], dtype=torch.int32)
    return [Sample((_values(dt), scale, zp, 0, -128, 127)),
            Sample((_values(dt).t().contiguous(), scale, zp, 1, -128, 127), name="axis1"),
            Sample((_values(dt), scale, zp.float() + 0.25, 0, -128, 127), name="float_zero_point"),
            Sample((_special(dt), scale, zp, 0, -128, 127), name="special")]


OPS = [
    OpInfo("fake_quantize_per_tensor", aten.fake_quantize_per_tensor_affine_cachemask.default,
           (aten.fake_quantize_per_tensor_affine_cachemask.default,), _per_tensor, dtypes=(f32, f64, bf16, f16),
           tol={d: (0, 0) for d in (f32, f64, bf16, f16)}),
    OpInfo("fake_quantize_per_tensor_tensor_qparams",
           aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,
           (aten._fake_quantize_per_tensor_affine_cachemask_tensor_qparams.default,), _tensor_qparams,
           dtypes=(f32, bf16), tol={d: (0, 0) for d in (f32, bf16)}),
    OpInfo("fake_quantize_per_channel", aten.fake_quantize_per_channel_affine_cachemask.default,
           (aten.fake_quantize_per_channel_affine_cachemask.default,), _per_channel, dtypes=(f32, f64, bf16),
           tol={d: (0, 0) for d in (f32, f64, bf16)}),
]
