"""Interpret a captured FX graph with the lowering table: the shared JAX program.

:class:`LoweredProgram` is the IR every target starts from. Its ``fn`` is a pure
JAX function ``fn(state, *inputs, rng=None) -> (outputs, mutations)``:

* ``state`` maps parameter / buffer / constant names to arrays (the weights are
  arguments, not constants, so the TPU runtime keeps them on device);
* ``inputs`` are the flattened user tensors;
* ``outputs`` is the tuple of user outputs and ``mutations`` maps buffer names to
  their new values (BatchNorm running stats, in-place KV caches).

Exporters that want weights baked in use :meth:`LoweredProgram.closed`.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Callable

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.fx.experimental.symbolic_shapes import free_unbacked_symbols

from converter.errors import ConversionError, LoweringError, UnsupportedOpError, source_location
from converter.lowering import control_flow, effects, registry, rng_ops
from converter.lowering.context import LoweringContext, symbols_of
from converter.lowering.dtypes import tensor_to_numpy, to_jax_dtype
from converter.lowering.unproven_dims import UNDECIDED, coerced, dims_differ, dims_equal, logic


@dataclass(frozen=True)
class TensorSpec:
    """Name, shape (``str`` for a dynamic dim) and torch dtype of one tensor."""

    name: str
    shape: tuple
    dtype: torch.dtype

    @property
    def dynamic(self) -> bool:
        """True when any dim is symbolic."""
        return any(isinstance(d, str) for d in self.shape)

    def to_json(self) -> dict:
        """A JSON-ready dict."""
        return {"name": self.name, "shape": list(self.shape), "dtype": str(self.dtype).replace("torch.", "")}


def _spec(name: str, val: Any) -> TensorSpec:
    # (a SymInt may be a number: torch.export's Dim.AUTO on a dim the trace specialized, transformers' exporter)
    shape = tuple(int(d) if isinstance(d, int) or (hasattr(d, "node") and (d.node.is_constant() or _is_number(d)))
                  else str(d) for d in val.shape)
    return TensorSpec(name, shape, val.dtype)


def _is_number(d: Any) -> bool:
    """Whether the SymInt ``d``'s expression is a number (no symbol in it)."""
    return bool(getattr(getattr(d.node, "expr", None), "is_number", False))


@dataclass
class LoweredProgram:
    """A captured model lowered to a pure JAX function (see module docstring)."""

    exported: ExportedProgram
    state: dict[str, Any]
    inputs: list[TensorSpec]
    outputs: list[TensorSpec]
    mutated_buffers: list[str]
    target: str = "tpu"
    options: dict = field(default_factory=dict)

    def fn(self, state: dict, *inputs: Any, rng: Any = None, checks: list | None = None) -> tuple[tuple, dict]:
        """Run the graph on JAX values (traceable; call it under ``jax.jit``); ``checks`` (a list) collects the
        error checks of its ops (``torch.linalg``'s, ``_assert_async``) for a caller that can raise after the run."""
        return run_graph(self, state, inputs, rng, checks=checks)

    @property
    def dynamic(self) -> bool:
        """True when any input has a dynamic dim."""
        return any(s.dynamic for s in self.inputs)

    def closed(self) -> Callable[..., tuple]:
        """A function of the user inputs only, with the weights closed over as constants."""
        # device_put, not jnp.asarray: on jax 0.10 jnp.asarray(ndarray) compiles a copy
        # kernel per new shape (~40 ms each), which dominated small exports.
        state = {k: jax.device_put(v) for k, v in self.state.items()}

        def f(*inputs: Any) -> tuple:
            return self.fn(state, *inputs)[0]

        return f

    def example_inputs(self) -> list[jax.ShapeDtypeStruct]:
        """Abstract inputs at the captured sample shapes."""
        return [jax.ShapeDtypeStruct(tuple(v.shape), to_jax_dtype(v.dtype)) for v in self.sample_inputs]

    @property
    def sample_inputs(self) -> list[torch.Tensor]:
        """The example inputs torch.export saw, flattened (tensors only)."""
        flat = torch.utils._pytree.tree_leaves(self.exported.example_inputs)
        return [t for t in flat if isinstance(t, torch.Tensor)]


_UNBACKED = ("its output size depends on a value read from a tensor in the graph (an .item(), a "
             "data-dependent size), which compiled targets cannot express; keep the sizes python numbers "
             "or use a fixed-size alternative (a mask, torch.where, index_select)")


