"""jaxpr → TFLite rules on hand-written JAX functions (the converter's conventions):
every case is exported, run in the LiteRT Interpreter and compared with JAX."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from tests.litert.adapter import JaxProgram, composite
from tests.litert.conftest import check_program

R = np.random.default_rng(0)


def r(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def ints(*shape: int, lo: int = -10, hi: int = 10) -> np.ndarray:
    return R.integers(lo, hi, shape).astype(np.int64)


W, B, DW, GW, TW = r(8, 4, 3, 3), r(8), r(8, 1, 3, 3), r(8, 2, 3, 3), r(3, 3, 4, 6)
FCW, LW, LB = r(5, 4), r(3, 5), r(3)


def conv(x, w, stride=1, pad=1, groups=1, dil=1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2, rhs_dilation=(dil, dil),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups)


def pool(x, op, init, k, s, pad=0):
    return jax.lax.reduce_window(x, init, op, (1, 1, k, k), (1, 1, s, s), [(0, 0), (0, 0), (pad, pad), (pad, pad)])


gelu = composite("aten.gelu", lambda x, approximate="none": jax.nn.gelu(x, approximate=approximate == "tanh"), "self")
softmax = composite("aten._softmax", lambda x, dim=-1, half_to_float=False: jax.nn.softmax(x, axis=dim), "self")
log_softmax = composite("aten._log_softmax", lambda x, dim=-1, half_to_float=False: jax.nn.log_softmax(x, axis=dim),
                        "self")
linear = composite("aten.linear", lambda x, w, b: x @ w.T + b, "input,weight,bias")
layer_norm = composite(
    "aten.layer_norm",
    lambda x, w, b, normalized_shape=None, eps=1e-5: (x - x.mean(-1, keepdims=True))
    * jax.lax.rsqrt(x.var(-1, keepdims=True) + eps) * w + b, "input,weight,bias")
embedding = composite("aten.embedding", lambda w, i, padding_idx=-1: jnp.take(w, i, axis=0), "weight,indices")
hardswish = composite("aten.hardswish", lambda x: x * jnp.clip(x + 3, 0, 6) / 6, "self")


def _sdpa(q, k, v, is_causal=False, dropout_p=0.0):
    s = q @ jnp.swapaxes(k, -1, -2) / np.sqrt(q.shape[-1])
    if is_causal:
        s = jnp.where(jnp.tril(jnp.ones((q.shape[-2], k.shape[-2]), bool)), s, -jnp.inf)
    return jax.nn.softmax(s, axis=-1) @ v


sdpa = composite("aten.scaled_dot_product_attention", _sdpa, "query,key,value")


def _resize(mode, align):
    def body(x, output_size=None, align_corners=False):
        n, c, h, w = x.shape
        return jax.image.resize(x, (n, c) + tuple(int(s) for s in output_size), method=mode)
    return composite("aten.upsample_" + ("nearest2d" if mode == "nearest" else "bilinear2d"), body, "input")


CASES = {
    "arith": (lambda x, y: (x + y, x - y, x * y, x / y, x / 4.0, jnp.maximum(x, y), jnp.minimum(x, y), x ** 2,
                            x ** 3, 1 / (x * x + 1), jax.lax.rem(x, y)), [r(2, 3, 4), r(2, 3, 4)], None),
    "math": (lambda x: (jnp.exp(x), jnp.abs(x), -x, jnp.sqrt(jnp.abs(x)), jax.lax.rsqrt(jnp.abs(x) + 1),
                        jnp.floor(x), jnp.ceil(x), jnp.round(x * 3), jnp.sign(x), jnp.log(jnp.abs(x) + 1),
                        jax.nn.sigmoid(x), jnp.tanh(x), jnp.sin(x), jnp.cos(x), jnp.log1p(jnp.abs(x)),
                        jnp.expm1(x), jnp.exp2(x), jnp.tan(x * 0.5), jnp.isfinite(x / x)), [r(3, 5)], None),
    # (the largest floats below a half: floor(|x| + 0.5) rounds them up)
    "round": (lambda x: (jnp.round(x), jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO)),
              [np.array([[0.49999997, -0.49999997, 2.4999998, -2.5, 0.5, 1.5]], np.float32)], None),
    "erf": (lambda x: (jax.scipy.special.erf(x * 2), jax.nn.gelu(x, approximate=False), jax.lax.erfc(x)),
            [r(4, 5)], None),
    "compare_select": (lambda x, y: (jnp.where(x > y, x, y), x == y, x <= y, x != y, x >= 0.5,
                                     jnp.logical_and(x > 0, y > 0), jnp.logical_or(x > 0, y > 0),
                                     jnp.logical_xor(x > 0, y > 0), jnp.logical_not(x > 0)),
                       [r(2, 3), r(2, 3)], None),
    "clamp_relu": (lambda x: (jnp.clip(x, 0, 6), jnp.clip(x, -0.5, 0.5), jnp.maximum(x, 0.0),
                              jax.lax.clamp(np.float32(-1.0), x, np.float32(1.0))), [r(2, 8)], None),
    "int64": (lambda i, j: (i + j, i * j, i - j, i // (jnp.abs(j) + 1), i % (jnp.abs(j) + 1), jnp.maximum(i, j),
                            (i > j).astype(jnp.int64), i.astype(jnp.float32) * 2, jax.lax.div(i, jnp.abs(j) + 1),
                            jax.lax.rem(i, jnp.abs(j) + 1), jnp.abs(i), jnp.sign(i), ~i, -i),
              [ints(3, 4), ints(3, 4)], None),
    "matmul": (lambda x, y: (x @ y, jnp.einsum("bij,bkj->bik", x, x), jnp.einsum("bij,jk->bik", x, y[0])),
               [r(2, 3, 4), r(2, 4, 5)], {"BATCH_MATMUL": 3, "FULLY_CONNECTED": 0}),
    "fully_connected": (lambda x: (x @ FCW.T + 1.0, jnp.maximum(x @ FCW.T, 0.0)), [r(3, 4)],
                        {"FULLY_CONNECTED": 2, "ADD": 0, "RELU": 0}),
    "conv_bias_relu": (lambda x: jnp.maximum(conv(x, W) + B[None, :, None, None], 0.0), [r(1, 4, 8, 8)],
                       {"CONV_2D": 1, "ADD": 0, "RELU": 0, "TRANSPOSE": 2}),
    "conv_batchnorm": (lambda x: (conv(x, W) - B[None, :, None, None]) * (B * B + 0.5)[None, :, None, None] + 0.1,
                       [r(2, 4, 6, 6)], {"CONV_2D": 1, "SUB": 0, "MUL": 0, "ADD": 0}),
    "conv_stride_pad": (lambda x: (conv(x, W, stride=2, pad=1), conv(x, W, stride=2, pad=0), conv(x, W, pad=2, dil=2)),
                        [r(1, 4, 9, 9)], None),
    "depthwise_relu6": (lambda x: jnp.clip(conv(x, DW, groups=8) + B[None, :, None, None], 0, 6), [r(2, 8, 6, 6)],
                        {"DEPTHWISE_CONV_2D": 1, "MINIMUM": 0, "RELU": 0, "RELU6": 0}),
    "grouped_conv": (lambda x: conv(x, GW, groups=4), [r(1, 8, 6, 6)], {"SPLIT": 1, "CONV_2D": 4}),
    "transpose_conv": (lambda x: jax.lax.conv_transpose(x, TW, (2, 2), "SAME",
                                                        dimension_numbers=("NCHW", "HWIO", "NCHW")),
                       [r(1, 4, 5, 5)], {"TRANSPOSE_CONV": 1}),
    "transpose_conv_relu": (lambda x: jnp.maximum(jax.lax.conv_transpose(
        x, TW, (2, 2), "VALID", dimension_numbers=("NCHW", "HWIO", "NCHW")) + 0.5, 0.0), [r(1, 4, 5, 5)],
        {"TRANSPOSE_CONV": 1, "RELU": 0, "ADD": 0}),
    "scans": (lambda x: (jax.lax.cumprod(x, 1), jax.lax.cummax(x, 0), jax.lax.cummin(x, 1, reverse=True),
                         jax.lax.cumlogsumexp(x, 1), jnp.cumsum(x, 0)), [r(5, 6)], None),
    "interior_pad": (lambda x: (jax.lax.pad(x, np.float32(0), [(0, 0, 0), (1, 2, 1)]),
                                jax.lax.pad(x, np.float32(-1), [(2, -1, 2), (0, 0, 0)])), [r(3, 4)], None),
    "pools": (lambda x: (pool(x, jax.lax.max, -np.inf, 3, 2, 1), pool(x, jax.lax.add, np.float32(0), 2, 2) / 4,
                         pool(x, jax.lax.max, jnp.asarray(-np.inf, jnp.float32), 2, 2), jnp.mean(x, axis=(2, 3))),
              [r(1, 4, 8, 8)], {"MAX_POOL_2D": 2, "AVERAGE_POOL_2D": 1, "MEAN": 1}),
    "reductions": (lambda x: (jnp.sum(x, axis=1), jnp.mean(x, axis=(2, 3)), jnp.max(x, axis=-1), jnp.min(x, axis=0),
                              jnp.prod(x, axis=2), jnp.argmax(x, axis=1), jnp.argmin(x, axis=-1), jnp.cumsum(x, axis=1),
                              jnp.any(x > 1, axis=1), jnp.all(x > -1, axis=0)), [r(2, 3, 4, 5)], None),
    "shapes": (lambda x: (x.reshape(2, -1), x.transpose(0, 2, 1, 3), jnp.concatenate([x, x * 2], axis=2),
                          x[:, 1:3, ::2], jnp.pad(x, ((0, 0), (1, 2), (0, 0), (3, 0))), jnp.flip(x, 1), x[:, None],
                          jnp.squeeze(x[:, :1], 1), jnp.broadcast_to(x[:, :1], x.shape) + 0,
                          jnp.pad(x, ((0, 0), (0, 0), (1, 1), (0, 0)), constant_values=2.0), x[:, :, 1:-1, 2:],
                          *jnp.split(x, [1, 3], axis=3)), [r(2, 3, 4, 5)], None),
    "iota": (lambda x: (x + jnp.arange(5, dtype=jnp.float32), jnp.tril(x), jnp.arange(6).reshape(2, 3) + x.shape[0]),
             [r(2, 5)], None),
    "mask_and_repeat": (lambda x: (jnp.exp(jnp.where(jnp.tril(jnp.ones((4, 4), bool)), x, -jnp.inf)),
                                   jnp.broadcast_to(x[:, None], (4, 3, 4)).reshape(12, 4)),
                        [r(4, 4)], {"SELECT_V2": 0, "BROADCAST_TO": 0}),
    "gather": (lambda x, i: (x[i], x[:, i], jnp.take_along_axis(x, jnp.abs(i[:3, None]) % 4 * jnp.ones((3, 2), int),
                                                               axis=1), x[i[0], i[1]]),
               [r(3, 4), np.array([0, 2, 1, 0])], None),
    "scatter": (lambda x, i: (x.at[i].set(1.0), x.at[:, i].add(2.0)), [r(4, 4), np.array([0, 2])], None),
    "dynamic_slices": (lambda x, i: (jax.lax.dynamic_slice(x, (i[0], jnp.int64(0)), (2, 4)),
                                     jax.lax.dynamic_update_slice(x, jnp.ones((1, 4), jnp.float32),
                                                                  (i[1], jnp.int64(0)))),
                       [r(5, 4), np.array([1, 3])], {"DYNAMIC_UPDATE_SLICE": 1}),
    "sort_topk": (lambda x: (jnp.sort(x, axis=-1), jnp.argsort(x, axis=-1), *jax.lax.top_k(x, 3), jnp.sort(x, axis=0),
                             jax.lax.sort((x > 0, x), num_keys=2)[1]),
                  [r(3, 6)], {"STABLEHLO_SORT": 0}),
    "composites": (lambda x, y, i: (gelu(x, approximate="none"), gelu(x, approximate="tanh"), softmax(x, dim=-1),
                                    softmax(x, dim=0), log_softmax(x, dim=1), hardswish(x),
                                    linear(x, LW, LB),
                                    layer_norm(x, B[:5], B[3:], normalized_shape=np.array([5]), eps=1e-5),
                                    embedding(y, i, padding_idx=-1)),
                   [r(3, 5), r(10, 4), np.array([[1, 9], [0, 3]])],
                   {"GELU": 2, "SOFTMAX": 2, "LOG_SOFTMAX": 1, "HARD_SWISH": 1, "FULLY_CONNECTED": 1, "GATHER": 1}),
    "sdpa": (lambda q, k, v: (sdpa(q, k, v, is_causal=True, dropout_p=0.0), sdpa(q, k, v, is_causal=False)),
             [r(1, 2, 4, 8), r(1, 2, 4, 8), r(1, 2, 4, 8)], {"BATCH_MATMUL": 4, "SOFTMAX": 2}),
    "resize": (lambda x: (_resize("nearest", False)(x, output_size=np.array([8, 12])),
                          _resize("bilinear", False)(x, output_size=np.array([8, 12]), align_corners=False)),
               [r(1, 3, 4, 6)], {"RESIZE_NEAREST_NEIGHBOR": 1, "RESIZE_BILINEAR": 1}),
}


@pytest.mark.parametrize("name", list(CASES))
def test_rules_match_jax(name):
    fn, inputs, expect = CASES[name]
    art = check_program(JaxProgram(fn, inputs))
    for op, count in (expect or {}).items():
        assert art.ops[op] == count, f"{op}: {art.ops[op]} != {count} in {dict(art.ops)}"
