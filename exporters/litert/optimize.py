"""Peephole passes on the emitted graph (run to a fixed point, then dead-code elimination).

* fold a per-channel ADD/SUB/MUL constant after CONV_2D / CONV_3D / DEPTHWISE_CONV_2D /
  FULLY_CONNECTED / TRANSPOSE_CONV into its weights and bias (bias add, BatchNorm);
* fuse RELU / RELU6 / RELU_N1_TO_1 (and ``MINIMUM(RELU(x), 6)``) into the producer's
  ``fusedActivationFunction``; a transposed conv's crop (a SLICE keeping the channels) lets
  both its bias / BatchNorm and its activation through;
* SUM followed by a multiply by 1/N → MEAN; consecutive scalar multiplies merge and
  vanish when their product is 1 (AVERAGE_POOL_2D × k² ÷ k²);
* RESHAPE of RESHAPE → one RESHAPE; TRANSPOSE of TRANSPOSE → one (or none);
* a broadcast materialized as ``ADD(x, zeros)`` whose readers are all broadcasting binary ops
  that come out at the same shape from ``x`` itself → those readers read ``x``;
* FULLY_CONNECTED → RESHAPE (…, S, E) read only by SLICEs along S (a packed QKV
  projection) → one FULLY_CONNECTED per slice on its rows of the weights;
* a scalar MUL reached from a FULLY_CONNECTED through RESHAPE / TRANSPOSE only (attention's
  query scaling) → folded into that FULLY_CONNECTED's weights and bias;
* ``ADD(MUL(gate, zeros), y)`` with a LOGISTIC / TANH gate (an LSTM's first step, ``f·c0``
  with a zero initial state) → ``y``;
* SLICE of a RESHAPE that only adds / drops size-1 dims → RESHAPE of a SLICE (so the
  RESHAPEs around a GRU's gate split merge away);
* SLICE of a CONCATENATION that stays inside one operand → SLICE of that operand, or the
  operand itself when it takes all of it (``torch.stack`` then indexing, an RNN's ``h_n[k]``).
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from exporters.litert.ir import Graph, Op, Tensor

ACT = schema.ActivationFunctionType
_ACTS = {"RELU": ACT.RELU, "RELU6": ACT.RELU6, "RELU_N1_TO_1": ACT.RELU_N1_TO_1}
#: Ops whose fused activation both the reference kernels and XNNPACK honour.
_FUSES_ACT = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV",
              "TRANSPOSE_CONV", "MAX_POOL_2D", "AVERAGE_POOL_2D", "CONV_3D_TRANSPOSE"}
#: op → (index of weights input, output-channel axis of the weights, bias input index)
_LINEAR = {"CONV_2D": (1, 0, 2), "DEPTHWISE_CONV_2D": (1, 3, 2), "FULLY_CONNECTED": (1, 0, 2),
           "TRANSPOSE_CONV": (1, 0, 3), "CONV_3D": (1, 4, 2), "CONV_3D_TRANSPOSE": (1, 3, 3)}


def optimize(graph: Graph) -> None:
    """Rewrite ``graph`` in place."""
    for _ in range(100):
        changed = False
        # the maps change only when a rewrite reports a change (a set of ops: a list's `in` made this quadratic)
        users, producers, alive = graph.consumers(), graph.producers(), set(graph.ops)
        for fn in (_fold_affine, _fuse_activation, _hoist_scalar_mul, _mean, _merge_scalar_mul, _merge_reshape,
                   _merge_transpose, _drop_broadcast, _split_linear, _fold_scale_through_layout,
                   _zero_product, _slice_before_reshape, _slice_of_concat):
            for op in list(graph.ops):
                if op in alive and fn(graph, op, users, producers):
                    changed = True
                    users, producers, alive = graph.consumers(), graph.producers(), set(graph.ops)
        graph.remove_dead()
        if not changed:
            return


def _sole_user(graph: Graph, t: Tensor, users: dict) -> Op | None:
    """The only consumer of ``t`` when ``t`` is not a graph output."""
    ops = users.get(t, [])
    if len(ops) != 1 or t in graph.outputs:
        return None
    return ops[0]


def _bypass(graph: Graph, op: Op, new_out: Tensor) -> None:
    """Remove ``op`` (single input/output path) making its readers read ``new_out``."""
    graph.ops.remove(op)
    graph.replace_uses(op.outputs[0], new_out)


def _const_operand(op: Op, x: Tensor) -> Tensor | None:
    if len(op.inputs) != 2:
        return None
    a, b = op.inputs
    if a is x and b is not None and b.is_const:
        return b
    if b is x and a is not None and a.is_const and op.code in ("ADD", "MUL"):
        return a
    return None


def _per_channel(c: Tensor, channels: int, rank: int) -> np.ndarray | None:
    """The constant as a [channels] vector if it only varies along the last axis."""
    data = np.asarray(c.data)
    if data.ndim > rank or any(d != 1 for d in data.shape[:-1]):
        return None
    if data.size == 1:
        return np.full(channels, data.reshape(()), data.dtype)
    if data.ndim >= 1 and data.shape[-1] == channels:
        return data.reshape(channels)
    return None


def _fold_affine(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code not in _LINEAR or op.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE:
        return False
    wi, axis, bi = _LINEAR[op.code]
    if not op.inputs[wi].is_const or (len(op.inputs) > bi and op.inputs[bi] is not None
                                      and not op.inputs[bi].is_const):
        return False
    y = op.outputs[0]
    nxt = _sole_user(graph, y, users)
    if nxt is not None and _crops_only(nxt):  # a transposed conv's crop: per-channel constants pass through it
        y = nxt.outputs[0]
        nxt = _sole_user(graph, y, users)
    if nxt is None or nxt.code not in ("ADD", "SUB", "MUL") or nxt.options.get("fusedActivationFunction", 0):
        return False
    c = _const_operand(nxt, y)
    if c is None or np.dtype(c.dtype) != np.dtype(y.dtype):
        return False
    w = op.inputs[wi].data
    has_bias = len(op.inputs) > bi and op.inputs[bi] is not None
    b = op.inputs[bi].data if has_bias else np.zeros(w.shape[axis], w.dtype)
    vec = _per_channel(c, int(w.shape[axis]), len(y.shape))
    if vec is None or np.broadcast_shapes(tuple(c.shape), tuple(y.shape)) != tuple(y.shape):
        return False
    if nxt.code == "ADD":
        b = b + vec
    elif nxt.code == "SUB":
        b = b - vec
    else:
        shape = [1] * w.ndim
        shape[axis] = -1
        w = w * vec.reshape(shape)
        b = b * vec
    op.inputs[wi] = Tensor(w.shape, w.shape, w.dtype, op.inputs[wi].name, np.ascontiguousarray(w, w.dtype))
    while len(op.inputs) <= bi:
        op.inputs.append(None)
    op.inputs[bi] = Tensor(b.shape, b.shape, b.dtype, f"{op.inputs[wi].name}_bias", np.ascontiguousarray(b, b.dtype))
    _bypass(graph, nxt, y)
    return True


def _fuse_activation(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code == "MINIMUM":  # MINIMUM(RELU(x), 6) → RELU6(x)
        x, c = op.inputs if not op.inputs[0].is_const else op.inputs[::-1]
        if c is not None and c.is_const and c.data.size == 1 and float(c.data.reshape(())) == 6.0:
            src = producers.get(x)
            if src is None or _sole_user(graph, x, users) is not op or tuple(x.shape) != tuple(op.outputs[0].shape):
                return False
            if src.code == "RELU":
                src.code = "RELU6"
                _bypass(graph, op, x)
                return True
            if src.code in _FUSES_ACT and src.options.get("fusedActivationFunction") == ACT.RELU:
                src.options["fusedActivationFunction"] = ACT.RELU6
                _bypass(graph, op, x)
                return True
        return False
    if op.code not in _ACTS:
        return False
    x = op.inputs[0]
    src = producers.get(x)
    if src is not None and _crops_only(src) and _sole_user(graph, x, users) is op:
        # RELU(crop(y)) = crop(RELU(y)): the activation goes into y's producer, the crop stays
        inner = producers.get(src.inputs[0])
        if inner is not None and inner.code in _FUSES_ACT and _sole_user(graph, src.inputs[0], users) is src \
                and inner.options.get("fusedActivationFunction", ACT.NONE) == ACT.NONE \
                and np.dtype(x.dtype) == np.float32:
            inner.options["fusedActivationFunction"] = _ACTS[op.code]
            _bypass(graph, op, x)
            return True
    if src is None or src.code not in _FUSES_ACT or _sole_user(graph, x, users) is not op:
        return False
    if src.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE or np.dtype(x.dtype) != np.float32:
        return False
    if src.code in ("ADD", "SUB", "MUL", "DIV") and tuple(x.shape) != tuple(op.outputs[0].shape):
        return False
    src.options["fusedActivationFunction"] = _ACTS[op.code]
    _bypass(graph, op, x)
    return True


def _crops_only(op: Op) -> bool:
    """A SLICE with constant bounds that keeps the whole last (channel) axis."""
    if op.code != "SLICE" or not op.inputs[1].is_const or not op.inputs[2].is_const:
        return False
    begin, size = [int(v) for v in op.inputs[1].data], [int(v) for v in op.inputs[2].data]
    last = int(op.inputs[0].shape[-1])
    return bool(begin) and begin[-1] == 0 and size[-1] in (-1, last)


def _mean(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code != "SUM" or op.outputs[0].dtype != np.float32:
        return False
    x, axes = op.inputs
    y = op.outputs[0]
    nxt = _sole_user(graph, y, users)
    if nxt is None or nxt.code != "MUL" or any(s < 0 for i, s in enumerate(x.signature) if i in axes.data):
        return False
    c = _const_operand(nxt, y)
    if c is None or c.data.size != 1:
        return False
    n = int(np.prod([x.shape[int(a)] for a in np.atleast_1d(axes.data)]))
    if not np.isclose(float(c.data.reshape(())) * n, 1.0, rtol=1e-6, atol=0):
        return False
    op.code = "MEAN"
    _bypass(graph, nxt, y)
    return True


def _hoist_scalar_mul(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """RESHAPE → MUL(scalar) becomes MUL(scalar) → RESHAPE (so SUM·(1/N) can become MEAN)."""
    if op.code != "RESHAPE":
        return False
    y = op.outputs[0]
    nxt = _sole_user(graph, y, users)
    if nxt is None or nxt.code != "MUL" or nxt.options.get("fusedActivationFunction", 0):
        return False
    c = _const_operand(nxt, y)
    if c is None or c.data.size != 1 or c.data.ndim > len(op.inputs[0].shape):
        return False
    src = producers.get(op.inputs[0])
    if src is None or src.code != "SUM":
        return False
    x, z = op.inputs[0], nxt.outputs[0]
    scaled = Tensor(x.shape, x.signature, x.dtype, f"{x.name}_scaled")
    nxt.inputs, nxt.outputs = [x, Tensor((), (), c.dtype, c.name, c.data.reshape(()))], [scaled]
    op.inputs = [scaled] + op.inputs[1:]
    op.outputs = [z]
    graph.ops.remove(nxt)
    graph.ops.insert(graph.ops.index(op), nxt)
    return True


def _merge_scalar_mul(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code != "MUL" or op.options.get("fusedActivationFunction", 0):
        return False
    y = op.outputs[0]
    x = next((t for t in op.inputs if not t.is_const), None)
    c = _const_operand(op, x) if x is not None else None
    if c is None or c.data.size != 1 or np.dtype(c.dtype).kind != "f":
        return False
    nxt = _sole_user(graph, y, users)
    if nxt is None or nxt.code != "MUL" or nxt.options.get("fusedActivationFunction", 0):
        return False
    c2 = _const_operand(nxt, y)
    if c2 is None or c2.data.size != 1 or tuple(y.shape) != tuple(nxt.outputs[0].shape):
        return False
    prod = np.asarray(float(c.data.reshape(())) * float(c2.data.reshape(())), c.dtype).reshape(c.data.shape)
    graph.ops.remove(op)
    nxt.inputs = [x, Tensor(prod.shape, prod.shape, prod.dtype, c.name, prod)]
    if np.isclose(float(prod.reshape(())), 1.0, rtol=1e-6, atol=0) and tuple(x.shape) == tuple(y.shape) \
            and x not in graph.inputs:
        _bypass(graph, nxt, x)
    return True


def _merge_reshape(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code != "RESHAPE":
        return False
    src = producers.get(op.inputs[0])
    if src is not None and src.code == "RESHAPE" and op.inputs[1].is_const:
        op.inputs = [src.inputs[0], op.inputs[1]]
        return True
    x, y = op.inputs[0], op.outputs[0]
    if list(x.signature) == list(y.signature) and list(x.shape) == list(y.shape) and not x.dynamic \
            and y not in graph.outputs and x not in graph.inputs and not x.is_const:
        _bypass(graph, op, x)
        return True
    return False


def _merge_transpose(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    if op.code != "TRANSPOSE" or not op.inputs[1].is_const:
        return False
    perm = [int(p) for p in op.inputs[1].data]
    src = producers.get(op.inputs[0])
    if src is not None and src.code == "TRANSPOSE" and src.inputs[1].is_const:
        inner = [int(p) for p in src.inputs[1].data]
        composed = np.asarray([inner[p] for p in perm], np.int32)
        op.inputs = [src.inputs[0], Tensor(composed.shape, composed.shape, composed.dtype,
                                           op.inputs[1].name, composed)]
        return True
    x, y = op.inputs[0], op.outputs[0]
    if perm == list(range(len(perm))) and y not in graph.outputs and x not in graph.inputs:
        _bypass(graph, op, x)
        return True
    return False


_BROADCASTING = {"ADD", "SUB", "MUL", "DIV", "MAXIMUM", "MINIMUM", "SQUARED_DIFFERENCE"}


def _drop_broadcast(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``m = ADD(x, zeros)`` read only by broadcasting binary ops whose result shape does not
    depend on ``m``'s extra dims: let them broadcast ``x`` themselves (one op less)."""
    if op.code != "ADD" or op.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE:
        return False
    x, m = op.inputs[0], op.outputs[0]
    z = _const_operand(op, x)
    if z is None or x.is_const or x.dynamic or m.dynamic or m in graph.outputs \
            or np.dtype(x.dtype).kind != "f" or np.any(np.asarray(z.data) != 0):
        return False
    readers = users.get(m, [])
    if not readers:
        return False
    for r in readers:
        if r.code not in _BROADCASTING or len(r.inputs) != 2 or r.inputs[0] is r.inputs[1]:
            return False
        other = r.inputs[1] if r.inputs[0] is m else r.inputs[0]
        out = tuple(r.outputs[0].shape)
        if other is None or other.dynamic or len(other.shape) != len(out) \
                or np.broadcast_shapes(tuple(x.shape), tuple(other.shape)) != out:
            return False
    for r in readers:
        r.inputs = [x if t is m else t for t in r.inputs]
    graph.ops.remove(op)
    return True


