"""Peephole passes on the emitted graph (run to a fixed point, then dead-code elimination).

* fold a per-channel ADD/SUB/MUL constant after CONV_2D / CONV_3D / DEPTHWISE_CONV_2D /
  FULLY_CONNECTED / TRANSPOSE_CONV into its weights and bias (bias add, BatchNorm);
* fuse RELU / RELU6 / RELU_N1_TO_1 (and ``MINIMUM(RELU(x), 6)``) into the producer's
  ``fusedActivationFunction``;
* SUM followed by a multiply by 1/N → MEAN; consecutive scalar multiplies merge and
  vanish when their product is 1 (AVERAGE_POOL_2D × k² ÷ k²);
* RESHAPE of RESHAPE → one RESHAPE; TRANSPOSE of TRANSPOSE → one (or none).
"""

from __future__ import annotations

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from exporters.litert.ir import Graph, Op, Tensor

ACT = schema.ActivationFunctionType
_ACTS = {"RELU": ACT.RELU, "RELU6": ACT.RELU6, "RELU_N1_TO_1": ACT.RELU_N1_TO_1}
#: Ops whose fused activation both the reference kernels and XNNPACK honour.
_FUSES_ACT = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "ADD", "SUB", "MUL", "DIV",
              "TRANSPOSE_CONV", "MAX_POOL_2D", "AVERAGE_POOL_2D"}
#: op → (index of weights input, output-channel axis of the weights, bias input index)
_LINEAR = {"CONV_2D": (1, 0, 2), "DEPTHWISE_CONV_2D": (1, 3, 2), "FULLY_CONNECTED": (1, 0, 2),
           "TRANSPOSE_CONV": (1, 0, 3), "CONV_3D": (1, 4, 2)}


def optimize(graph: Graph) -> None:
    """Rewrite ``graph`` in place."""
    for _ in range(100):
        changed = False
        for fn in (_fold_affine, _fuse_activation, _hoist_scalar_mul, _mean, _merge_scalar_mul, _merge_reshape,
                   _merge_transpose):
            users = graph.consumers()
            producers = graph.producers()
            for op in list(graph.ops):
                if op in graph.ops and fn(graph, op, users, producers):
                    changed = True
                    users = graph.consumers()
                    producers = graph.producers()
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
    if src is None or src.code not in _FUSES_ACT or _sole_user(graph, x, users) is not op:
        return False
    if src.options.get("fusedActivationFunction", ACT.NONE) != ACT.NONE or np.dtype(x.dtype) != np.float32:
        return False
    if src.code in ("ADD", "SUB", "MUL", "DIV") and tuple(x.shape) != tuple(op.outputs[0].shape):
        return False
    src.options["fusedActivationFunction"] = _ACTS[op.code]
    _bypass(graph, op, x)
    return True


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
