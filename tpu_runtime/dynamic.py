"""Ops whose output shape depends on the data, in eager mode.

``nonzero`` (and ``argwhere``, ``torch.where(cond)``), ``masked_select``, boolean-mask
indexing (``x[mask]``, ``x[mask] = values``), ``unique`` (plain, ``dim=``,
``unique_consecutive``), ``bincount``, ``repeat_interleave`` with tensor repeats,
``pack_padded_sequence`` and CTC with tensor lengths (``2·max(target_lengths) + 1``
states) cannot be compiled for a shape known in advance, and the lowering table
(shared with the exporters, which have no data) refuses them. The runtime has the
data, so it resolves the length first: a small plan computes it on the device and
its value is read back — a sync point, as ``.item()`` is (fused eager runs its
pending graph first). The op then runs as a static-shape plan for that length: the
table's own row where one exists (``nonzero_static``, ``index.Tensor`` /
``index_put`` with integer indices, ``repeat_interleave(output_size=)``,
``_ctc_loss`` with int lengths), else a kernel here built on
``jnp.unique``/``jnp.bincount`` with a ``size``. ``linalg_lstsq`` (whose residuals exist
only at full rank) and ``allclose`` (a python bool) read a value back the same way.

Each distinct length is its own plan (compiled once, then cached), as any op on a
new shape is. A boolean mask that lives on the CPU needs no sync (its ``nonzero``
runs on the CPU, and indexing ops take CPU index tensors), nor do a packed sequence's
lengths, which torch keeps on the CPU. ``torch.linalg``'s error check of a factorization's
``info`` is read back the same way (a sync point, as on CUDA).
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax.numpy as jnp
import numpy as np
import torch

from tpu_runtime.cache import CACHE
from tpu_runtime.execute import _execute, run_op
from tpu_runtime.plans import OpPlan, custom_plan
from tpu_runtime.tensor import TpuTensor
from tpu_runtime.values import materialize, to_cpu

aten = torch.ops.aten
_MASKS = (torch.bool, torch.uint8)
_PLANS: dict[tuple, OpPlan] = {}
CACHE.on_clear(_PLANS.clear)


def _plan(key: tuple, name: str, fn: Callable, out_specs: tuple) -> OpPlan:
    plan = _PLANS.get(key)
    if plan is None:
        plan = _PLANS[key] = custom_plan(key, name, fn, out_specs)
    return plan


def _length(name: str, fn: Callable, *xs: TpuTensor, static: tuple = ()) -> int:
    """``fn(*values)`` (an integer scalar) computed on the device and read back: a sync point.

    ``static`` holds the python values ``fn`` closes over (part of the plan's key).
    """
    key = ("length", name, tuple(x._spec for x in xs), static)
    plan = _plan(key, f"{name} (output length)", lambda *v: (jnp.asarray(fn(*v), jnp.int64),),
                 (((), torch.int64),))
    return int(np.asarray(materialize(_execute(plan, list(xs)))))


def _bound(func: Any, args: tuple, kwargs: dict) -> list:
    """The call's arguments in schema order, defaults filled in."""
    return [args[i] if i < len(args) else kwargs.get(a.name, a.default_value)
            for i, a in enumerate(func._schema.arguments)]


# --------------------------------------------------------------------------- nonzero, masks


def _nonzero(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """nonzero(Tensor self) -> Tensor: ``nonzero_static`` with the counted size, laid out as the CPU's result:
    column-major, strides ``(1, n)`` (so ``.view()`` of it refuses and its columns are contiguous, as there)."""
    from tpu_runtime.memory_format import with_strides

    x = args[0]
    n = _length("nonzero", jnp.count_nonzero, x)
    out = run_op(aten.nonzero_static.default, (x,), {"size": n})
    return with_strides(out, (1, n)) if (1, n) != tuple(out.stride()) else out


def needs_masks(func: Any, args: tuple) -> bool:
    """Whether an indexing call (``index.Tensor``, ``index_put``) has a boolean mask that the
    table's static row cannot take: any mask of a read; a mask of a write of several values, or
    next to other indices (the table's row takes a write of one value through one mask alone, as a
    ``select``)."""
    indices = args[1]
    for i in indices:
        if i is not None and i.dtype in _MASKS:
            return func is aten.index.Tensor or args[2].numel() != 1 or sum(j is not None for j in indices) > 1
    return False


def expand_masks(self: torch.Tensor, indices: list) -> list:
    """``indices`` with each boolean mask replaced by the integer indices of its true
    elements (one index tensor per masked dim), as torch itself expands them.

    Raises:
        IndexError: a mask's shape differs from the dims of ``self`` it indexes.
    """
    out, dim = [], 0
    for i in indices:
        if i is None or i.dtype not in _MASKS:
            out.append(i)
            dim += 1
            continue
        k = i.dim()
        if k == 0 or tuple(i.shape) != tuple(self.shape[dim:dim + k]):
            raise IndexError(f"The shape of the mask {list(i.shape)} at index {dim} does not match the shape of "
                             f"the indexed tensor {list(self.shape)} at index {dim}"
                             + (" (0-d boolean indices are not supported on the tpu device)" if k == 0 else ""))
        out.extend(torch.nonzero(i).unbind(1))
        dim += k
    return out


def masked_indexing(func: Any, args: tuple, kwargs: dict) -> Any:
    """``index.Tensor`` / ``index_put`` with boolean masks: the masks become integer indices."""
    return run_op(func, (args[0], expand_masks(args[0], list(args[1]))) + tuple(args[2:]), kwargs)


def _masked_select(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """masked_select(Tensor self, Tensor mask) -> Tensor: ``self[mask]`` after broadcasting both."""
    self, mask = args[0], args[1]
    if tuple(self.shape) != tuple(mask.shape):
        self, mask = torch.broadcast_tensors(self, mask)
    if self.dim() == 0:  # both 0-d: one element, selected or not
        self, mask = self.reshape(1), mask.reshape(1)
    return masked_indexing(aten.index.Tensor, (self, [mask]), {})


# --------------------------------------------------------------------------- unique


def _check_zero_sizes(shape: tuple, d: int) -> None:
    """Refuse, as the CPU, unique slices along ``d`` of a tensor with an empty dimension other than ``d``.

    Raises:
        RuntimeError: torch's message."""
    if any(n == 0 for i, n in enumerate(shape) if i != d):
        raise RuntimeError("There are 0 sized dimensions, and they aren't selected, so unique cannot be applied")


def _rows(v: Any, d: int) -> Any:
    """``v`` as a matrix of its slices along ``d`` (sizes spelled out: no ``-1`` to infer when a size is 0)."""
    return jnp.moveaxis(v, d, 0).reshape(v.shape[d], math.prod(n for i, n in enumerate(v.shape) if i != d))


def _distinct_rows(rows: Any) -> Any:
    """The number of distinct rows of a 2-d array (NaNs are all distinct, as in torch)."""
    if rows.shape[0] == 0:
        return 0
    order = jnp.lexsort(rows.T[::-1]) if rows.shape[1] > 1 else jnp.argsort(rows[:, 0])
    s = rows[order]
    return 1 + jnp.sum(jnp.any(s[1:] != s[:-1], axis=1))


def _empty_long() -> Any:
    return jnp.zeros((0,), jnp.int64)


def _unique2(func: Any, args: tuple, kwargs: dict) -> tuple:
    """_unique2(Tensor self, bool sorted=True, bool return_inverse=False, bool return_counts=False)
    -> (Tensor, Tensor, Tensor): sorted unique values (NaNs distinct), the inverse and counts
    when asked for (empty otherwise, as on the CPU)."""
    x, _, want_inverse, want_counts = _bound(func, args, kwargs)
    n = _length("unique", lambda v: _distinct_rows(v.reshape(-1, 1)), x)
    shape, dtype = x._spec

    def fn(v: Any) -> tuple:
        vals, inverse, counts = jnp.unique(v.reshape(-1), return_inverse=True, return_counts=True, size=n,
                                           equal_nan=False)
        return (vals, inverse.reshape(shape) if want_inverse else _empty_long(),
                counts if want_counts else _empty_long())

    specs = (((n,), dtype), (shape if want_inverse else (0,), torch.int64), ((n if want_counts else 0,), torch.int64))
    plan = _plan(("unique", x._spec, n, want_inverse, want_counts), "aten._unique2", fn, specs)
    return _execute(plan, [x])


def _unique(func: Any, args: tuple, kwargs: dict) -> tuple:
    """_unique(Tensor self, bool sorted=True, bool return_inverse=False) -> (Tensor, Tensor): the
    older overload (index_fill's backward calls it), as :func:`_unique2` without counts."""
    x, is_sorted, want_inverse = _bound(func, args, kwargs)
    return _unique2(aten._unique2.default, (x, is_sorted, want_inverse, False), {})[:2]


def _unique_dim(func: Any, args: tuple, kwargs: dict) -> tuple:
    """unique_dim(Tensor self, int dim, bool sorted=True, bool return_inverse=False, bool return_counts=False)
    -> (Tensor, Tensor, Tensor): unique slices along ``dim``, sorted lexicographically (the
    inverse and counts are always computed, as on the CPU)."""
    x, dim = args[0], args[1]
    shape, dtype = x._spec
    d = dim % max(len(shape), 1)
    _check_zero_sizes(shape, d)

    def rows(v: Any) -> Any:
        return _rows(v, d)

    n = _length("unique_dim", lambda v: _distinct_rows(rows(v)), x, static=(d,))

    def fn(v: Any) -> tuple:
        vals, inverse, counts = jnp.unique(v, return_inverse=True, return_counts=True, axis=d, size=n,
                                           equal_nan=False)
        return vals, inverse.reshape(-1), counts

    out = tuple(n if i == d else s for i, s in enumerate(shape))
    specs = ((out, dtype), ((shape[d],), torch.int64), ((n,), torch.int64))
    return _execute(_plan(("unique_dim", x._spec, d, n), "aten.unique_dim", fn, specs), [x])


def _unique_consecutive(func: Any, args: tuple, kwargs: dict) -> tuple:
    """unique_consecutive(Tensor self, bool return_inverse=False, bool return_counts=False, int? dim=None)
    -> (Tensor, Tensor, Tensor): one element (or slice along ``dim``) per run of equal ones."""
    x, want_inverse, want_counts, dim = _bound(func, args, kwargs)
    shape, dtype = x._spec
    d = None if dim is None else dim % max(len(shape), 1)
    if d is not None:
        _check_zero_sizes(shape, d)

    def rows(v: Any) -> Any:
        return v.reshape(-1, 1) if d is None else _rows(v, d)

    def changes(v: Any) -> Any:
        r = rows(v)
        return jnp.concatenate([jnp.ones((min(r.shape[0], 1),), bool), jnp.any(r[1:] != r[:-1], axis=1)])

    n = _length("unique_consecutive", lambda v: jnp.sum(changes(v)), x, static=(d,))
    length = int(np.prod(shape)) if d is None else shape[d]

    def fn(v: Any) -> tuple:
        change = changes(v)
        starts = jnp.nonzero(change, size=n)[0]
        vals = v.reshape(-1)[starts] if d is None else jnp.take(v, starts, axis=d)
        inverse = jnp.cumsum(change.astype(jnp.int64)) - 1
        counts = jnp.diff(jnp.concatenate([starts, jnp.array([length])])).astype(jnp.int64)
        inv_shape = shape if d is None else (length,)
        return (vals, inverse.reshape(inv_shape) if want_inverse else _empty_long(),
                counts if want_counts else _empty_long())

    out = (n,) if d is None else tuple(n if i == d else s for i, s in enumerate(shape))
    inv = (shape if d is None else (length,)) if want_inverse else (0,)
    specs = ((out, dtype), (inv, torch.int64), ((n if want_counts else 0,), torch.int64))
    plan = _plan(("unique_consecutive", x._spec, d, n, want_inverse, want_counts), "aten.unique_consecutive", fn,
                 specs)
    return _execute(plan, [x])


# --------------------------------------------------------------------------- counts and repeats


def _bincount(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """bincount(Tensor self, Tensor? weights=None, SymInt minlength=0) -> Tensor: length
    ``max(self) + 1`` (at least ``minlength``); int64 counts, or summed weights (float32 for
    float32 weights, else float64, as on the CPU)."""
    x, weights, minlength = _bound(func, args, kwargs)
    if x.dim() != 1 or x.dtype.is_floating_point or x.dtype.is_complex or x.dtype == torch.bool:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is not None and tuple(weights.shape) != tuple(x.shape):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    def length(v: Any) -> Any:  # in int64: uint8's initial -1 and int8's 127 + 1 would wrap in the input's dtype
        v = v.astype(jnp.int64)
        return jnp.where(jnp.min(v, initial=0) < 0, -1, jnp.maximum(jnp.max(v, initial=-1) + 1, minlength))

    n = _length("bincount", length, x, static=(int(minlength),))
    if n < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        plan = _plan(("bincount", x._spec, n), "aten.bincount",
                     lambda v: (jnp.bincount(v.astype(jnp.int64), length=n),), (((n,), torch.int64),))
        return _execute(plan, [x])
    dtype = torch.float32 if weights.dtype == torch.float32 else torch.float64
    jdt = jnp.float32 if dtype == torch.float32 else jnp.float64
    plan = _plan(("bincount", x._spec, weights._spec, n), "aten.bincount",
                 lambda v, w: (jnp.bincount(v.astype(jnp.int64), w.astype(jdt), length=n).astype(jdt),),
                 (((n,), dtype),))
    return _execute(plan, [x, weights])


def _repeat_interleave(func: Any, args: tuple, kwargs: dict) -> TpuTensor:
    """repeat_interleave.Tensor(Tensor repeats, *, SymInt? output_size=None) -> Tensor: the
    table's row, given the output size (counted when the caller did not pass it)."""
    if kwargs.get("output_size") is not None:
        return run_op(func, args, kwargs)
    repeats = args[0]
    n = _length("repeat_interleave", lambda r: jnp.where(jnp.any(r < 0), -1, jnp.sum(r)), repeats)
    if n < 0:
        raise RuntimeError("repeats can not be negative")
    return run_op(func, (repeats,), {**kwargs, "output_size": n})


def _pack_padded_sequence(func: Any, args: tuple, kwargs: dict) -> tuple:
    """_pack_padded_sequence(Tensor input, Tensor lengths, bool batch_first) -> (Tensor, Tensor):
    the time steps of each sequence, step by step, gathered by one index op (the lengths are a
    CPU tensor, as torch requires: no sync). ``batch_sizes`` is a CPU tensor, as on CUDA."""
    x, lengths, batch_first = _bound(func, args, kwargs)
    if isinstance(lengths, TpuTensor) or lengths.dim() != 1:
        raise RuntimeError("'lengths' argument should be a 1D CPU int64 tensor, but got 1D tpu Long tensor"
                           if isinstance(lengths, TpuTensor) else "'lengths' argument should be a 1D tensor")
    if not x.numel():
        raise RuntimeError("Cannot pack empty tensors.")
    lens = lengths.to(torch.int64).tolist()
    if batch_first:
        x = x.transpose(0, 1)
    steps, batch = x.shape[0], x.shape[1]
    if len(lens) != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got {len(lens)} "
                           f"(batch_size={batch})")
    if lens[-1] <= 0:  # (the CPU's checks, in its order)
        raise RuntimeError("Length of all samples has to be greater than 0, but found an element in 'lengths' that "
                           "is <= 0")
    if any(a < b for a, b in zip(lens, lens[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. You can "
                           "pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")
    if lens[0] > steps:  # (the CPU's kernel reads past the input)
        raise RuntimeError(f"`lengths` must be at most the sequence length {steps}; got {lens}")
    batch_sizes = torch.tensor([sum(n > t for n in lens) for t in range(lens[0])], dtype=torch.int64)
    positions = torch.tensor([t * batch + b for t, size in enumerate(batch_sizes.tolist()) for b in range(size)],
                             dtype=torch.int64)
    return x.reshape((steps * batch,) + tuple(x.shape[2:]))[positions], batch_sizes


def _linalg_check_errors(func: Any, args: tuple, kwargs: dict) -> None:
    """_linalg_check_errors(Tensor info, str api_name, *, bool is_matrix) -> ():
    torch.linalg's check of a factorization's ``info``, read back (a sync point, as on CUDA),
    raising torch's errors."""
    info, api_name, is_matrix = _bound(func, args, kwargs)
    codes = np.asarray(materialize(info)).reshape(-1)
    bad = np.flatnonzero(codes)
    if not bad.size:
        return None
    code, where = int(codes[bad[0]]), "" if is_matrix or codes.size == 1 else f": (Batch element {int(bad[0])})"
    if code < 0:
        raise RuntimeError(f"{api_name}{where}: Argument {-code} has illegal value. Most certainly there is a bug in "
                           "the implementation calling the backend library.")
    for word, message in _LINALG_ERRORS:  # (the first word the api's name contains, in torch's order)
        if word in api_name:
            error = RuntimeError if word == "lu_factor" else torch.linalg.LinAlgError
            raise error(f"{api_name}{where}: " + message.format(code=code))
    raise RuntimeError(f"{api_name}: Unknown error code: {code}.")


#: torch's messages of a factorization's positive ``info``, by a word of the api's name (checked in this order).
_LINALG_ERRORS = (
    ("inv", "The diagonal element {code} is zero, the inversion could not be completed because the input matrix "
            "is singular."),
    ("solve", "The solver failed because the input matrix is singular."),
    ("cholesky", "The factorization could not be completed because the input is not positive-definite (the "
                 "leading minor of order {code} is not positive-definite)."),
    ("svd", "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
            "repeated singular values (error code: {code})."),
    ("eig", "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
            "repeated eigenvalues (error code: {code})."),
    ("syevd", "The algorithm failed to converge because the input matrix is ill-conditioned or has too many "
              "repeated eigenvalues (error code: {code})."),
    ("lstsq", "The least squares solution could not be computed because the input matrix does not have full rank "
              "(error code: {code})."),
    ("lu_factor", "U[{code},{code}] is zero and using it on lu_solve would result in a division by zero. If you "
                  "still want to perform the factorization, consider calling linalg.lu(A, pivot) or "
                  "linalg.lu_factor_ex(A, pivot)"),
)


def _assert_async(func: Any, args: tuple, kwargs: dict) -> None:
    """_assert_async(Tensor self) -> () / _assert_async.msg(Tensor self, str assert_msg) -> (): the
    one-element condition read back (a sync point; CUDA asserts on the device later) and torch's
    CPU kernel run on it, raising its errors (``assert_msg``, or an empty or non-boolean tensor's)."""
    self, *rest = args
    func(to_cpu(self), *rest, **kwargs)


def _lengths(x: Any) -> list[int]:
    """Sequence lengths as python ints: a CPU tensor as is, a tpu tensor read back (a sync point)."""
    if isinstance(x, TpuTensor):
        return np.asarray(materialize(x)).astype(np.int64).reshape(-1).tolist()
    return x.to(torch.int64).reshape(-1).tolist()


def _ctc_loss(func: Any, args: tuple, kwargs: dict) -> Any:
    """_ctc_loss.Tensor / _ctc_loss_backward.Tensor called directly (``F.ctc_loss`` reaches the
    int-list overloads through :func:`ctc_loss_lengths`): the lengths fix the shapes of the forward variables, so they are read (tpu lengths: a sync
    point) and the table's int-list overload runs; CPU targets move to the device, as on CUDA."""
    bound = _bound(func, args, kwargs)
    lengths = 2 if func is aten._ctc_loss.Tensor else 3  # position of input_lengths
    bound[lengths], bound[lengths + 1] = _lengths(bound[lengths]), _lengths(bound[lengths + 1])
    targets = bound[lengths - 1]
    if not isinstance(targets, TpuTensor):
        bound[lengths - 1] = targets.to(torch.int64).to("tpu")
    default = aten._ctc_loss.default if func is aten._ctc_loss.Tensor else aten._ctc_loss_backward.default
    return run_op(default, tuple(bound), {})


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def _lstsq(func: Any, args: tuple, kwargs: dict) -> tuple:
    """linalg_lstsq(Tensor self, Tensor b, float? rcond=None, *, str? driver=None) -> (solution, residuals, rank,
    singular_values), as torch's CPU kernel (default driver ``gelsy``): the minimum-norm solution from the SVD,
    singular values at or below ``rcond · σmax`` dropped (``gels`` assumes full rank: the same solution there);
    ranks for gelsy/gelsd/gelss, singular values for gelsd/gelss, squared residuals for gels/gelsd/gelss when
    ``m > n`` and every matrix has full rank. That last condition decides an output's shape, so the ranks are
    read back then (a sync point); the other outputs an asked driver omits are empty, as torch's. Residuals and
    singular values of a complex input are real."""
    A, B, rcond, driver = _bound(func, args, kwargs)
    driver = driver or "gelsy"
    if driver not in _LSTSQ_DRIVERS:
        raise RuntimeError(f"torch.linalg.lstsq: parameter `driver` should be one of {_LSTSQ_DRIVERS}")
    if A.dim() < 2 or B.dim() < A.dim() - 1 or B.dim() > A.dim():
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to other.dim() and "
                           "(input.dim() - other.dim()) <= 1")
    vector = B.dim() == A.dim() - 1
    (m, n), k = A.shape[-2:], 1 if vector else B.shape[-1]
    batch = tuple(torch.broadcast_shapes(A.shape[:-2], B.shape[:-2 + vector]))
    dtype = A.dtype

    def fn(a: Any, b: Any) -> tuple:
        b = b[..., None] if vector else b
        a = jnp.broadcast_to(a, batch + a.shape[-2:])
        b = jnp.broadcast_to(b, batch + b.shape[-2:]).astype(a.dtype)
        u, sv, vh = jnp.linalg.svd(a, full_matrices=False)
        cutoff = jnp.finfo(a.dtype).eps * max(m, n) if rcond is None or rcond < 0 else rcond
        keep = sv > cutoff * sv[..., :1]
        inv = jnp.where(keep, 1 / jnp.where(keep, sv, 1), 0)
        x = jnp.conj(jnp.swapaxes(vh, -1, -2)) @ (inv[..., None] * (jnp.conj(jnp.swapaxes(u, -1, -2)) @ b))
        residuals = jnp.sum(jnp.abs(a @ x - b) ** 2, axis=-2)
        return x[..., 0] if vector else x, residuals, jnp.sum(keep, axis=-1), sv

    real = dtype.to_real()  # (a complex input's residuals and singular values are real)
    specs = ((batch + ((n,) if vector else (n, k)), dtype), (batch + (k,), real), (batch, torch.int64),
             (batch + (min(m, n),), real))
    x, residuals, rank, sv = _execute(_plan(("lstsq", A._spec, B._spec, rcond), "aten.linalg_lstsq", fn, specs),
                                      [A, B])
    empty = torch.empty((0,), dtype=real, device=A.device)
    if driver == "gelsy" or m <= n or int(rank.min().item() if rank.numel() else n) < n:
        residuals = empty
    if driver == "gels":
        rank = torch.empty((0,), dtype=torch.int64, device=A.device)
    return x, residuals, rank, sv if driver in ("gelsd", "gelss") else empty


def _allclose(func: Any, args: tuple, kwargs: dict) -> bool:
    """allclose(Tensor self, Tensor other, float rtol, float atol, bool equal_nan) -> bool: ``isclose``
    and ``all`` on the device, one boolean read back (a sync point, as ``.item()``)."""
    self, other, rtol, atol, equal_nan = _bound(func, args, kwargs)
    return bool(torch.isclose(self, other, rtol=rtol, atol=atol, equal_nan=equal_nan).all().item())


def ctc_loss_lengths(log_probs: Any, targets: Any, input_lengths: Any, target_lengths: Any, blank: int = 0,
                     reduction: int = 1, zero_infinity: bool = False) -> Any:
    """``ctc_loss.Tensor`` for tpu tensors (registered at the AutogradPrivateUse1 key): as on CUDA,
    the lengths (CPU, or tpu: a sync point) become ints and ``ctc_loss.IntList`` runs, so CPU
    length tensors work with every reduction (torch's composite for tensor subclasses would divide
    the tpu loss by the CPU ``target_lengths``). While ``torch.compile`` traces, the composite runs."""
    tracing = any(isinstance(x, torch._subclasses.FakeTensor) or (type(x) is TpuTensor and x._fake is not None)
                  for x in (log_probs, targets, input_lengths, target_lengths))
    if tracing or type(log_probs) is not TpuTensor:
        return aten.ctc_loss.Tensor.decompose(log_probs, targets, input_lengths, target_lengths, blank, reduction,
                                              zero_infinity)
    return aten.ctc_loss.IntList(log_probs, targets, _lengths(input_lengths), _lengths(target_lengths), blank,
                                 reduction, zero_infinity)


#: Dispatcher entries: ops with a data-dependent output shape.
HANDLERS: dict[Any, Callable] = {
    aten.nonzero.default: _nonzero,
    aten.masked_select.default: _masked_select,
    aten._unique.default: _unique,
    aten._unique2.default: _unique2,
    aten.unique_dim.default: _unique_dim,
    aten.unique_consecutive.default: _unique_consecutive,
    aten.bincount.default: _bincount,
    aten.repeat_interleave.Tensor: _repeat_interleave,
    aten._pack_padded_sequence.default: _pack_padded_sequence,
    aten._linalg_check_errors.default: _linalg_check_errors,
    aten._assert_async.default: _assert_async,
    aten._assert_async.msg: _assert_async,
    aten.allclose.default: _allclose,
    aten.linalg_lstsq.default: _lstsq,
    aten._ctc_loss.Tensor: _ctc_loss,
    aten._ctc_loss_backward.Tensor: _ctc_loss,
}

__all__ = ["HANDLERS", "needs_masks", "masked_indexing", "expand_masks", "ctc_loss_lengths"]
