"""jaxpr → ONNX rules on hand-written JAX functions (the converter's conventions): every
case is exported, run in ONNX Runtime and compared with JAX (max rel error 1e-4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from exporters.onnx import build
from tests.litert.adapter import JaxProgram, composite
from tests.litert.conftest import rel_error

R = np.random.default_rng(0)
REL_TOL = 1e-4


def r(*shape: int) -> np.ndarray:
    return R.standard_normal(shape).astype(np.float32)


def ints(*shape: int, lo: int = -10, hi: int = 10) -> np.ndarray:
    return R.integers(lo, hi, shape).astype(np.int64)


W, GW, TW, TGW = r(8, 4, 3, 3), r(8, 2, 3, 3), r(4, 6, 3, 3), r(8, 2, 2, 2)
TABLE, EMB = r(10, 6), r(5, 4)


def conv(x, w, stride=1, pad=1, groups=1, dil=1):
    return jax.lax.conv_general_dilated(x, w, (stride, stride), [(pad, pad)] * 2, rhs_dilation=(dil, dil),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups)


def conv_transpose(x, w, stride, pad, groups=1):
    """torch's conv_transpose2d as lax writes it: lhs dilation and a flipped, regrouped kernel."""
    i, og, kh, kw = w.shape
    k = w.reshape(groups, i // groups, og, kh, kw).swapaxes(1, 2).reshape(groups * og, i // groups, kh, kw)
    k = jnp.flip(k, (2, 3))
    p = [(kh - 1 - pad, kh - 1 - pad), (kw - 1 - pad, kw - 1 - pad)]
    return jax.lax.conv_general_dilated(x, k, (1, 1), p, lhs_dilation=(stride, stride),
                                        dimension_numbers=("NCHW", "OIHW", "NCHW"), feature_group_count=groups)


def pool(x, op, init, k, s, pad=0):
    return jax.lax.reduce_window(x, init, op, (1, 1, k, k), (1, 1, s, s), [(0, 0), (0, 0), (pad, pad), (pad, pad)])


gelu = composite("aten.gelu", lambda x, approximate="none": jax.nn.gelu(x, approximate=approximate == "tanh"), "self")
softmax = composite("aten._softmax", lambda x, dim=-1, half_to_float=False: jax.nn.softmax(x, axis=dim), "self")
layer_norm = composite(
    "aten.layer_norm",
    lambda x, w, b, normalized_shape=None, eps=1e-5: (x - x.mean(-1, keepdims=True))
    * jax.lax.rsqrt(x.var(-1, keepdims=True) + eps) * w + b, "input,weight,bias")
embedding = composite("aten.embedding", lambda w, i, padding_idx=-1: jnp.take(w, i, axis=0), "weight,indices")
reflect = composite("aten.reflection_pad2d", lambda x, padding=None: jnp.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)),
                                                                              mode="reflect"), "self")