def _data_dependent_size(val: Any) -> bool:
    """Whether a node's output tensor (or one of its output tensors) has a size given by an unbacked symbol."""
    return any(isinstance(t, torch.Tensor) and free_unbacked_symbols(tuple(t.shape))
               for t in torch.utils._pytree.tree_leaves(val))


def check_supported(graph: torch.fx.Graph, target: str) -> None:
    """Raise :class:`UnsupportedOpError` for the first op of ``graph`` without a lowering."""
    for node in graph.nodes:
        if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
            registry.lookup(node.target, target, source_location(node))
        elif node.op == "call_function" and node.target in rng_ops.RNG_OPS:
            rng_ops.check(node, target, source_location(node))
        elif node.op == "call_function" and node.target in effects.EFFECT_OPS:
            effects.check(node, target, source_location(node))
        elif node.op == "call_function" and node.target in control_flow.HOPS:
            for sub in control_flow.subgraphs(node):
                check_supported(sub.graph, target)
        elif node.op == "call_function" and isinstance(node.target, torch._ops.HigherOrderOperator):
            reason = control_flow.REFUSED.get(str(node.target), "this higher-order op is not supported "
                                                                "(torch.cond, while_loop, scan, map and flex_attention are)")
            raise UnsupportedOpError(str(node.target), target, source_location(node), reason=reason, hint=False)


def lower(exported: ExportedProgram, target: str = "tpu", options: dict | None = None) -> LoweredProgram:
    """Prepare an ExportedProgram for interpretation with the lowering table.

    Every op is looked up now, so an unsupported op fails before any tracing with
    an :class:`UnsupportedOpError` naming the op, the target and the source line.
    """
    sig = exported.graph_signature
    check_supported(exported.graph, target)
    consts = dict(exported.state_dict)
    consts.update(exported.constants)
    state: dict[str, Any] = {}
    inputs: list[TensorSpec] = []
    for spec in sig.input_specs:
        if spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
            value = consts[spec.target]
            if not isinstance(value, torch.Tensor):
                raise ConversionError(f"constant {spec.target} of type {type(value).__name__} is not supported")
            state[spec.target] = _to_numpy(value)
        elif spec.kind == InputKind.USER_INPUT and hasattr(spec.arg, "name") and _is_tensor_arg(exported, spec):
            inputs.append(_spec(spec.arg.name, _placeholder_val(exported, spec.arg.name)))
        elif spec.kind == InputKind.CUSTOM_OBJ:
            raise ConversionError(f"custom object input {spec.target} is not supported")
    outputs, mutated = [], []
    out_node = exported.graph.output_node()
    out_vals = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in out_node.args[0]]
    for spec, arg, val in zip(sig.output_specs, out_node.args[0], out_vals):
        if spec.kind == OutputKind.USER_OUTPUT and _fixed(arg):  # not an output (see fixed_outputs)
            continue
        if spec.kind == OutputKind.USER_OUTPUT:
            name = f"output_{len(outputs)}"
            outputs.append(_spec(name, val) if isinstance(val, torch.Tensor) else TensorSpec(name, (), torch.float32))
        elif spec.kind == OutputKind.BUFFER_MUTATION:
            mutated.append(spec.target)
        elif spec.kind == OutputKind.USER_INPUT_MUTATION:
            raise ConversionError("models that mutate their inputs in place are not supported; clone the input first")
    return LoweredProgram(exported, state, inputs, outputs, mutated, target, dict(options or {}))


def _placeholder_val(exported: ExportedProgram, name: str) -> Any:
    for n in exported.graph.nodes:
        if n.op == "placeholder" and n.name == name:
            return n.meta["val"]
    raise KeyError(name)


def _is_tensor_arg(exported: ExportedProgram, spec: Any) -> bool:
    try:
        return isinstance(_placeholder_val(exported, spec.arg.name), torch.Tensor)
    except KeyError:
        return False


def _to_numpy(t: torch.Tensor) -> np.ndarray:
    return tensor_to_numpy(t.detach().cpu().contiguous()).copy()


