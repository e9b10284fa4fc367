"""Matrix products: linear, mm, bmm, addmm, addmv, _grouped_mm, _scaled_mm, _cdist_forward; transformers'
grouped-matmul fallback ops.

torch.export's core-ATen decomposition turns ``matmul``/``einsum``/``tensordot`` into
``mm``/``bmm`` plus views, ``baddbmm`` into ``bmm`` + ``mul`` + ``add``, and ``mv``/``dot``/
``outer``/``vecdot`` into ``mul`` + ``sum``; only the overloads below survive.

float16/bfloat16 products accumulate in float32 and round once, like torch's CPU
kernels; all products use ``Precision.HIGHEST`` so float32 matches PyTorch on TPU/GPU.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import torch

from converter.errors import LoweringError, UnsupportedOpError
from converter.lowering.dtypes import scalar_type_name, to_jax_dtype
from converter.lowering.helpers import difference, opmath_dtype, pnorm
from converter.lowering.ops.convert import cast
from converter.lowering.registry import library_lowering, lowering

aten = torch.ops.aten

_HIGHEST = jax.lax.Precision.HIGHEST


def _dot(a, b, contract: tuple, batch: tuple = ((), ()), out_dtype=None):
    """``dot_general`` at HIGHEST precision; the result stays in torch's opmath type
    (float32 for float16/bfloat16) so a following bias/scale rounds only once."""
    dtype = out_dtype or jnp.result_type(a.dtype, b.dtype)
    return jax.lax.dot_general(a.astype(dtype), b.astype(dtype), (contract, batch), precision=_HIGHEST,
                               preferred_element_type=opmath_dtype(dtype))


def _scaled_sum(ctx, self, prod, beta, alpha):
    """``beta * self + alpha * prod`` in opmath; ``self`` is ignored when beta == 0 (NaNs too), like torch."""
    dtype = ctx.out_dtype or self.dtype
    acc = prod.dtype
    prod = prod if alpha == 1 else prod * jnp.asarray(alpha, dtype=acc)
    if beta == 0:
        return prod.astype(dtype)
    s = self.astype(acc) if beta == 1 else self.astype(acc) * jnp.asarray(beta, dtype=acc)
    return (s + prod).astype(dtype)


@lowering(aten.linear.default, composite=True)
def lower_linear_default(ctx, input, weight, bias=None):
    """linear(Tensor input, Tensor weight, Tensor? bias=None) -> Tensor

    Composite ``aten.linear`` (LiteRT: FULLY_CONNECTED with fused bias); body is
    ``dot_general`` contracting the last dim of input with the last dim of weight (a 2-D
    weight's dim 1; a 1-D weight is one output row and drops the output's last dim, as torch).
    Precision HIGHEST so fp32 matches PyTorch on TPU/GPU too.

    Raises:
        RuntimeError: input and weight of two dtypes (as torch).
    """
    _same_dtype(input, weight, lambda a, b: f"expected m1 and m2 to have the same dtype, but got: {a.lower()} != "
                                            f"{b.lower()}")
    dtype = ctx.out_dtype or input.dtype
    y = _dot(input, weight, ((input.ndim - 1,), (weight.ndim - 1,)), out_dtype=dtype)
    return (y if bias is None else y + bias.astype(y.dtype)).astype(dtype)


def _same_dtype(a, b, message):
    """Raise torch's error for matrix operands of two dtypes (the CPU refuses them; ``message`` formats the two
    names).

    Raises:
        RuntimeError: ``a`` and ``b`` differ in dtype."""
    if a.dtype != b.dtype:
        raise RuntimeError(message(scalar_type_name(a.dtype), scalar_type_name(b.dtype)))


@lowering(aten.mm.default)
def lower_mm_default(ctx, self, mat2):
    """mm(Tensor self, Tensor mat2) -> Tensor

    Emits ``dot_general`` (contract dim 1 with dim 0), precision HIGHEST.

    Raises:
        RuntimeError: operands of two dtypes (as torch).
    """
    _same_dtype(self, mat2, lambda a, b: f"expected m1 and m2 to have the same dtype, but got: {a.lower()} != "
                                         f"{b.lower()}")
    return _dot(self, mat2, ((1,), (0,)), out_dtype=ctx.out_dtype).astype(ctx.out_dtype or self.dtype)


@lowering(aten.bmm.default)
def lower_bmm_default(ctx, self, mat2):
    """bmm(Tensor self, Tensor mat2) -> Tensor

    Emits ``dot_general`` with batch dim 0, precision HIGHEST.
    """
    return _dot(self, mat2, ((2,), (1,)), ((0,), (0,)), out_dtype=ctx.out_dtype).astype(ctx.out_dtype or self.dtype)


@lowering(aten.addmm.default)
def lower_addmm_default(ctx, self, mat1, mat2, *, beta=1, alpha=1):
    """addmm(Tensor self, Tensor mat1, Tensor mat2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    Emits ``dot_general`` + ``mul`` + ``add`` (``self`` broadcasts; ignored when beta == 0).

    Raises:
        RuntimeError: matrices of two dtypes (as torch: a float64 input into a float32 ``nn.Linear``).
    """
    _same_dtype(mat1, mat2, lambda a, b: f"mat1 and mat2 must have the same dtype, but got {a} and {b}")
    return _scaled_sum(ctx, self, _dot(mat1, mat2, ((1,), (0,)), out_dtype=ctx.out_dtype), beta, alpha)


@lowering(aten.addmv.default)
def lower_addmv_default(ctx, self, mat, vec, *, beta=1, alpha=1):
    """addmv(Tensor self, Tensor mat, Tensor vec, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    Emits ``dot_general`` (matrix-vector) + ``mul`` + ``add``; ``self`` ignored when beta == 0.
    """
    return _scaled_sum(ctx, self, _dot(mat, vec, ((1,), (0,)), out_dtype=ctx.out_dtype), beta, alpha)


def grouped_mm_meta(self, mat2, offs=None, bias=None, out_dtype=None):
    """``_grouped_mm``'s output, from meta tensors (torch's meta kernel makes CUDA's checks too:
    bfloat16 inputs only, rows of 16 bytes)."""
    if self.dim() == 2:
        shape = (offs.shape[0], self.shape[0], mat2.shape[1]) if mat2.dim() == 2 else (self.shape[0], mat2.shape[-1])
    else:
        shape = (self.shape[1], mat2.shape[1]) if mat2.dim() == 2 else (self.shape[0], self.shape[1], mat2.shape[-1])
    return self.new_empty(shape, dtype=out_dtype or self.dtype)


#: ``aten._grouped_mm`` as ``torch.compile`` on the tpu device records it: the same schema, with
#: :func:`grouped_mm_meta` as its fake kernel, so float32 traces (``tpu_runtime.compile_tensors``).
_LIB = torch.library.Library("tpu_export", "DEF")
_LIB.define("grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, "
            "ScalarType? out_dtype=None) -> Tensor")
torch.library.register_fake("tpu_export::grouped_mm", grouped_mm_meta, lib=_LIB)
GROUPED_MM = torch.ops.tpu_export.grouped_mm.default


def _group_of(offs, n: int):
    """Group index of each of ``n`` positions for cumulative group ends ``offs`` (``len(offs)``: past the last)."""
    return jnp.searchsorted(offs.astype(jnp.int32), jnp.arange(n, dtype=jnp.int32), side="right")


@lowering(aten._grouped_mm.default, GROUPED_MM)
def lower__grouped_mm_default(ctx, self, mat2, offs=None, bias=None, out_dtype=None):
    """_grouped_mm(Tensor self, Tensor mat2, Tensor? offs=None, Tensor? bias=None, ScalarType? out_dtype=None) -> Tensor

    Also ``tpu_export::grouped_mm`` (the same op, as ``torch.compile`` on the tpu device records it).

    ``F.grouped_mm`` (mixture-of-experts layers): ``offs`` holds the cumulative end of each
    group along the ragged dimension. 2-D × 3-D: row group ``g`` of ``self`` times
    ``mat2[g]`` (``lax.ragged_dot``: native on TPU, masked dense products elsewhere);
    2-D × 2-D: one product per group of the contracted dimension, stacked (the weight
    gradient of the former); 3-D × 2-D: column group ``g`` of ``mat2`` times ``self[g]``;
    3-D × 3-D: a batched product. Positions past the last offset are zero (torch leaves them
    unwritten). Accumulates in float32 for low-precision inputs; the result has ``out_dtype``
    (default the inputs' dtype).

    Raises:
        UnsupportedOpError: a ``bias`` (torch: "Bias not supported yet").
    """
    if bias is not None:
        raise UnsupportedOpError(str(aten._grouped_mm.default), ctx.target, ctx.location,
                                 reason="Bias not supported yet (as torch)")
    dtype = jnp.result_type(self.dtype, mat2.dtype)
    result = to_jax_dtype(out_dtype) if out_dtype is not None else (ctx.out_dtype or dtype)
    acc = opmath_dtype(dtype)
    a, b = self.astype(dtype), mat2.astype(dtype)
    if a.ndim == 3 and b.ndim == 3:
        out = _dot(a, b, ((2,), (1,)), ((0,), (0,)))
    elif a.ndim == 2 and b.ndim == 3:
        sizes = jnp.diff(offs.astype(jnp.int32), prepend=0)
        out = jax.lax.ragged_dot(a, b, sizes, precision=_HIGHEST, preferred_element_type=acc)
    elif a.ndim == 2:  # groups along the contracted dimension: (G, M, N)
        groups = offs.shape[0]
        mask = _group_of(offs, a.shape[1])[None, :] == jnp.arange(groups)[:, None]  # (G, K)
        out = jnp.einsum("mk,gk,kn->gmn", a.astype(acc), mask.astype(acc), b.astype(acc), precision=_HIGHEST)
    else:  # self (G, M, K), mat2 (K, N), groups along N
        full = _dot(a, b, ((2,), (0,)))  # (G, M, N)
        mask = _group_of(offs, b.shape[1])[None, :] == jnp.arange(a.shape[0])[:, None]  # (G, N)
        out = jnp.sum(jnp.where(mask[:, None, :], full, jnp.zeros((), full.dtype)), axis=0)
    return out.astype(result)


@library_lowering("transformers::grouped_mm_fallback.default")
def lower_transformers_grouped_mm_fallback(ctx, input, weight, offs):
    """transformers::grouped_mm_fallback(Tensor input, Tensor weight, Tensor offs) -> Tensor

    transformers' mixture-of-experts layers (Mixtral, Qwen2-MoE, …) call this custom op instead of
    ``F.grouped_mm`` when traced (``torch.export``, ``torch.compile``) in a dtype other than bfloat16:
    ``input`` (S, K) holds the tokens sorted by expert, ``weight`` (E, K, N) the experts, ``offs`` (E,) the
    cumulative token count of each. Its meaning is ``_grouped_mm``'s 2-D × 3-D case, rows past the last
    offset zero (the op zero-fills them): that lowering (:func:`lower__grouped_mm_default`).
    """
    return lower__grouped_mm_default(ctx, input, weight, offs)


@library_lowering("transformers::grouped_mm_fallback_backward.default")
def lower_transformers_grouped_mm_fallback_backward(ctx, input, weight, offs, grad_output):
    """transformers::grouped_mm_fallback_backward(Tensor input, Tensor weight, Tensor offs, Tensor grad_output) -> (Tensor, Tensor)

    The gradients of :func:`lower_transformers_grouped_mm_fallback` (a compiled MoE training step): the input's,
    ``grad_output`` (S, N) by each row's expert transposed (a grouped 2-D × 3-D product); each expert's, its
    rows of ``input`` transposed by their rows of ``grad_output`` (the 2-D × 2-D case, groups along the
    contracted rows). Rows past the last offset get a zero gradient; so does an expert with no rows.
    """
    plain = ctx.fork()
    grad_input = lower__grouped_mm_default(plain, grad_output, jnp.swapaxes(weight, 1, 2), offs)
    grad_weight = lower__grouped_mm_default(plain, input.T, grad_output, offs)
    return grad_input.astype(input.dtype), grad_weight.astype(weight.dtype)


@lowering(aten._cdist_forward.default)
def lower__cdist_forward_default(ctx, x1, x2, p, compute_mode):
    """_cdist_forward(Tensor x1, Tensor x2, float p, int? compute_mode) -> Tensor

    Pairwise p-norm distances over broadcast batch dims: ``sub`` of the broadcast
    ``[..., P, 1, M]`` and ``[..., 1, R, M]`` operands, then ``abs``/``pow``/``reduce_sum``
    (p=0 counts non-zeros, p=inf takes the max). Deviation: torch may use the
    ``|a|²+|b|²-2ab`` matmul form for p=2 with more than 25 rows (``compute_mode``);
    the direct difference used here is the more accurate of the two.
    """
    if p < 0:
        raise UnsupportedOpError(str(aten._cdist_forward.default), ctx.target, ctx.location,
                                 reason=f"cdist only supports non-negative p, got {p}")
    dtype = ctx.out_dtype or x1.dtype
    acc = opmath_dtype(dtype)
    d = jnp.abs(difference(x1.astype(acc)[..., :, None, :], x2.astype(acc)[..., None, :, :]))
    return pnorm(d, p).astype(dtype)


@lowering(aten.addbmm.default)
def lower_addbmm_default(ctx, self, batch1, batch2, *, beta=1, alpha=1):
    """addbmm(Tensor self, Tensor batch1, Tensor batch2, *, Scalar beta=1, Scalar alpha=1) -> Tensor

    ``beta * self + alpha * Σ_b batch1[b] @ batch2[b]``: one ``dot_general`` contracting the
    batch dim with the inner dim; ``self`` ignored when beta == 0.
    """
    return _scaled_sum(ctx, self, _dot(batch1, batch2, ((0, 2), (0, 1)), out_dtype=ctx.out_dtype), beta, alpha)


@lowering(aten._trilinear.default)
def lower__trilinear_default(ctx, i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    """_trilinear(Tensor i1, Tensor i2, Tensor i3, int[] expand1, int[] expand2, int[] expand3, int[] sumdim, int unroll_dim=1) -> Tensor

    Each input gets size-1 dims at its ``expand`` positions; the three are multiplied
    (broadcast) and summed over ``sumdim`` (``nn.Bilinear``'s ``x1ᵀ W x2``): one ``einsum``
    over the expanded positions, so the broadcast product is never materialized.
    """
    rank = i1.ndim + len(expand1)
    letters = "abcdefghijklmnopqrstuvwxyz"[:rank]

    def spec(expand):
        return "".join(letters[d] for d in range(rank) if d not in set(expand))

    out = "".join(letters[d] for d in range(rank) if d not in set(sumdim))
    dtype = ctx.out_dtype or i1.dtype
    acc = opmath_dtype(dtype)
    return jnp.einsum(f"{spec(expand1)},{spec(expand2)},{spec(expand3)}->{out}", i1.astype(acc), i2.astype(acc),
                      i3.astype(acc), precision=_HIGHEST).astype(dtype)


def scaled_mm_meta(self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                   use_fast_accum=False):
    """``_scaled_mm``'s output, from meta tensors (torch's meta kernel makes CUDA's checks too: sizes
    divisible by 16, ``mat2`` column-major; its CPU kernel takes any)."""
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype or self.dtype)


@lowering(aten._scaled_mm.default)
def lower__scaled_mm_default(ctx, self, mat2, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                             use_fast_accum=False):
    """_scaled_mm(Tensor self, Tensor mat2, Tensor scale_a, Tensor scale_b, Tensor? bias=None, Tensor? scale_result=None, ScalarType? out_dtype=None, bool use_fast_accum=False) -> Tensor

    The float8 matmul of float8 training and inference (torchao's ``Float8Linear``): the
    product of the float8 operands accumulated in float32 (each product of two float8 values
    is exact there), times the tensorwise (one element) or rowwise (``[M, 1]`` and ``[1, N]``)
    scales, plus ``bias``; for a float8 result divided by ``scale_result`` first (as torch's CPU
    kernel; other result types ignore it), then rounded to ``out_dtype`` (default ``self``'s
    dtype; float8_e4m3fn saturates). ``use_fast_accum`` changes nothing here.

    Raises:
        LoweringError: scales that are neither tensorwise nor rowwise (blockwise MX scales).
    """  # noqa: E501 (the first line is the exact schema)
    m, n = self.shape[0], mat2.shape[1]
    for scale, shapes in ((scale_a, ((), (1,), (1, 1), (m, 1))), (scale_b, ((), (1,), (1, 1), (1, n)))):
        if tuple(scale.shape) not in shapes:
            raise LoweringError(str(aten._scaled_mm.default), ctx.location,
                                f"scales of shape {list(scale_a.shape)} and {list(scale_b.shape)} for a "
                                f"[{m}, {n}] product: only tensorwise and rowwise scales are supported")
    f32 = jnp.float32
    out = jax.lax.dot(self.astype(f32), mat2.astype(f32), precision=_HIGHEST, preferred_element_type=f32)
    out = out * scale_a.astype(f32).reshape(-1, 1) * scale_b.astype(f32).reshape(1, -1)
    if bias is not None:
        out = out + bias.astype(f32)
    dtype = ctx.out_dtype or (to_jax_dtype(out_dtype) if out_dtype is not None else self.dtype)
    if scale_result is not None and jnp.finfo(dtype).bits == 8:
        out = out / scale_result.astype(f32).reshape(())
    return cast(out, dtype)


#: ``torch.nn.functional.ScalingType`` values of the scale layouts ``_scaled_mm`` takes.
_TENSORWISE_OR_ROWWISE = (0, 1)


def scaled_mm_v2_meta(self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias, out_dtype,
                      contraction_dim=(), use_fast_accum=False):
    """``_scaled_mm_v2``'s output, from meta tensors (as :func:`scaled_mm_meta`)."""
    return self.new_empty((self.shape[0], mat2.shape[1]), dtype=out_dtype or self.dtype)


@lowering(aten._scaled_mm_v2.default)
def lower__scaled_mm_v2_default(ctx, self, mat2, scale_a, recipe_a, swizzle_a, scale_b, recipe_b, swizzle_b, bias,
                                out_dtype, contraction_dim=(), use_fast_accum=False):
    """_scaled_mm_v2(Tensor self, Tensor mat2, Tensor[] scale_a, int[] recipe_a, int[] swizzle_a, Tensor[] scale_b, int[] recipe_b, int[] swizzle_b, Tensor? bias, ScalarType? out_dtype, int[] contraction_dim=[], bool use_fast_accum=False) -> Tensor

    ``torch.nn.functional.scaled_mm``: with one tensorwise or rowwise scale per operand
    (``ScalingType.TensorWise``/``RowWise``), no swizzle and the usual contraction
    (``self``'s last dim with ``mat2``'s first), the ``_scaled_mm`` product.

    Raises:
        LoweringError: blockwise recipes, several scales, swizzled scales or another contraction.
    """  # noqa: E501 (the first line is the exact schema)
    plain = (len(scale_a) == len(scale_b) == 1 and list(recipe_a)[:1] == list(recipe_a)
             and list(recipe_b)[:1] == list(recipe_b) and recipe_a[0] in _TENSORWISE_OR_ROWWISE
             and recipe_b[0] in _TENSORWISE_OR_ROWWISE and not any(swizzle_a) and not any(swizzle_b)
             and list(contraction_dim) in ([], [1, 0]))
    if not plain:
        raise LoweringError(str(aten._scaled_mm_v2.default), ctx.location,
                            f"scale recipes {list(recipe_a)}/{list(recipe_b)}, swizzles {list(swizzle_a)}/"
                            f"{list(swizzle_b)}, contraction {list(contraction_dim)}: only one tensorwise or rowwise "
                            "scale per operand, unswizzled, over the usual contraction is supported")
    return lower__scaled_mm_default(ctx, self, mat2, scale_a[0], scale_b[0], bias, None, out_dtype, use_fast_accum)


@lowering(aten._int_mm.default)
def lower__int_mm_default(ctx, self, mat2):
    """_int_mm(Tensor self, Tensor mat2) -> Tensor

    The int8 matmul of dynamic int8 quantization (torchao): int8 operands, products summed
    exactly in int32 (``preferred_element_type``), an int32 result.
    """
    return jax.lax.dot(self, mat2, preferred_element_type=jnp.int32)


@lowering(aten._weight_int8pack_mm.default)
def lower__weight_int8pack_mm_default(ctx, self, mat2, scales):
    """_weight_int8pack_mm(Tensor self, Tensor mat2, Tensor scales) -> Tensor

    Int8 weight-only linear: ``self @ mat2.T`` with the int8 weight ``mat2`` ([N, K]) widened,
    times the per-output-channel ``scales``; computed in float32, rounded to ``self``'s dtype.
    """
    f32 = jnp.float32
    out = jax.lax.dot_general(self.astype(f32), mat2.astype(f32), (((self.ndim - 1,), (1,)), ((), ())),
                              precision=_HIGHEST)
    return (out * scales.astype(f32)).astype(ctx.out_dtype or self.dtype)
