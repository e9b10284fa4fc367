"""jaxpr → ONNX rules on hand-written JAX functions (the converter's conventions): every
case is exported, run in ONNX Runtime and compared with JAX (max rel error 1e-4)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from converter.errors import UnsupportedOpError
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
#: Index samples with out-of-range entries (after jnp's wrap of negatives: -8 and -7 are below -6).
OOB_ROWS, OOB_COLS = np.array([4, -8, 7, 1, 6, 0], np.int64), np.array([2, 1, -1, 5, 0, 3], np.int64)
SCATTER_ROWS = np.array([2, 1, -7, 5, 0, 9], np.int64)
WINDOW = jax.lax.GatherDimensionNumbers(offset_dims=(0, 1), collapsed_slice_dims=(), start_index_map=(0, 1))
#: int64 values beyond float64's 53 bits (pooling them through float64 would round).
BIG_INTS = (2 ** 60 + np.arange(64, dtype=np.int64) * 3)[::-1].reshape(1, 1, 8, 8).copy()
I64_MIN, I32_MIN, I16_MIN = (np.iinfo(d).min for d in (np.int64, np.int32, np.int16))
reflect = composite("aten.reflection_pad2d", lambda x, padding=None: jnp.pad(x, ((0, 0), (0, 0), (1, 2), (2, 1)),
                                                                              mode="reflect"), "self")

CASES = {
    # elementwise
    "arith": (lambda x, y: (x + y * 2 - x / (jnp.abs(y) + 1), jnp.maximum(x, y), jnp.minimum(x, 0.5)), [r(3, 4), r(3, 4)]),
    "unary": (lambda x: (jnp.exp(x), jnp.tanh(x), jax.nn.sigmoid(x), jax.lax.rsqrt(jnp.abs(x) + 1), jnp.sign(x),
                         jax.lax.erf(x), jnp.floor(x), jnp.ceil(x), jnp.log1p(jnp.abs(x)), jnp.expm1(x)), [r(3, 5)]),
    "round": (lambda x: (jnp.round(x * 3), jax.lax.round(x * 3, jax.lax.RoundingMethod.AWAY_FROM_ZERO)),
              [np.array([[0.5, 1.5, -0.5, -2.5, 0.2, 2.49]], np.float32) / 3]),
    # (the largest floats below a half: Floor(|x| + 0.5) rounds them up)
    "round_near_half": (lambda x: (jnp.round(x), jax.lax.round(x, jax.lax.RoundingMethod.AWAY_FROM_ZERO)),
                        [np.array([[0.49999997, -0.49999997, 2.4999998, -2.5, 0.5, 1.5]], np.float32)]),
    "powers": (lambda x: (x ** 3, jax.lax.integer_pow(x, -2), jnp.power(jnp.abs(x), 0.7), jnp.square(x)), [r(2, 6) + 3]),
    "compare_select": (lambda x, y: (x > y, x <= y, x == y, x != y, jnp.where(x > 0, x, y * 2),
                                     jnp.clip(x, -0.3, 0.4), jnp.isfinite(x / y), jnp.arctan2(x, y),
                                     jnp.arctan2(x, y * (x > 0))), [r(4, 3), r(4, 3)]),
    "int_ops": (lambda a, b: (a // 3, jax.lax.rem(a, 3), a & b, a | b, a ^ b, ~a, jnp.maximum(a, b), a * b - 1),
                [ints(3, 4), ints(3, 4)]),
    # BitShift takes unsigned words and leaves amounts past the width undefined: lax gives 0 (or the sign's fill)
    "shifts": (lambda a, s, b, t, u, v: tuple(f(x, n) for x, n in ((a, s), (b, t), (u, v))
                                              for f in (jax.lax.shift_left, jax.lax.shift_right_logical,
                                                        jax.lax.shift_right_arithmetic) if x.dtype.kind == "i"
                                              or f is not jax.lax.shift_right_arithmetic),
               [np.array([I32_MIN, -5, -1, 0, 1, 7, 2 ** 31 - 1, 100], np.int32),
                np.array([0, 1, 3, 31, 32, -1, 2, 5], np.int32),
                np.array([-128, -5, -1, 0, 1, 7, 127, 100], np.int8), np.array([0, 1, 3, 7, 8, -1, 2, 5], np.int8),
                np.array([0, 5, 1, 2 ** 32 - 1, 1, 7, 2 ** 31, 3], np.uint32),
                np.array([0, 1, 3, 31, 32, 40, 2, 5], np.uint32)]),
    # interior padding (jax's associative scans, strided convolutions' gradients), with negative edges too
    "pad_interior": (lambda x: (jax.lax.pad(x, np.float32(0), [(1, 2, 1), (0, -1, 2)]),
                                jax.lax.pad(x, np.float32(-1), [(-1, 0, 3), (2, 1, 0)]),
                                jax.lax.pad(x[:1], np.float32(5), [(0, 0, 4), (0, 0, 1)])), [r(3, 4)]),
    # the signed zeros: atan2(±0, -0) = ±π, atan2(±0, +0) = ±0, atan2(-0, x < 0) = -π
    "atan2_zeros": (lambda y, x: jnp.arctan2(y, x), [np.array([0.0, -0.0, 0.0, -0.0, -0.0, 1.0, -1.0], np.float32),
                                                      np.array([-0.0, -0.0, 0.0, 0.0, -2.0, -0.0, 0.0], np.float32)]),
    "bool_logic": (lambda x, y: (jnp.logical_and(x > 0, y > 0), jnp.logical_or(x > 0, y < 0), jnp.logical_not(x > 0)),
                   [r(5), r(5)]),
    # (ONNX Runtime's Where has no bool kernel: a select or filled gather of bool values)
    "bool_where": (lambda x, y, i: (jnp.where(x > y, x > 0, y > 0), jnp.take_along_axis(x > 0, i, axis=1, mode="fill")),
                   [r(2, 5), r(2, 5), np.array([[0, 4, 9], [1, -7, 2]], np.int64)]),
    "cast": (lambda x: (x.astype(jnp.int32), (x > 0).astype(jnp.float32), x.astype(jnp.int64) * 2), [r(4, 4) * 5]),
    # constants folded at export time keep 64 bits (2**40 + 3 and 1e-300 do not fit 32)
    "fold_64bit_constants": (lambda x: (x + jnp.asarray(np.int64(2 ** 40 + 3)) % 1000003,
                                        x * (jnp.asarray(np.float64(1e-300)) * 1e300)), [ints(3)]),
    "bitcast": (lambda x: jax.lax.bitcast_convert_type(x, jnp.int32),
                [np.array([0.0, -0.0, 1.0, -2.5, 1e-40, -3e38, np.inf, -np.inf, 7.1e-3], np.float32)]),
    # shapes
    "broadcast_reshape": (lambda x, b: (x.reshape(2, 6, 2) + b[None, :, None], jnp.broadcast_to(b, (3, 6)),
                                        jnp.transpose(x.reshape(4, 6), (1, 0))), [r(4, 6), r(6)]),
    # a 0 in a Reshape's target shape is a zero-size dim (allowzero), not a copy of the input's dim
    "reshape_zero_size": (lambda x: (x.reshape(3, 0, 2, 0), x[None], jnp.broadcast_to(x[:, None], (3, 2, 0)) + 1),
                          [np.zeros((3, 0), np.float32)]),
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
    # NaN propagates through max / min and is what argmax / argmin pick (its first index)
    "reduce_nan": (lambda x: (x.max(1), x.min(0), jnp.argmax(x, 1), jnp.argmin(x, 0), x.max(), jnp.argmax(x[:, :2], 1)),
                   [np.array([[1.0, np.nan, 2.0], [3.0, -1.0, np.nan], [0.5, 0.25, 4.0]], np.float32)]),
    # (max pooling's indices: the first True of a window's matches)
    "argmax_of_bool": (lambda x: (jnp.argmax(x > 0.3, 1), jnp.argmin(x > 0.3, 0)), [r(4, 5)]),
    # linear algebra, convolution, pooling
    "dot": (lambda a, b, c: (a @ b, jnp.einsum("bik,bkj->bij", c, c.transpose(0, 2, 1)),
                             jnp.einsum("ij,kj->ik", a, b.T), jnp.einsum("bij,bij->b", c, c)),
            [r(3, 4), r(4, 5), r(2, 3, 4)]),
    # integer operands ONNX Runtime's MatMul / Einsum refuse: int8 → MatMulInteger, int16 / bool → int32
    "int_dot": (lambda a, b, c, d: (jax.lax.dot(a, b, preferred_element_type=jnp.int32), a @ b,
                                    jnp.einsum("ij,kj->ik", a, b.T), c @ d, jnp.einsum("bi,bi->b", c, c),
                                    (a > 0) @ (b > 0)),
                [ints(5, 64, lo=-128, hi=128).astype(np.int8), ints(64, 3, lo=-128, hi=128).astype(np.int8),
                 ints(4, 6, lo=0, hi=300).astype(np.int16), ints(6, 2, lo=0, hi=300).astype(np.int16)]),
    "conv": (lambda x: (conv(x, W), conv(x, W, stride=2, pad=0), conv(x, GW, groups=2, dil=2)), [r(1, 4, 9, 9)]),
    "conv_transpose": (lambda x, y: (conv_transpose(x, TW, 2, 1), conv_transpose(y, TGW, 2, 0, groups=2)),
                       [r(1, 4, 5, 5), r(1, 8, 3, 3)]),
    "pools": (lambda x: (pool(x, jax.lax.max, -jnp.inf, 3, 2, 1), pool(x, jax.lax.add, 0.0, 2, 2)), [r(1, 3, 8, 8)]),
    # max pooling of dtypes ONNX Runtime's MaxPool refuses (int64 exact beyond 2**53; int32 / int16 / bool)
    "int_pools": (lambda a, b, c: (pool(a, jax.lax.max, I64_MIN, 3, 2, 1), pool(a, jax.lax.max, I64_MIN, 2, 2),
                                   pool(b, jax.lax.max, np.int32(I32_MIN), 3, 2, 1),
                                   pool(c, jax.lax.max, np.int16(I16_MIN), 2, 1),
                                   pool(b > 0, jax.lax.max, False, 2, 2)),
                  [BIG_INTS, ints(1, 2, 6, 6, lo=I32_MIN, hi=2 ** 31 - 1).astype(np.int32),
                   ints(1, 2, 5, 5, lo=-3000, hi=3000).astype(np.int16)]),
    # indexing, sorting
    "gather": (lambda x, i: (x[i], jnp.take_along_axis(x, jnp.broadcast_to(i[None, :4], (6, 4)), axis=1), x[:, i[:2]],
                             x[i[:3], i[1:4]]), [r(6, 6), ints(5, lo=0, hi=6)]),
    "scatter": (lambda x, i: (x.at[i].set(0.0), x.at[i].add(1.0), x.at[:, i[1:]].add(x[:, :2])),
                [r(6, 3) * 0 + r(6, 3), np.array([4, 1, 0], np.int64)]),
    # out-of-range indices: scatters drop their updates (mode drop / promise_in_bounds) or clamp
    # them (clip); gathers clamp them (clip / promise_in_bounds) or fill their slices (fill)
    "scatter_out_of_range": (lambda x, i, j: (x.at[i].set(5.0), x.at[i].add(1.0), x.at[i].min(-9.0),
                                              x.at[i].max(9.0), x.at[i].multiply(3.0),
                                              x.at[i].set(7.0, mode="clip"), x.at[i].set(2.0, mode="promise_in_bounds"),
                                              x.at[i, j].add(1.0), x.at[:, i].set(-1.0), x.at[i].set(x * 2)),
                             [r(6, 3), SCATTER_ROWS, np.array([0, 2, 1, 1, 0, 2], np.int64)]),
    "gather_out_of_range": (lambda x, y, i, j: (x.at[i].get(mode="fill", fill_value=-1.0), x.at[i].get(mode="clip"),
                                                x.at[i].get(mode="promise_in_bounds"),
                                                x.at[i, j].get(mode="fill", fill_value=0.5),
                                                x.at[:, j].get(mode="fill"), y.at[j].get(mode="fill"),
                                                y.at[:, :, i].get(mode="clip"),
                                                jax.lax.gather(x, i[:2], WINDOW, (2, 2), mode="fill", fill_value=-3.0),
                                                jax.lax.gather(x, i[:2], WINDOW, (2, 2), mode="clip")),
                            [r(6, 3), ints(4, 2, 3), OOB_ROWS, OOB_COLS]),
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
          "broadcast_reshape": {"Expand": 1}, "int_dot": {"MatMulInteger": 3, "MatMul": 2, "Einsum": 1},
          "int_pools": {"MaxPool": 3, "Max": 2}}


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
        if w.dtype.kind == "f":  # NaN where JAX has NaN, then the rest compared
            assert np.array_equal(np.isnan(g), np.isnan(w)), f"{name} output {i}: NaN {np.isnan(g)}, want {np.isnan(w)}"
            g, w = np.where(np.isnan(w), 0, g), np.where(np.isnan(w), 0, w)
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


def test_rules_reshape_to_a_zero_size_dim_beside_a_dynamic_dim():
    # with allowzero a -1 beside a 0 is ambiguous, so the shape operand is computed
    program = JaxProgram(lambda x: x.reshape(x.shape[0], 0, 3), [np.zeros((2, 0), np.float32)], dynamic={0: {0: "b"}})
    art = build(program)
    for b in (2, 5):
        got = art(np.zeros((b, 0), np.float32))
        assert got.shape == (b, 0, 3)


def test_rules_complex_program_inputs_are_refused_by_dtype():
    # (complex values inside a program are pairs of real ones: tests/test_exporter_complex.py)
    with pytest.raises(UnsupportedOpError, match=r"input 0 \(complex64\).*no complex tensors"):
        build(JaxProgram(lambda z: jnp.abs(z) + 1, [np.ones(3, np.complex64)]))


def test_rules_out_of_range_indices_with_dynamic_dims():
    # the bounds of the clamps and of the padding slot are read from the input's Shape
    def fn(x, i):
        return (x.at[i].get(mode="fill", fill_value=-1.0), x.at[i].get(mode="clip"), x.at[i].add(1.0),
                x.at[i].set(3.0), x.at[i, i].get(mode="fill", fill_value=-2.0))

    program = JaxProgram(fn, [r(5, 5), np.array([0, 7, -9, 3])], dynamic={0: {0: "n", 1: "n"}})
    art = build(program)
    for n in (5, 3, 9):
        xs = [r(n, n), np.array([0, n, -n - 1, n - 1])]
        for g, w in zip(art(*xs), program.reference(*xs)):
            assert g.shape == w.shape and rel_error(g, w) <= REL_TOL, n
