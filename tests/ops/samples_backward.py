"""OpInfo samples: backward ops (AOTAutograd / eager autograd), FFTs, grid sampling, pdist.

Backward ops are called directly (``torch.ops.aten.<op>``), which torch.export keeps;
saved tensors a real backward would get (max-pool indices) are computed by the sample
builder with PyTorch. Outputs masked off by ``output_mask`` are undefined in torch, so
the test functions return only the computed ones. Complex results are compared
through ``torch.view_as_real``. Ops torch.export decomposes even when called
directly (native_layer_norm_backward, native_group_norm_backward,
embedding_dense_backward, col2im) and the symbolic size queries are tested on
make_fx graphs in test_backward_graphs.py.
"""

import torch
import torch.nn.functional as F

from tests.ops.op_db import OpInfo, Sample, make

aten = torch.ops.aten

F32, F64, BF16 = torch.float32, torch.float64, torch.bfloat16
BF16_TOL = {F32: (1e-4, 1e-4), BF16: (3e-2, 5e-2)}


def _computed(results, mask):
    return tuple(r for r, m in zip(results, mask) if m)


# ----------------------------------------------------------------------------- convolution
def _conv_backward(g, x, w, bias_sizes, stride, padding, dilation, transposed, output_padding, groups, mask):
    return _computed(aten.convolution_backward(g, x, w, bias_sizes, stride, padding, dilation, transposed,
                                               output_padding, groups, mask), mask)


def _conv_sample(dt, x_shape, w_shape, bias, stride, padding, dilation, transposed, output_padding, groups, mask,
                 name):
    x, w = make(x_shape, dt), make(w_shape, dt, seed=1)
    fwd = aten.convolution(x.float(), w.float(), None, stride, padding, dilation, transposed, output_padding, groups)
    g = make(tuple(fwd.shape), dt, seed=2)
    return Sample((g, x, w, bias, stride, padding, dilation, transposed, output_padding, groups, mask), name=name)


def _conv_samples(dt):
    return [
        _conv_sample(dt, (2, 3, 6, 5), (4, 3, 3, 2), [4], [1, 2], [1, 0], [1, 1], False, [0, 0], 1,
                     [True, True, True], "2d"),
        _conv_sample(dt, (2, 4, 9), (6, 2, 3), None, [2], [1], [2], False, [0], 2, [True, True, False],
                     "1d_grouped_dilated"),
        _conv_sample(dt, (1, 4, 4, 3), (4, 3, 3, 2), [6], [2, 3], [1, 0], [1, 1], True, [1, 2], 2,
                     [True, True, True], "2d_transposed"),
        _conv_sample(dt, (1, 2, 4, 3, 3), (3, 2, 2, 2, 2), None, [1, 1, 1], [1, 0, 1], [1, 1, 1], False, [0, 0, 0],
                     1, [False, True, False], "3d_weight_only"),
    ]


# ----------------------------------------------------------------------------- pooling
def _max_pool_backward(g, x, idx, kernel, stride, padding, dilation, ceil_mode):
    op = aten.max_pool3d_with_indices_backward if x.dim() == 5 else aten.max_pool2d_with_indices_backward
    return op(g, x, kernel, stride, padding, dilation, ceil_mode, idx)


def _fractional_backward(g, x, idx, kernel, size):
    op = aten.fractional_max_pool3d_backward if x.dim() == 5 else aten.fractional_max_pool2d_backward
    return op(g, x, kernel, size, idx)


def _fractional_backward_sample(dt, shape, kernel, size, name):
    x = make(shape, dt)
    samples = torch.rand(shape[:2] + (len(kernel),), generator=torch.Generator().manual_seed(1)).to(dt)
    op = aten.fractional_max_pool3d if len(kernel) == 3 else aten.fractional_max_pool2d
    _, idx = op(x, kernel, size, samples)
    return Sample((make(idx.shape, dt, seed=2), x, idx, kernel, size), name=name)


