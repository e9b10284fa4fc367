"""Row-blocked plumbing shared by the normalization kernels.

A norm over the last dim sees its input as [R, N] rows. Each program takes a
[block_rows, N] block (the whole row: the reduction never leaves the
program); per-feature parameter gradients come back as one fp32 partial sum
per row block, reduced by XLA, so no program waits on another (Triton runs
grid steps in parallel).
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
from jax.experimental import pallas as pl

from kernels._common import compiler_params, next_pow2, pad_axis, platform

#: Elements of one [block_rows, N] block per platform (block_rows derives from it).
#: TPU: the backward holds ~5 fp32 temporaries of a block plus double-buffered
#: I/O, which must stay inside the 16 MiB default scoped VMEM (1 MiB each here).
_BLOCK_ELEMS = {"tpu": 1 << 18, "gpu": 1 << 12, "interpret": 1 << 16}
_MIN_ROWS = {"tpu": 16, "gpu": 1, "interpret": 1}
_MAX_ROWS = {"tpu": 512, "gpu": 16, "interpret": 256}
#: Widest row one block holds (dispatch sends wider rows to the reference).
MAX_WIDTH = {"tpu": 1 << 17, "gpu": 1 << 16, "cpu": 1 << 17}


@dataclasses.dataclass(frozen=True)
class RowConfig:
    """Static facts of one row-kernel call."""

    n: int  # true row width
    n_pad: int  # width in the kernel (power of two on GPU)
    rows: int  # true row count
    block_rows: int
    eps: float
    platform: str
    has_weight: bool
    has_bias: bool = False

    @property
    def rows_pad(self) -> int:
        return -(-self.rows // self.block_rows) * self.block_rows

    @property
    def num_blocks(self) -> int:
        return self.rows_pad // self.block_rows

    @property
    def col_padded(self) -> bool:
        return self.n_pad != self.n


def row_config(x: jax.Array, *, eps: float, block_rows: int | None, interpret: bool,
               has_weight: bool, has_bias: bool = False) -> RowConfig:
    """Derives the static row blocking of ``x`` ([..., N]) for this platform.

    Raises:
        ValueError: a 0-d input or a bad ``block_rows``.
    """
    plat = platform(interpret)
    if not x.ndim:
        raise ValueError("cannot normalize a 0-d input: a norm is over the last dim")
    n = x.shape[-1]
    rows = math.prod(x.shape[:-1])
    n_pad = next_pow2(n) if plat == "gpu" else n
    if block_rows is None:
        block_rows = max(1, 1 << (max(1, _BLOCK_ELEMS[plat] // max(n_pad, 1)).bit_length() - 1))
        block_rows = min(block_rows, _MAX_ROWS[plat])
    elif block_rows <= 0 or (plat == "gpu" and block_rows & (block_rows - 1)):
        raise ValueError(f"block_rows={block_rows} must be positive (a power of two on GPU)")
    block_rows = max(_MIN_ROWS[plat], min(block_rows, next_pow2(max(rows, 1))))
    return RowConfig(n=n, n_pad=n_pad, rows=rows, block_rows=block_rows, eps=float(eps),
                     platform=plat, has_weight=has_weight, has_bias=has_bias)


def to_rows(x: jax.Array, cfg: RowConfig) -> jax.Array:
    """[..., N] → padded [rows_pad, n_pad]."""
    return pad_axis(pad_axis(x.reshape(cfg.rows, cfg.n), 0, cfg.rows_pad), 1, cfg.n_pad)


def to_vector(p: jax.Array, cfg: RowConfig) -> jax.Array:
    """A [N] parameter → padded [1, n_pad]."""
    if p.shape != (cfg.n,):
        raise ValueError(f"parameter of shape {p.shape} does not match the last dim {cfg.n}")
    return pad_axis(p.reshape(1, cfg.n), 1, cfg.n_pad)


def from_rows(y: jax.Array, cfg: RowConfig, shape) -> jax.Array:
    """Padded [rows_pad, n_pad] → [..., N] of ``shape``."""
    return y[:cfg.rows, :cfg.n].reshape(shape)


def sum_partials(partial: jax.Array, like: jax.Array) -> jax.Array:
    """Per-block [num_blocks, 1, n_pad] fp32 partial sums → a [1, n_pad] gradient like ``like``.

    ``like`` is the padded parameter; autodiff of :func:`to_vector` slices the padding.
    """
    return partial.sum(axis=0).astype(like.dtype)


def column_mask(shape, cfg: RowConfig) -> jax.Array | None:
    """True on real columns when the width was padded, else None."""
    if not cfg.col_padded:
        return None
    return jax.lax.broadcasted_iota(jnp.int32, shape, 1) < cfg.n


def row_call(kernel, cfg: RowConfig, *, inputs: list[str], outputs: list[tuple[str, object]],
             name: str):
    """``pallas_call`` over row blocks.

    Args:
        kernel: the kernel body (takes refs).
        cfg: the row configuration.
        inputs: per input, "rows" ([rows_pad, n_pad] blocked by rows) or
            "vector" ([1, n_pad], the same block for every program).
        outputs: per output, ("rows", dtype) or ("partial", dtype) — the latter
            a [num_blocks, 1, n_pad] per-block partial sum.
        name: kernel name for profiles and errors.
    """
    rows_spec = pl.BlockSpec((cfg.block_rows, cfg.n_pad), lambda i: (i, 0))
    vector_spec = pl.BlockSpec((1, cfg.n_pad), lambda i: (0, 0))
    partial_spec = pl.BlockSpec((None, 1, cfg.n_pad), lambda i: (i, 0, 0))
    in_specs = [rows_spec if kind == "rows" else vector_spec for kind in inputs]
    out_specs, out_shape = [], []
    for kind, dtype in outputs:
        if kind == "rows":
            out_specs.append(rows_spec)
            out_shape.append(jax.ShapeDtypeStruct((cfg.rows_pad, cfg.n_pad), dtype))
        else:
            out_specs.append(partial_spec)
            out_shape.append(jax.ShapeDtypeStruct((cfg.num_blocks, 1, cfg.n_pad), dtype))
    elems = cfg.block_rows * cfg.n_pad
    warps = 4 if elems <= 2048 else 8 if elems <= 8192 else 16
    return pl.pallas_call(
        kernel, out_shape=out_shape, grid=(cfg.num_blocks,), in_specs=in_specs,
        out_specs=out_specs, interpret=cfg.platform == "interpret", name=name,
        compiler_params=compiler_params(cfg.platform, semantics=("parallel",), num_warps=warps,
                                        num_stages=1))


def width_unsupported(backend: str, hidden: int | None, dtype) -> str | None:
    """Shared dispatch check of the norm kernels."""
    if hidden is not None and hidden > MAX_WIDTH[backend]:
        return f"hidden size {hidden} > {MAX_WIDTH[backend]} (one row must fit one block)"
    if dtype is not None and jnp.dtype(dtype) not in (jnp.dtype(jnp.float32),
                                                      jnp.dtype(jnp.bfloat16),
                                                      jnp.dtype(jnp.float16)):
        return f"dtype {jnp.dtype(dtype).name} not in (float32, bfloat16, float16)"
    return None