def run_graph(program: LoweredProgram, state: dict, inputs: tuple, rng: Any = None,
              observer: Callable[[torch.fx.Node, Any], None] | None = None,
              checks: list | None = None) -> tuple[tuple, dict]:
    """Evaluate the FX graph node by node with the lowering table.

    Args:
        program: the lowered program.
        state: parameter / buffer / constant arrays by name.
        inputs: the flattened user inputs.
        rng: a JAX PRNG key for random ops.
        observer: called as ``observer(node, value)`` after every placeholder,
            ``get_attr`` and ``call_function`` node (the validators record
            intermediates with it to find the first op that diverges).
        checks: a list the error checks of the graph's ops are appended to (see
            :class:`~converter.lowering.context.LoweringContext`); ``None``: dropped.

    Returns:
        ``(outputs, mutations)`` as described in the module docstring.
    """
    ep = program.exported
    sig = ep.graph_signature
    env: dict[str, Any] = {}
    user_iter = iter(inputs)
    kinds = {s.arg.name: s for s in sig.input_specs if hasattr(s.arg, "name")}
    ctx = LoweringContext(target=program.target, options=program.options, rng=rng,
                          checks=checks if checks is not None else [])
    for node in ep.graph.nodes:
        if node.op == "placeholder":
            spec = kinds.get(node.name)
            if spec is not None and spec.kind in (InputKind.PARAMETER, InputKind.BUFFER, InputKind.CONSTANT_TENSOR):
                env[node.name] = state[spec.target]
            elif spec is not None and spec.kind == InputKind.TOKEN:  # an effect token (with_effects): no data
                env[node.name] = jnp.zeros((0,), jnp.float32)
            elif isinstance(node.meta.get("val"), torch.Tensor):
                env[node.name] = next(user_iter)
            else:
                env[node.name] = getattr(spec.arg, "value", None) if spec is not None else None
            ctx.bind(node.meta.get("val"), env[node.name])
        elif node.op == "call_function":
            env[node.name] = _call(node, env, ctx)
        elif node.op == "get_attr":
            env[node.name] = attribute(ep.graph_module, node.target)
        if observer is not None and node.name in env:
            observer(node, env[node.name])
        if node.op == "output":
            vals = [env[a.name] if isinstance(a, torch.fx.Node) else a for a in node.args[0]]
            outs, muts = [], {}
            for spec, a, v in zip(sig.output_specs, node.args[0], vals):
                if spec.kind == OutputKind.BUFFER_MUTATION:
                    muts[spec.target] = v
                elif spec.kind == OutputKind.USER_OUTPUT and not _fixed(a):
                    outs.append(v)
            return tuple(outs), muts
    raise ConversionError("graph has no output node")


def fixed_outputs(exported: ExportedProgram) -> dict[int, Any]:
    """The places among the model's outputs (its output tree's leaves, in order) that hold the same object
    whatever the inputs and have no tensor form: ``None`` (``return logits, None``), a string. No target's program
    outputs them (a jax function cannot return a string, and drops ``None``); the tpu target puts them back in the
    model's output structure. (A number the model returns is an output: a 0-d tensor.)"""
    sig = exported.graph_signature
    user = [a for spec, a in zip(sig.output_specs, exported.graph.output_node().args[0])
            if spec.kind == OutputKind.USER_OUTPUT]
    return {i: a for i, a in enumerate(user) if _fixed(a)}


def _fixed(arg: Any) -> bool:
    """Whether an output node's argument is a constant with no tensor form (see :func:`fixed_outputs`)."""
    return not isinstance(arg, (torch.fx.Node, bool, int, float))


def attribute(gm: torch.fx.GraphModule, name: str) -> Any:
    """A ``get_attr`` node's value: a constant tensor as a JAX array, a sub-graph (control flow) as is."""
    value = getattr(gm, name)
    return value if isinstance(value, torch.nn.Module) else jax.device_put(_to_numpy(value))


def _materialize(x: Any, env: dict) -> Any:
    if isinstance(x, torch.fx.Node):
        return env[x.name]
    if isinstance(x, (list, tuple)):
        return type(x)(_materialize(v, env) for v in x)
    if isinstance(x, dict):
        return {k: _materialize(v, env) for k, v in x.items()}
    return x


#: torch's SymInt/SymFloat functions on a traced (data-dependent) scalar: python semantics, as jnp.
_SYM_ON_ARRAYS: dict[Callable, Callable] = {
    torch.sym_float: lambda x: jnp.asarray(x).astype(float),  # (the default float: float64 under x64)
    torch.sym_int: lambda x: jnp.trunc(jnp.asarray(x)).astype(int),
    torch.sym_max: lambda a, b: jnp.maximum(jnp.asarray(a), jnp.asarray(b)),
    torch.sym_min: lambda a, b: jnp.minimum(jnp.asarray(a), jnp.asarray(b)),
    torch.sym_not: lambda x: jnp.logical_not(jnp.asarray(x)),
    torch.sym_ite: lambda b, t, f: jnp.where(jnp.asarray(b), jnp.asarray(t), jnp.asarray(f)),  # (a bool .item())
}