def _max_pool_sample(dt, shape, kernel, stride, padding, dilation, ceil_mode, name):
    x = make(shape, dt)
    pool = F.max_pool3d if len(kernel) == 3 else F.max_pool2d
    y, idx = pool(x, kernel, stride, padding, dilation, ceil_mode=ceil_mode, return_indices=True)
    return Sample((make(tuple(y.shape), dt, seed=3), x, idx, kernel, stride, padding, dilation, ceil_mode),
                  name=name)


def _max_pool_samples(dt):
    return [
        _max_pool_sample(dt, (2, 3, 7, 6), [3, 3], [2, 2], [1, 1], [1, 1], True, "2d_ceil_pad"),
        _max_pool_sample(dt, (3, 5, 5), [2, 2], [1, 1], [0, 0], [1, 1], False, "2d_overlap_unbatched"),
        _max_pool_sample(dt, (1, 2, 7, 7), [2, 3], [2, 1], [1, 0], [2, 2], False, "2d_dilated"),
        _max_pool_sample(dt, (1, 2, 4, 5, 4), [2, 2, 2], [2, 2, 2], [1, 0, 0], [1, 1, 1], True, "3d"),
    ]


def _adaptive_max_backward(g, x, idx):
    op = aten.adaptive_max_pool3d_backward if x.dim() == 5 else aten.adaptive_max_pool2d_backward
    return op(g, x, idx)


def _adaptive_max_sample(dt, shape, size, name):
    x = make(shape, dt)
    pool = F.adaptive_max_pool3d if len(size) == 3 else F.adaptive_max_pool2d
    y, idx = pool(x, size, return_indices=True)
    return Sample((make(tuple(y.shape), dt, seed=3), x, idx), name=name)


def _avg_pool_backward(g, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override):
    op = aten.avg_pool3d_backward if len(kernel) == 3 else aten.avg_pool2d_backward
    return op(g, x, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)


def _avg_pool_sample(dt, shape, kernel, stride, padding, ceil_mode, count_include_pad, divisor_override, name):
    x = make(shape, dt)
    pool = F.avg_pool3d if len(kernel) == 3 else F.avg_pool2d
    y = pool(x.float(), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override)
    return Sample((make(tuple(y.shape), dt, seed=3), x, kernel, stride, padding, ceil_mode, count_include_pad,
                   divisor_override), name=name)


def _avg_pool_samples(dt):
    return [
        _avg_pool_sample(dt, (2, 3, 7, 6), [3, 3], [2, 2], [1, 1], True, False, None, "2d_ceil_nopad"),
        _avg_pool_sample(dt, (3, 5, 5), [2, 3], [1, 2], [1, 1], False, True, 2, "2d_divisor_unbatched"),
        _avg_pool_sample(dt, (1, 2, 6, 6), [2, 2], [1, 1], [0, 0], False, True, None, "2d_overlap"),
    ]


def _adaptive_avg_backward(g, x):
    op = aten._adaptive_avg_pool3d_backward if x.dim() == 5 else aten._adaptive_avg_pool2d_backward
    return op(g, x)


def _adaptive_avg_sample(dt, shape, size, name):
    return Sample((make(tuple(shape[:len(shape) - len(size)]) + tuple(size), dt, seed=3), make(shape, dt)),
                  name=name)


def _upsample_nearest_backward(g, output_size, input_size, scales_h=None, scales_w=None):
    return aten.upsample_nearest2d_backward(g, output_size, input_size, scales_h, scales_w)


def _call_backward(name):
    """``aten.<name>`` called with the sample's arguments (a backward op has no functional wrapper)."""
    return lambda *args, **kwargs: getattr(aten, name)(*args, **kwargs)


#: multi-label targets: labels up to the first -1 (none at all in the last row), and which classes they mark
_LABELS = torch.tensor([[3, 0, -1, 1], [1, 2, 3, 0], [-1, 0, 0, 0]])
_IS_TARGET = torch.tensor([[1.0, 0, 0, 1], [1, 1, 1, 1], [0, 0, 0, 0]])