def _split_linear(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``SLICE(RESHAPE(FULLY_CONNECTED(x, W, b), (…, S, E)))`` along S, for every reader of the
    RESHAPE → ``RESHAPE(FULLY_CONNECTED(x, W[rows], b[rows]))``: no RESHAPE + SLICE copies of the
    packed projection (litert-torch's Q/K/V split costs a TRANSPOSE and three SLICEs)."""
    if op.code != "FULLY_CONNECTED" or not op.options.get("keepNumDims") or op.inputs[1] is None \
            or not op.inputs[1].is_const or op.inputs[1].quant is not None \
            or (len(op.inputs) > 2 and op.inputs[2] is not None and not op.inputs[2].is_const):
        return False
    y = op.outputs[0]
    reshape = _sole_user(graph, y, users)
    if reshape is None or reshape.code != "RESHAPE" or y.dynamic:
        return False
    r = reshape.outputs[0]
    lead = tuple(y.shape[:-1])
    if r.dynamic or r in graph.outputs or len(r.shape) != len(lead) + 2 or tuple(r.shape[:-2]) != lead:
        return False
    e = int(r.shape[-1])
    slices = users.get(r, [])
    if not slices:
        return False
    for sl in slices:
        if sl.code != "SLICE" or sl.inputs[0] is not r or not sl.inputs[1].is_const or not sl.inputs[2].is_const:
            return False
        begin, size = [int(v) for v in sl.inputs[1].data], [int(v) for v in sl.inputs[2].data]
        full = [int(d) for d in r.shape]
        if any(bg != 0 for bg in begin[:-2] + begin[-1:]) or any(
                sz not in (-1, d) for sz, d in zip(size[:-2] + size[-1:], full[:-2] + full[-1:])):
            return False
    w = op.inputs[1].data
    b = op.inputs[2].data if len(op.inputs) > 2 and op.inputs[2] is not None else None
    at = graph.ops.index(op)
    new = []
    for sl in slices:
        begin, size = int(sl.inputs[1].data[-2]), int(sl.inputs[2].data[-2])
        size = int(r.shape[-2]) - begin if size == -1 else size
        rows = slice(begin * e, (begin + size) * e)
        ws = np.ascontiguousarray(w[rows])
        wt = Tensor(ws.shape, ws.shape, ws.dtype, f"{op.inputs[1].name}_{begin}", ws)
        bt = None
        if b is not None:
            bs = np.ascontiguousarray(b[rows])
            bt = Tensor(bs.shape, bs.shape, bs.dtype, f"{op.inputs[2].name}_{begin}", bs)
        dims = lead + (size * e,)
        sig = tuple(y.signature[:-1]) + (size * e,)
        part = Tensor(dims, sig, y.dtype, f"{y.name}_{begin}")
        shape = np.asarray(sl.outputs[0].shape, np.int32)
        new.append(Op("FULLY_CONNECTED", [op.inputs[0], wt, bt], [part], dict(op.options), op.options_type))
        new.append(Op("RESHAPE", [part, Tensor(shape.shape, shape.shape, shape.dtype, f"{y.name}_{begin}_shape",
                                               shape)], list(sl.outputs)))
    for dead in [op, reshape] + slices:
        graph.ops.remove(dead)
    graph.ops[at:at] = new
    return True


def _fold_scale_through_layout(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``MUL(layout(FULLY_CONNECTED(x, W, b)), s)`` with a scalar ``s`` and ``layout`` a chain of
    single-reader RESHAPE / TRANSPOSE → ``layout(FULLY_CONNECTED(x, s·W, s·b))``."""
    if op.code != "MUL" or op.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE:
        return False
    x = next((t for t in op.inputs if t is not None and not t.is_const), None)
    c = _const_operand(op, x) if x is not None else None
    z = op.outputs[0]
    if c is None or c.data.size != 1 or z in graph.outputs or tuple(z.shape) != tuple(x.shape) \
            or np.dtype(c.dtype) != np.dtype(x.dtype):
        return False
    t = x
    src = producers.get(t)
    while src is not None and src.code in ("RESHAPE", "TRANSPOSE") and _sole_user(graph, t, users) is not None:
        t = src.inputs[0]
        src = producers.get(t)
    if src is None or src.code != "FULLY_CONNECTED" or _sole_user(graph, t, users) is None \
            or src.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE:
        return False
    w = src.inputs[1]
    b = src.inputs[2] if len(src.inputs) > 2 else None
    if w is None or not w.is_const or w.quant is not None or (b is not None and not b.is_const):
        return False
    k = np.asarray(c.data).reshape(())
    ws = np.ascontiguousarray(w.data * k, w.dtype)
    src.inputs[1] = Tensor(ws.shape, ws.shape, ws.dtype, f"{w.name}_scaled", ws)
    if b is not None:
        bs = np.ascontiguousarray(b.data * k, b.dtype)
        src.inputs[2] = Tensor(bs.shape, bs.shape, bs.dtype, f"{b.name}_scaled", bs)
    _bypass(graph, op, x)
    return True


def _zero_product(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``ADD(MUL(g, zeros), y)`` where ``g`` comes out of LOGISTIC / TANH (finite for finite
    inputs) and the ADD has ``y``'s shape → readers of the ADD read ``y``."""
    if op.code != "ADD" or op.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE or len(op.inputs) != 2:
        return False
    out = op.outputs[0]
    if out in graph.outputs:
        return False
    for m, y in (op.inputs, op.inputs[::-1]):
        mul = producers.get(m)
        if mul is None or mul.code != "MUL" or mul.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE \
                or len(mul.inputs) != 2 or _sole_user(graph, m, users) is not op or y is None \
                or tuple(y.shape) != tuple(out.shape) or list(y.signature) != list(out.signature):
            continue
        g, z = (mul.inputs if mul.inputs[1] is not None and mul.inputs[1].is_const else mul.inputs[::-1])
        src = producers.get(g) if g is not None else None
        if z is None or not z.is_const or np.any(np.asarray(z.data) != 0) or src is None \
                or src.code not in ("LOGISTIC", "TANH"):
            continue
        _bypass(graph, op, y)
        return True
    return False


def _slice_before_reshape(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``SLICE(RESHAPE(x))`` where the RESHAPE only adds / drops size-1 dims →
    ``RESHAPE(SLICE(x))``; the new RESHAPE then merges with the reader's."""
    if op.code != "SLICE" or not op.inputs[1].is_const or not op.inputs[2].is_const:
        return False
    r = op.inputs[0]
    src = producers.get(r)
    if src is None or src.code != "RESHAPE":
        return False
    x, y = src.inputs[0], op.outputs[0]
    if x.dynamic or r.dynamic or y.dynamic or x.is_const:
        return False
    xs, rs = [int(d) for d in x.shape], [int(d) for d in r.shape]
    if [d for d in xs if d != 1] != [d for d in rs if d != 1]:
        return False
    begin, size = [int(v) for v in op.inputs[1].data], [int(v) for v in op.inputs[2].data]
    size = [d - b if s == -1 else s for s, b, d in zip(size, begin, rs)]
    picked = [(b, s) for b, s, d in zip(begin, size, rs) if d != 1]
    if any((b, s) != (0, 1) for b, s, d in zip(begin, size, rs) if d == 1):
        return False
    it = iter(picked)
    xb, xz = zip(*[next(it) if d != 1 else (0, 1) for d in xs]) if xs else ((), ())
    dims = tuple(xz)
    b_arr, z_arr = np.asarray(xb, np.int32), np.asarray(xz, np.int32)
    part = Tensor(dims, dims, y.dtype, f"{y.name}_pre")
    shape = np.asarray(y.shape, np.int32)
    new_slice = Op("SLICE", [x, Tensor(b_arr.shape, b_arr.shape, b_arr.dtype, f"{y.name}_begin", b_arr),
                             Tensor(z_arr.shape, z_arr.shape, z_arr.dtype, f"{y.name}_size", z_arr)], [part])
    reshape = Op("RESHAPE", [part, Tensor(shape.shape, shape.shape, shape.dtype, f"{y.name}_shape", shape)], [y])
    at = graph.ops.index(op)
    graph.ops[at:at + 1] = [new_slice, reshape]
    return True


def _slice_of_concat(graph: Graph, op: Op, users: dict, producers: dict) -> bool:
    """``SLICE(CONCATENATION(a, b, …))`` inside one operand → a SLICE of that operand (none when whole)."""
    if op.code != "SLICE" or not op.inputs[1].is_const or not op.inputs[2].is_const:
        return False
    cat = producers.get(op.inputs[0])
    y = op.outputs[0]
    if cat is None or cat.code != "CONCATENATION" or cat.options.get("fusedActivationFunction", 0) \
            or y.dynamic or any(t.dynamic for t in cat.inputs):
        return False
    rank = len(y.shape)
    axis = int(cat.options.get("axis", 0)) % rank
    begin, size = [int(v) for v in op.inputs[1].data], [int(v) for v in op.inputs[2].data]
    size = [d - b if s == -1 else s for s, b, d in zip(size, begin, op.inputs[0].shape)]
    start = 0
    for part in cat.inputs:
        extent = int(part.shape[axis])
        if start <= begin[axis] and begin[axis] + size[axis] <= start + extent:
            break
        start += extent
    else:
        return False
    begin[axis] -= start
    if begin == [0] * rank and size == [int(d) for d in part.shape] and y not in graph.outputs \
            and part not in graph.inputs:
        _bypass(graph, op, part)
        return True
    b_arr = np.asarray(begin, np.int32)
    op.inputs = [part, Tensor(b_arr.shape, b_arr.shape, b_arr.dtype, f"{y.name}_begin", b_arr), op.inputs[2]]
    return True