#: torch's functions that assert python numbers, on jax.export's symbolic dims (``sym_max(seq_len, 1)`` in an MPT
#: model exported with a dynamic length): their dim-expression twins; ``sym_float`` of a dim (torch's decompositions
#: of ``interpolate`` compute a scale as ``in / out``) is the dim's value as a weakly typed float, a python float's
#: twin (float64 under x64, as torch's SymFloat; an op on a float32 tensor rounds it to float32, as torch does).
_SYM_ON_DIMS: dict[Callable, Callable] = {torch.sym_max: jax.core.max_dim, torch.sym_min: jax.core.min_dim,
                                          torch.sym_float: lambda d: jnp.asarray(d) * 1.0,
                                          operator.eq: dims_equal, operator.ne: dims_differ}


#: Python's float → int conversions, which a size computed with float arithmetic on a dynamic dim reaches
#: (torch's decomposition of a bicubic ``interpolate``: ``trunc(sym_float(H) * 2.0)``).
_TO_INT = {math.trunc, math.floor, math.ceil, torch.sym_int, int}
_FLOAT_SIZE = ("a size computed with float arithmetic on a dynamic dim (torch's decomposition of the op here) has no "
               "form in an exported program, whose sizes are integer expressions of its dims: give these dims "
               "static sizes, or compute the size with integer arithmetic")


def _user_location(node: torch.fx.Node) -> Any:
    """``node``'s source location, or where no line is recorded (a node of torch's decomposition of an op: its size
    arithmetic), the first line found among the nodes that use it, breadth first."""
    seen, queue = {node}, [node]
    while queue:
        here = queue.pop(0)
        loc = source_location(here)
        if loc.file:
            return loc
        for user in here.users:
            if user not in seen and len(seen) < 256:
                seen.add(user)
                queue.append(user)
    return source_location(node)


_ITEM = torch.ops.aten._local_scalar_dense.default
#: Integer arithmetic on scalar tensors that :func:`size_expression` follows, as python arithmetic on sizes.
_SIZE_ARITHMETIC: dict[Any, Callable] = {
    torch.ops.aten.add.Tensor: operator.add, torch.ops.aten.add.Scalar: operator.add,
    torch.ops.aten.sub.Tensor: operator.sub, torch.ops.aten.sub.Scalar: operator.sub,
    torch.ops.aten.mul.Tensor: operator.mul, torch.ops.aten.mul.Scalar: operator.mul,
    torch.ops.aten.rsub.Scalar: lambda a, b: b - a, torch.ops.aten.neg.default: operator.neg,
}
#: Ops that hand an integer scalar tensor's value on unchanged.
_SIZE_COPIES = (torch.ops.aten.clone.default, torch.ops.aten._to_copy.default, torch.ops.aten.lift_fresh_copy.default,
                torch.ops.aten.detach.default, torch.ops.aten.alias.default)


def size_expression(arg: Any, env: dict) -> Any:
    """The size (a python int or a jax.export dim expression) an integer scalar tensor of the graph holds when it is
    built from sizes alone — ``scalar_tensor`` of a SymInt, then integer ``add`` / ``sub`` / ``mul`` / ``neg`` — else
    ``None``.

    ``torch.tensor(min(q_len, max_positions))`` later read back with ``.item()`` to slice a table (transformers'
    DeBERTa) is a data-dependent size to torch.export; its value is an expression of the input's dims, so the read
    is that expression and the slice keeps a (dynamic) size every target can express.
    """
    if not isinstance(arg, torch.fx.Node):
        return arg if type(arg) is int else None
    val = arg.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.dim() or val.dtype.is_floating_point or val.dtype.is_complex \
            or val.dtype == torch.bool:
        return None
    if arg.target is torch.ops.aten.scalar_tensor.default:
        size = _materialize(arg.args[0], env)
        return size if type(size) is int or jax.export.is_symbolic_dim(size) else None
    if arg.target in _SIZE_COPIES:
        return size_expression(arg.args[0], env)
    fn = _SIZE_ARITHMETIC.get(arg.target)
    if fn is None:
        return None
    operands = [size_expression(a, env) for a in arg.args[:2]]
    alpha = arg.kwargs.get("alpha", 1)
    if any(o is None for o in operands) or type(alpha) is not int:
        return None
    if alpha != 1:
        operands[1] = operands[1] * alpha
    return fn(*operands)