def _resize_backward_info(name, dims, linear, dtypes=(F32, BF16)):
    """Samples of one resize backward op over ``dims`` spatial dims: upsampling by a non-integer
    factor, by given scales, and downsampling (plus align_corners for the (bi)linear/cubic ones)."""
    def samples(dt):
        ins = [2, 3, 4][:dims]
        outs = [5, 7, 6][:dims]
        flag = [False] if linear else []
        scale_names = ["scales"] if dims == 1 else ["scales_d", "scales_h", "scales_w"][3 - dims:]
        out = [Sample((make((1, 2, *outs), dt), outs, [1, 2, *ins], *flag), name="up"),
               Sample((make((2, 1, *[2 * i for i in ins]), dt), [2 * i for i in ins], [2, 1, *ins], *flag),
                      dict(zip(scale_names, [2.0] * dims)), name="scales"),
               Sample((make((1, 1, *[1] * dims), dt), [1] * dims, [1, 1, *ins], *flag), name="down")]
        if linear:
            out.append(Sample((make((1, 2, *outs), dt), outs, [1, 2, *ins], True), name="align_corners"))
        return out

    return OpInfo(name, _call_backward(name), (getattr(aten, name).default,), samples, dtypes=dtypes,
                  tol=BF16_TOL)


def _weight_norm_backward_samples(dt):
    """``_weight_norm_interface_backward`` on torch's own forward results: dim 0 (nn.utils weight_norm's
    default), the last dim, a 1-d weight."""
    out = []
    for shape, dim in (((4, 3, 2), 0), ((4, 3, 2), 2), ((5,), 0)):
        v = make(shape, dt)
        g = make(tuple(s if i == dim else 1 for i, s in enumerate(shape)), dt)
        w, norms = aten._weight_norm_interface(v, g, dim)
        out.append(Sample((make(w.shape, dt), v, g, norms, dim), name=f"dim{dim}_{len(shape)}d"))
    return out


def _cdist_backward(g, x1, x2, p):
    return aten._cdist_backward(g, x1, x2, p, torch.cdist(x1, x2, p))


def _cdist_samples(dt):
    x1, x2 = make((2, 4, 3), dt, seed=1), make((2, 5, 3), dt, seed=2)
    x2[0, 1] = x1[0, 2]  # a zero distance
    g = make((2, 4, 5), dt, seed=3)
    return [Sample((g, x1, x2, p), name=f"p{p}") for p in (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, float("inf"))]



def _sdpa_cpu_backward(g, q, k, v, out, lse, causal, mask=None, scale=None):
    return aten._scaled_dot_product_flash_attention_for_cpu_backward(g, q, k, v, out, lse, 0.0, causal,
                                                                      attn_mask=mask, scale=scale)


def _sdpa_cpu_backward_samples(dt):
    samples = []
    for causal, mask, scale, name in ((True, None, None, "causal"), (False, "float", 0.3, "float_mask_scale"),
                                      (False, None, None, "plain")):
        q, k, v = (make((2, 3, 5, 4), dt, seed=i) for i in range(3))
        m = make((2, 1, 5, 5), dt, seed=4) if mask else None
        out, lse = aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, causal, attn_mask=m, scale=scale)
        samples.append(Sample((make((2, 3, 5, 4), dt, seed=5), q, k, v, out, lse, causal, m, scale), name=name))
    return samples

