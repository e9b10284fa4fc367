"""OpInfo samples: fake quantization (quantization-aware training), per tensor and per channel, values and masks.

The samples hold ties of the rounding (``x / scale`` ending in .5: round half to even), values past the grid
(mask false), and NaN / ±inf (NaN clamps to ``quant_min``; the per-channel kernel takes ±inf there too). The fused
observer of torch.ao's default QAT qconfigs runs with its observer and fake quantization on and off, on a fresh
observer (infinite running values) and a warm one, per tensor and per row, affine and symmetric."""

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


def _fused_observer(x, observer_on, fake_quant_on, running_min, running_max, scale, zero_point, *args):
    """``torch.fused_moving_avg_obs_fake_quant`` (``FusedMovingAvgObsFakeQuantize.forward``) on copies of the
    observer's state: the fake-quantized values and the state it leaves."""
    state = [t.clone() for t in (running_min, running_max, scale, zero_point)]
    return torch.fused_moving_avg_obs_fake_quant(x, observer_on, fake_quant_on, *state, *args), *state


def _observer_samples(dt):
    on, off = torch.tensor([1]), torch.tensor([0])
    one, zero = torch.tensor([1.0]), torch.tensor([0], dtype=torch.int32)
    fresh = (torch.tensor(INF), torch.tensor(-INF), one, zero)
    warm = (torch.tensor(-2.5), torch.tensor(7.25), torch.tensor([0.04]), torch.tensor([60], dtype=torch.int32))
    rows = (torch.tensor([-1.0, -3.0, 0.5, -0.25]), torch.tensor([2.0, -1.0, 4.0, 0.125]),
            torch.tensor([0.1, 0.2, 0.3, 0.4]), torch.tensor([0, 1, 2, 3], dtype=torch.int32))
    x = _values(dt)
    return [Sample((x, on, on, *fresh, 0.01, 0, 127, -1)),
            Sample((x, on, on, *warm, 0.01, 0, 255, -1), name="warm"),
            Sample((x, on, on, *warm, 0.1, -128, 127, -1, False, True), name="symmetric"),
            Sample((x, off, on, *warm, 0.01, 0, 255, -1), name="observer_off"),
            Sample((x, on, off, *warm, 0.01, 0, 255, -1), name="fake_quant_off"),
            Sample((x, on, on, *rows, 0.01, -128, 127, 0, True, True), name="per_row"),
            Sample((x.reshape(4, 3, 2), on, on, *rows, 0.5, 0, 15, 0, True, False), name="per_row_affine_3d"),
            Sample((_special(dt)[:, 1:], on, on, *warm, 0.01, 0, 255, -1), name="infinite")]


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
    OpInfo("fused_moving_avg_obs_fake_quant", _fused_observer,
           (aten._fused_moving_avg_obs_fq_helper_functional.default,), _observer_samples,
           tol={f32: (0, 0)}),
]