def _call(node: torch.fx.Node, env: dict, ctx: LoweringContext) -> Any:
    args = _materialize(node.args, env)
    kwargs = _materialize(node.kwargs, env)
    target = node.target
    if target is operator.getitem:
        return args[0][args[1]]
    if target in effects.EFFECT_OPS:  # torch.linalg's error checks
        return effects.call(node, args, kwargs, ctx)
    if target in rng_ops.RNG_OPS:  # activation checkpointing's saved / replayed generator state
        return rng_ops.call(node, args, kwargs, ctx, source_location(node), conform)
    if target in control_flow.HOPS:  # torch.cond, while_loop, scan
        return control_flow.HOPS[target](node, args, kwargs, ctx)
    if target is _ITEM:
        size = size_expression(node.args[0], env)
        if size is not None:
            ctx.symbols.update(symbols_of(node.meta.get("val"), size))  # (the unbacked symbol torch gave the read)
            return size
    if not isinstance(target, torch._ops.OpOverload):
        # SymInt arithmetic (operator.mul, torch.sym_max, …) works on python ints and
        # on jax.export symbolic dims alike; torch's sym functions on a traced scalar (an
        # ``.item()`` captured into the graph) take their jnp twins.
        if target in _SYM_ON_ARRAYS and any(isinstance(a, jax.Array) for a in args):
            return _SYM_ON_ARRAYS[target](*args)
        if target in _SYM_ON_DIMS and any(jax.export.is_symbolic_dim(a) for a in args):
            return _SYM_ON_DIMS[target](*args)
        if any(a is UNDECIDED for a in args) and (value := logic(target, args)) is not None:
            return value
        if target in _TO_INT and any(isinstance(a, jax.core.Tracer) for a in args):
            raise UnsupportedOpError(getattr(target, "__name__", str(target)), ctx.target, _user_location(node),
                                     reason=_FLOAT_SIZE, hint=False)
        return target(*args, **kwargs)
    if ctx.observers and node in ctx.observers:
        ctx.observers[node](args, kwargs, ctx)
    row = registry.lookup(target, ctx.target, source_location(node))
    ctx.node = node
    try:
        try:
            result = registry.apply(row, ctx, args, kwargs)
        except ValueError as e:  # two dynamic sizes torch took for equal and jax cannot prove equal
            fixed = coerced(args, node.meta.get("val"), ctx.symbols) if "broadcast" in str(e) else None
            if fixed is None:
                raise
            result = registry.apply(row, ctx, fixed, kwargs)
    except ConversionError:
        raise
    except Exception as e:  # wrap the innermost failure once, with the node's location
        if _data_dependent_size(node.meta.get("val")):  # (a lowering that has no message of its own for it)
            raise UnsupportedOpError(str(target), ctx.target, source_location(node), reason=_UNBACKED,
                                     hint=False) from e
        shapes = ", ".join(f"{getattr(a, 'dtype', type(a).__name__)}{list(getattr(a, 'shape', []))}"
                           for a in args if hasattr(a, "shape"))
        raise LoweringError(target, source_location(node), f"{type(e).__name__}: {e} (inputs: {shapes})") from e
    return conform(result, node.meta.get("val"), node)


def conform(result: Any, meta: Any, node: Any = None) -> Any:
    """Cast a lowering's result to the dtype torch.export recorded; check its shape.

    Torch decides result dtypes (type promotion); casting here keeps every
    lowering honest to torch semantics. A shape mismatch is a lowering bug, except
    where torch's result is empty: that empty result is given.
    """
    if isinstance(meta, torch.Tensor) and hasattr(result, "dtype"):
        want = to_jax_dtype(meta.dtype)
        if result.dtype != want:
            result = result.astype(want)
        if len(result.shape) != meta.dim() or any(
            isinstance(m, int) and isinstance(r, int) and m != r for m, r in zip(meta.shape, result.shape)
        ):
            if all(isinstance(m, int) for m in meta.shape) and 0 in meta.shape:
                # an empty result has no value to get wrong (a convolution over zero input channels: torch
                # answers an empty tensor of its own shape)
                return jnp.zeros(tuple(meta.shape), want)
            raise LoweringError(getattr(node, "target", "?"), source_location(node),
                                f"lowering produced shape {tuple(result.shape)}, torch expects {tuple(meta.shape)}")
        return result
    if isinstance(meta, (list, tuple)) and isinstance(result, (list, tuple)) and len(meta) == len(result):
        return type(result)(conform(r, m, node) for r, m in zip(result, meta))
    return result