POOL = [
    OpInfo("convolution_backward", _conv_backward, (aten.convolution_backward.default,), _conv_samples,
           dtypes=(F32, BF16), tol={F32: (1e-4, 1e-4), BF16: (3e-2, 1e-1)}),
    OpInfo("fractional_max_pool_backward", _fractional_backward,
           (aten.fractional_max_pool2d_backward.default, aten.fractional_max_pool3d_backward.default),
           lambda dt: [_fractional_backward_sample(dt, (2, 3, 9, 11), (2, 3), (4, 5), "2d"),
                       _fractional_backward_sample(dt, (1, 2, 6, 7, 8), (2, 2, 3), (3, 4, 3), "3d")]),
    OpInfo("max_pool_backward", _max_pool_backward,
           (aten.max_pool2d_with_indices_backward.default, aten.max_pool3d_with_indices_backward.default),
           _max_pool_samples, dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("adaptive_max_pool_backward", _adaptive_max_backward,
           (aten.adaptive_max_pool2d_backward.default, aten.adaptive_max_pool3d_backward.default),
           lambda dt: [_adaptive_max_sample(dt, (2, 3, 7, 8), (3, 5), "2d_nondivisible"),
                       _adaptive_max_sample(dt, (3, 6, 4), (4, 3), "2d_overlap_unbatched"),
                       _adaptive_max_sample(dt, (1, 2, 5, 4, 6), (2, 3, 4), "3d")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("avg_pool2d_backward", _avg_pool_backward, (aten.avg_pool2d_backward.default,), _avg_pool_samples,
           dtypes=(F32, BF16), tol=BF16_TOL),
    # float32 only: torch has no bfloat16 avg_pool3d_backward on CPU
    OpInfo("avg_pool3d_backward", _avg_pool_backward, (aten.avg_pool3d_backward.default,),
           lambda dt: [_avg_pool_sample(dt, (1, 2, 4, 5, 3), [3, 2, 2], [2, 2, 1], [1, 1, 0], False, False, None,
                                        "nopad"),
                       _avg_pool_sample(dt, (2, 4, 4, 4), [2, 2, 2], [1, 2, 2], [1, 1, 0], True, True, 3,
                                        "ceil_divisor_unbatched")],
           tol={F32: (1e-4, 1e-4)}),
    OpInfo("adaptive_avg_pool_backward", _adaptive_avg_backward,
           (aten._adaptive_avg_pool2d_backward.default, aten._adaptive_avg_pool3d_backward.default),
           lambda dt: [_adaptive_avg_sample(dt, (2, 3, 7, 8), (3, 5), "2d_nondivisible"),
                       _adaptive_avg_sample(dt, (3, 6, 4), (3, 4), "2d_divisible_unbatched"),
                       _adaptive_avg_sample(dt, (1, 2, 5, 4, 6), (2, 3, 4), "3d")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("upsample_nearest2d_backward", _upsample_nearest_backward, (aten.upsample_nearest2d_backward.default,),
           lambda dt: [Sample((make((1, 2, 5, 7), dt), [5, 7], [1, 2, 2, 3]), name="nonint_scale"),
                       Sample((make((2, 1, 4, 6), dt), [4, 6], [2, 1, 2, 2]), {"scales_h": 2.0, "scales_w": 3.0},
                              name="scales"),
                       Sample((make((1, 1, 2, 2), dt), [2, 2], [1, 1, 3, 3]), name="downsample")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("upsample_bilinear2d_backward", _call_backward("upsample_bilinear2d_backward"),
           (aten.upsample_bilinear2d_backward.default,),
           lambda dt: [Sample((make((1, 2, 5, 7), dt), [5, 7], [1, 2, 2, 3], False), name="nonint_scale"),
                       Sample((make((2, 1, 4, 6), dt), [4, 6], [2, 1, 2, 2], True), name="align_corners"),
                       Sample((make((2, 1, 4, 6), dt), [4, 6], [2, 1, 2, 2], False),
                              {"scales_h": 2.0, "scales_w": 3.0}, name="scales"),
                       Sample((make((1, 1, 2, 2), dt), [2, 2], [1, 1, 3, 3], False), name="downsample")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("shrink_backward", lambda g, x, lambd, hard=False: (aten.hardshrink_backward if hard else
                                                                  aten.softshrink_backward)(g, x, lambd),
           (aten.softshrink_backward.default, aten.hardshrink_backward.default),
           lambda dt: [Sample((make((3, 4), dt), torch.tensor([[0.5, -0.5, 0.4, -0.6]] * 3, dtype=dt), 0.5)),
                       Sample((make((3, 4), dt), torch.tensor([[0.5, -0.5, 0.4, -0.6]] * 3, dtype=dt), 0.5),
                              {"hard": True}, name="hard")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("replication_pad_backward", _call_backward("replication_pad2d_backward"),
           (aten.replication_pad2d_backward.default,),
           lambda dt: [Sample((make((2, 3, 6, 7), dt), make((2, 3, 4, 4), dt), [1, 2, 0, 2])),
                       Sample((make((3, 7, 7), dt), make((3, 4, 4), dt), [2, 1, 3, 0]), name="unbatched")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("masked_scatter_backward", _call_backward("masked_scatter_backward"),
           (aten.masked_scatter_backward.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1) > 0, [4, 5])),
                       Sample((make((3, 4), dt), make((4,), dt, seed=2) > 0, [13]), name="broadcast_mask"),
                       Sample((make((2, 2), dt), torch.zeros(2, 2, dtype=torch.bool), [3]), name="no_true")],
           dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("replication_pad1d_backward", _call_backward("replication_pad1d_backward"),
           (aten.replication_pad1d_backward.default,),
           lambda dt: [Sample((make((2, 3, 8), dt), make((2, 3, 5), dt), [1, 2]))], dtypes=(F32, BF16), tol=BF16_TOL),
    OpInfo("replication_pad3d_backward", _call_backward("replication_pad3d_backward"),
           (aten.replication_pad3d_backward.default,),
           lambda dt: [Sample((make((1, 2, 4, 5, 6), dt), make((1, 2, 3, 3, 3), dt), [1, 2, 0, 2, 1, 0]))]),
    OpInfo("cdist_backward", _cdist_backward, (aten._cdist_backward.default,), _cdist_samples,
           tol={F32: (1e-4, 1e-5)}),
    OpInfo("multilabel_margin_loss_backward", _call_backward("multilabel_margin_loss_backward"),
           (aten.multilabel_margin_loss_backward.default,),
           lambda dt: [Sample((make((), dt), make((3, 4), dt), _LABELS, 1, _IS_TARGET), name="mean"),
                       Sample((make((3,), dt), make((3, 4), dt), _LABELS, 0, _IS_TARGET), name="none"),
                       Sample((make((), dt), make((4,), dt), _LABELS[0], 2, _IS_TARGET[0]), name="1d_sum")],
           tol={F32: (1e-5, 1e-5)}),
    OpInfo("multi_margin_loss_backward", _call_backward("multi_margin_loss_backward"),
           (aten.multi_margin_loss_backward.default,),
           lambda dt: [Sample((make((), dt), make((4, 5), dt), torch.tensor([1, 0, 4, 2]), 1, 1.0), name="mean"),
                       Sample((make((4,), dt), make((4, 5), dt), torch.tensor([1, 0, 4, 2]), 2, 0.5,
                               torch.rand(5) + 0.5, 0), name="p2_weight_none"),
                       Sample((make((), dt), make((5,), dt), torch.tensor(3), 1, 1.0, None, 2), name="1d_sum"),
                       Sample((make((), dt), make((), dt), torch.tensor(0), 1, 1.0, None, 0), name="0d_none")],
           tol={F32: (1e-5, 1e-5)}),
    OpInfo("weight_norm_interface_backward", _call_backward("_weight_norm_interface_backward"),
           (aten._weight_norm_interface_backward.default,), _weight_norm_backward_samples,
           dtypes=(F32, BF16), tol=BF16_TOL),
    _resize_backward_info("upsample_bicubic2d_backward", 2, linear=True),
    _resize_backward_info("_upsample_bilinear2d_aa_backward", 2, linear=True, dtypes=(F32,)),  # no CPU bf16
    _resize_backward_info("_upsample_bicubic2d_aa_backward", 2, linear=True, dtypes=(F32,)),
    _resize_backward_info("upsample_linear1d_backward", 1, linear=True),
    _resize_backward_info("upsample_trilinear3d_backward", 3, linear=True),
    _resize_backward_info("upsample_nearest1d_backward", 1, linear=False),
    _resize_backward_info("upsample_nearest3d_backward", 3, linear=False),
    _resize_backward_info("_upsample_nearest_exact1d_backward", 1, linear=False),
    _resize_backward_info("_upsample_nearest_exact2d_backward", 2, linear=False),
    _resize_backward_info("_upsample_nearest_exact3d_backward", 3, linear=False),
]


# ----------------------------------------------------------------------------- FFT
def _complex(shape, seed=0):
    return torch.complex(make(shape, seed=seed), make(shape, seed=seed + 1))


def _rfft(x, kind, **kw):
    return torch.view_as_real(getattr(torch.fft, kind)(x, **kw))


def _irfft(x, kind, **kw):
    return getattr(torch.fft, kind)(x, **kw)


def _cfft(x, kind, **kw):
    return torch.view_as_real(getattr(torch.fft, kind)(torch.view_as_complex(x), **kw))


FFT_TOL = {F32: (1e-5, 1e-4)}

SPECTRAL = [
    OpInfo("fft_r2c", _rfft, (aten._fft_r2c.default, aten.view_as_real.default),
           lambda dt: [Sample((make((3, 8), dt), "rfft")),
                       Sample((make((2, 6, 5), dt), "rfft2"), {"norm": "ortho"}, name="2d_ortho_odd"),
                       Sample((make((3, 7), dt), "fft"), {"norm": "forward", "dim": 0}, name="full_forward_dim0"),
                       Sample((make((2, 3, 4, 2), dt), "rfftn"), {"dim": (3, 0, 1, 2)}, name="4d")],
           tol=FFT_TOL),
    OpInfo("fft_c2r", _irfft, (aten._fft_c2r.default,),
           lambda dt: [Sample((_complex((3, 5)), "irfft")),
                       Sample((_complex((3, 5)), "irfft"), {"n": 9, "norm": "forward"}, name="odd_n_forward"),
                       Sample((_complex((2, 4, 6, 5)), "irfftn"), {"s": (4, 6, 9), "norm": "ortho"},
                              name="3d_ortho"),
                       Sample((_complex((2, 3, 4, 3)), "irfftn"), {"dim": (0, 1, 2, 3)}, name="4d")],
           tol=FFT_TOL),
    OpInfo("complex", lambda a, b: torch.view_as_real(torch.complex(a, b)), (aten.complex.default,),
           lambda dt: [Sample((make((3, 4), dt), make((3, 4), dt, seed=1))),
                       Sample((make((3, 1), dt), make((4,), dt, seed=1)), name="broadcast")], tol=FFT_TOL),
    OpInfo("polar", lambda a, b: torch.view_as_real(torch.polar(a, b)), (aten.polar.default,),
           lambda dt: [Sample((make((3, 4), dt, low=0), make((3, 4), dt, seed=1))),
                       Sample((make((2, 1), dt, low=0), make((2, 3), dt, seed=1)), name="broadcast")],
           tol=FFT_TOL),
    OpInfo("angle", lambda x, real=False: torch.angle(x if real else torch.view_as_complex(x)),
           (aten.angle.default,),
           lambda dt: [Sample((make((3, 4, 2), dt),), name="complex"),
                       Sample((torch.tensor([-2.0, 0.0, 3.0, float("nan"), -0.5]).to(dt),), {"real": True},
                              name="real_nan"),
                       Sample((torch.tensor([-3, 0, 2]),), {"real": True}, name="int")], dtypes=(F32, F64), tol=FFT_TOL),
    OpInfo("conj", lambda x, physical=False: torch.view_as_real(
               (torch.conj_physical if physical else lambda z: torch.conj(z).clone())(torch.view_as_complex(x))),
           (aten._conj.default, aten._conj_physical.default),
           lambda dt: [Sample((make((3, 4, 2), dt),), name="lazy"),
                       Sample((make((3, 4, 2), dt),), {"physical": True}, name="physical")], tol=FFT_TOL),
    OpInfo("neg_view", lambda x: torch._neg_view(x).clone(), (aten._neg_view.default,),
           lambda dt: [Sample((make((3, 4), dt),))], dtypes=(F32, F64)),
    OpInfo("fft_c2c", _cfft, (aten._fft_c2c.default, aten.view_as_complex.default),
           lambda dt: [Sample((make((3, 5, 2), dt), "fft")),
                       Sample((make((3, 5, 2), dt), "ifft"), {"dim": 0}, name="ifft_dim0"),
                       Sample((make((2, 3, 4, 2), dt), "fftn"), {"norm": "ortho"}, name="3d_ortho"),
                       Sample((make((2, 3, 2, 3, 2), dt), "ifftn"), {"dim": (0, 1, 2, 3), "norm": "forward"},
                              name="4d_inverse_forward")],
           dtypes=(F32, F64), tol=FFT_TOL),  # float64 pairs: complex128
]


# ----------------------------------------------------------------------------- sampling
_MODES = {"bilinear": 0, "nearest": 1, "bicubic": 2}
_PADS = {"zeros": 0, "border": 1, "reflection": 2}


def _grid(shape, dt, spread=1.0, seed=5):
    return make(shape, dt, low=-spread, high=spread, seed=seed)


def _grid_sample(x, grid, mode, padding_mode, align_corners):
    return F.grid_sample(x, grid, mode=mode, padding_mode=padding_mode, align_corners=align_corners)


def _grid_backward(g, x, grid, mode, padding_mode, align_corners, mask):
    return _computed(aten.grid_sampler_2d_backward(g, x, grid, _MODES[mode], _PADS[padding_mode], align_corners,
                                                   mask), mask)


def _grid_backward_3d(g, x, grid, mode, padding_mode, align_corners, mask):
    return _computed(aten.grid_sampler_3d_backward(g, x, grid, _MODES[mode], _PADS[padding_mode], align_corners,
                                                   mask), mask)


def _grid_samples_3d(dt):
    """A volume sampled trilinearly / by nearest neighbour, every padding mode."""
    return [Sample((make((2, 2, 3, 4, 5), dt), _grid((2, 3, 4, 3, 3), dt, 1.4), "bilinear", "zeros", False),
                   name="trilinear_zeros"),
            Sample((make((1, 2, 4, 3, 3), dt), _grid((1, 2, 3, 2, 3), dt, 1.4), "nearest", "border", True),
                   name="nearest_border_align"),
            Sample((make((1, 1, 3, 4, 5), dt), _grid((1, 4, 2, 2, 3), dt, 2.5), "bilinear", "reflection", False),
                   name="trilinear_reflection")]


def _grid_samples(dt):
    samples = [Sample((make((2, 3, 5, 6), dt), _grid((2, 4, 7, 2), dt, 1.4), "bilinear", "zeros", False),
                      name="bilinear_zeros"),
               Sample((make((1, 2, 4, 4), dt), _grid((1, 3, 5, 2), dt, 1.4), "nearest", "border", True),
                      name="nearest_border_align"),
               Sample((make((2, 2, 5, 4), dt), _grid((2, 3, 3, 2), dt, 1.8), "bicubic", "reflection", False),
                      name="bicubic_reflection"),
               Sample((make((1, 3, 4, 5), dt), _grid((1, 6, 2, 2), dt, 2.5), "bilinear", "reflection", True),
                      name="bilinear_reflection_align")]
    # torch computes bfloat16 grid coordinates in bfloat16 (we use float32): the bicubic
    # taps then land on other pixels, so bicubic is compared in float32 only
    return samples if dt == F32 else [s for s in samples if s.args[2] != "bicubic"]


def _grid_backward_samples(dt):
    return [Sample((make((2, 3, 4, 7), dt), make((2, 3, 5, 6), dt), _grid((2, 4, 7, 2), dt, 1.4), "bilinear",
                    "zeros", False, [True, True]), name="bilinear_zeros"),
            Sample((make((1, 2, 3, 3), dt), make((1, 2, 4, 4), dt), _grid((1, 3, 3, 2), dt, 1.8), "bilinear",
                    "reflection", True, [False, True]), name="reflection_grid_only"),
            Sample((make((2, 2, 3, 3), dt), make((2, 2, 5, 4), dt), _grid((2, 3, 3, 2), dt, 1.2), "bicubic",
                    "border", False, [True, True]), name="bicubic_border"),
            Sample((make((1, 2, 3, 5), dt), make((1, 2, 4, 4), dt), _grid((1, 3, 5, 2), dt, 1.4), "nearest",
                    "zeros", True, [True, False]), name="nearest_input_only")]


def _grid_backward_samples_3d(dt):
    return [Sample((make((2, 2, 3, 4, 3), dt, seed=9), make((2, 2, 3, 4, 5), dt), _grid((2, 3, 4, 3, 3), dt, 1.4),
                    "bilinear", "zeros", False, [True, True]), name="trilinear_both"),
            Sample((make((1, 2, 2, 3, 2), dt, seed=9), make((1, 2, 3, 4, 3), dt), _grid((1, 2, 3, 2, 3), dt, 1.8),
                    "bilinear", "reflection", True, [False, True]), name="reflection_grid_only"),
            Sample((make((1, 1, 2, 2, 3), dt, seed=9), make((1, 1, 3, 3, 3), dt), _grid((1, 2, 2, 3, 3), dt, 1.2),
                    "nearest", "border", False, [True, False]), name="nearest_input_only")]


def _pdist(x, p=2.0):
    return torch.pdist(x, p)


def _pdist_backward(g, x, p):
    return aten._pdist_backward(g, x, p, torch.pdist(x, p))


def _pdist_backward_sample(dt, x, p, name):
    n = x.shape[0]
    return Sample((make((n * (n - 1) // 2,), dt, seed=4), x, p), name=name)


def _pdist_backward_samples(dt):
    dup = make((4, 3), dt)
    dup[2] = dup[0]  # a zero distance: torch's gradient is 0 there
    return [_pdist_backward_sample(dt, dup, 2.0, "p2_duplicate_rows"),
            _pdist_backward_sample(dt, make((4, 3), dt).round(), float("inf"), "pinf_ties"),
            _pdist_backward_sample(dt, make((5, 2), dt).round(), 0.5, "p_half_zero_diffs"),
            _pdist_backward_sample(dt, make((4, 3), dt), 3.0, "p3")]


SAMPLING = [
    OpInfo("grid_sampler_2d", _grid_sample, (aten.grid_sampler_2d.default,), _grid_samples,
           dtypes=(F32, BF16), tol={F32: (1e-4, 1e-4), BF16: (3e-2, 1e-1)}),
    # float32 only: torch's bfloat16 kernel computes coordinates and the grid gradient in
    # bfloat16, which differs from our float32 math by far more than bfloat16 tolerances
    OpInfo("grid_sampler_2d_backward", _grid_backward, (aten.grid_sampler_2d_backward.default,),
           _grid_backward_samples, tol={F32: (1e-4, 1e-4)}),
    OpInfo("grid_sampler_3d", _grid_sample, (aten.grid_sampler_3d.default,), _grid_samples_3d,
           tol={F32: (1e-4, 1e-4)}),
    OpInfo("grid_sampler_3d_backward", _grid_backward_3d, (aten.grid_sampler_3d_backward.default,),
           _grid_backward_samples_3d, tol={F32: (1e-4, 1e-4)}),
    OpInfo("pdist", _pdist, (aten._pdist_forward.default,),
           lambda dt: [Sample((make((5, 3), dt),)),
                       Sample((make((4, 3), dt).round(),), {"p": 0.0}, name="p0"),
                       Sample((make((4, 2), dt),), {"p": float("inf")}, name="pinf"),
                       Sample((make((1, 3), dt),), {"p": 3.0}, name="one_row_empty")],
           tol={F32: (1e-5, 1e-5)}),
    OpInfo("sdpa_for_cpu_backward", _sdpa_cpu_backward,
           (aten._scaled_dot_product_flash_attention_for_cpu_backward.default,), _sdpa_cpu_backward_samples,
           tol={F32: (1e-4, 1e-5)}),
    OpInfo("pdist_backward", _pdist_backward, (aten._pdist_backward.default,), _pdist_backward_samples,
           tol={F32: (1e-5, 1e-5)}),
]

OPS = POOL + SPECTRAL + SAMPLING