CASES = {
    # elementwise
    "arith": (lambda x, y: (x + y * 2 - x / (jnp.abs(y) + 1), jnp.maximum(x, y), jnp.minimum(x, 0.5)), [r(3, 4), r(3, 4)]),
    "unary": (lambda x: (jnp.exp(x), jnp.tanh(x), jax.nn.sigmoid(x), jax.lax.rsqrt(jnp.abs(x) + 1), jnp.sign(x),
                         jax.lax.erf(x), jnp.floor(x), jnp.ceil(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x)), [r(3, 5)]),
    "round": (lambda x: (jnp.round(x * 3), jax.lax.round(x * 3, jax.lax.RoundingMethod.AWAY_FROM_ZERO)),
              [np.array([[0.5, 1.5, -0.5, -2.5, 0.2, 2.49]], np.float32) / 3]),
    "powers": (lambda x: (x ** 3, jax.lax.integer_pow(x, -2), jnp.power(jnp.abs(x), 0.7), jnp.square(x)), [r(2, 6) + 3]),
    "compare_select": (lambda x, y: (x > y, x <= y, x == y, x != y, jnp.where(x > 0, x, y * 2),
                                     jnp.clip(x, -0.3, 0.4), jnp.isfinite(x / y), jnp.arctan2(x, y),
                                     jnp.arctan2(x, y * (x > 0))), [r(4, 3), r(4, 3)]),
    "int_ops": (lambda a, b: (a // 3, jax.lax.rem(a, 3), a & b, a | b, a ^ b, ~a, jnp.maximum(a, b), a * b - 1),
                [ints(3, 4), ints(3, 4)]),
    "bool_logic": (lambda x, y: (jnp.logical_and(x > 0, y > 0), jnp.logical_or(x > 0, y < 0), jnp.logical_not(x > 0)),
                   [r(5), r(5)]),
    "cast": (lambda x: (x.astype(jnp.int32), (x > 0).astype(jnp.float32), x.astype(jnp.int64) * 2), [r(4, 4) * 5]),
    "bitcast": (lambda x: jax.lax.bitcast_convert_type(x, jnp.int32),
                [np.array([0.0, -0.0, 1.0, -2.5, 1e-40, -3e38, np.inf, -np.inf, 7.1e-3], np.float32)]),
    # shapes
    "broadcast_reshape": (lambda x, b: (x.reshape(2, 6, 2) + b[None, :, None], jnp.broadcast_to(b, (3, 6)),
                                        jnp.transpose(x.reshape(4, 6), (1, 0))), [r(4, 6), r(6)]),
    "slice_concat_pad": (lambda x: (x[1:3, ::2], jnp.concatenate([x, -x], axis=1), x[::-1, :],
                                    jax.lax.pad(x, np.float32(0.5), ((1, -1, 0), (2, 0, 0)))), [r(4, 6)]),
    "split_squeeze_iota": (lambda x: (*jnp.split(x, [1, 3], axis=1), jnp.squeeze(x[:, :1], 1),
                                      x + jnp.arange(6, dtype=jnp.float32)), [r(4, 6)]),
    "dynamic_slice": (lambda x, i: (jax.lax.dynamic_slice(x, (i, jnp.int64(1)), (2, 3)),
                                    jax.lax.dynamic_update_slice(x, jnp.ones((2, 2), x.dtype), (i, i))),
                      [r(5, 6), np.int64(4)]),
    # reductions, scans
    "reduce": (lambda x: (x.sum(1), x.max(0), x.min(1), x.prod(1), jnp.argmax(x, 1), jnp.argmin(x, 0),
                          jnp.cumsum(x, 1), jnp.any(x > 1, 1), jnp.all(x > -1, 0)), [r(4, 5)]),
    # (max pooling's indices: the first True of a window's matches)
    "argmax_of_bool": (lambda x: (jnp.argmax(x > 0.3, 1), jnp.argmin(x > 0.3, 0)), [r(4, 5)]),
    # linear algebra, convolution, pooling
    "dot": (lambda a, b, c: (a @ b, jnp.einsum("bik,bkj->bij", c, c.transpose(0, 2, 1)),
                             jnp.einsum("ij,kj->ik", a, b.T), jnp.einsum("bij,bij->b", c, c)),
            [r(3, 4), r(4, 5), r(2, 3, 4)]),
    "conv": (lambda x: (conv(x, W), conv(x, W, stride=2, pad=0), conv(x, GW, groups=2, dil=2)), [r(1, 4, 9, 9)]),
    "conv_transpose": (lambda x, y: (conv_transpose(x, TW, 2, 1), conv_transpose(y, TGW, 2, 0, groups=2)),
                       [r(1, 4, 5, 5), r(1, 8, 3, 3)]),
    "pools": (lambda x: (pool(x, jax.lax.max, -jnp.inf, 3, 2, 1), pool(x, jax.lax.add, 0.0, 2, 2)), [r(1, 3, 8, 8)]),
    # indexing, sorting
    "gather": (lambda x, i: (x[i], jnp.take_along_axis(x, jnp.broadcast_to(i[None, :4], (6, 4)), axis=1), x[:, i[:2]],
                             x[i[:3], i[1:4]]), [r(6, 6), ints(5, lo=0, hi=6)]),
    "scatter": (lambda x, i: (x.at[i].set(0.0), x.at[i].add(1.0), x.at[:, i[1:]].add(x[:, :2])),
                [r(6, 3) * 0 + r(6, 3), np.array([4, 1, 0], np.int64)]),
    "sort_topk": (lambda x: (jnp.sort(x, 1), jnp.argsort(x, 1), *jax.lax.top_k(x, 3),
                             *jax.lax.sort((x[:, 0] > 0, x[:, 1], x[:, 2]), num_keys=2)), [r(5, 6)]),
    # composites mapped whole
    "composites": (lambda x, w, b: (gelu(x), gelu(x, approximate="tanh"), softmax(x, dim=0),
                                    layer_norm(x, w, b, normalized_shape=(6,), eps=1e-5)), [r(4, 6), r(6), r(6)]),
    "embedding_reflect": (lambda i, img: (embedding(TABLE, i), reflect(img, padding=(2, 1, 1, 2))),
                          [ints(2, 3, lo=0, hi=10), r(1, 2, 4, 5)]),
}
#: ONNX ops a case must use (the rule's point is the mapping, not just the numbers).
EXPECT = {"conv": {"Conv": 3}, "conv_transpose": {"ConvTranspose": 2, "Conv": 0},
          "pools": {"MaxPool": 1, "AveragePool": 1}, "composites": {"Gelu": 2, "Softmax": 1, "LayerNormalization": 1},
          "embedding_reflect": {"Gather": 1, "Pad": 1}, "sort_topk": {"TopK": 5}, "dot": {"MatMul": 3, "Einsum": 1},
          "broadcast_reshape": {"Expand": 1}}


@pytest.mark.parametrize("name", list(CASES))
def test_rules_match_jax(name):
    fn, samples = CASES[name]
    program = JaxProgram(fn, samples)
    art = build(program)
    got, want = art(*samples), program.reference(*samples)
    got = list(got) if isinstance(got, tuple) else [got]
    assert len(got) == len(want)
    for i, (g, w) in enumerate(zip(got, want)):
        assert g.shape == w.shape and g.dtype == w.dtype, f"{name} output {i}: {g.dtype}{g.shape} vs {w.dtype}{w.shape}"
        err = rel_error(g, w)
        assert err <= REL_TOL, f"{name} output {i}: relative error {err:.3g} (ops: {dict(art.ops)})"
    for op, count in EXPECT.get(name, {}).items():
        assert art.ops[op] == count, f"{name}: {op} ×{art.ops[op]}, expected {count}; ops {dict(art.ops)}"


def test_rules_dynamic_dims_run_at_other_sizes():
    def fn(x, y):
        b, t = x.shape[0], x.shape[1]
        z = x.reshape(b, t // 2, 2 * x.shape[2]) * 2.0
        return z.sum(-1), jnp.arange(t) + y[:, None], jnp.broadcast_to(x[:, :1], x.shape) + 1.0

    program = JaxProgram(fn, [r(2, 4, 3), ints(2)], dynamic={0: {0: "b", 1: "t"}, 1: {0: "b"}})
    art = build(program)
    dims = [[d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim] for i in art.model().graph.input]
    assert dims == [["b", "t", 3], ["b"]]
    for b, t in ((2, 4), (3, 6), (1, 2)):
        xs = [r(b, t, 3), ints(b)]
        for g, w in zip(art(*xs), program.reference(*xs)):
            assert g.shape == w.shape and rel_error(g, w) <= REL_TOL, (b, t)
