"""The one ATen → JAX lowering table (DESIGN.md: every target starts from it).

Lowerings are keyed on the ``OpOverload`` object, never on a string; a duplicate
registration is a hard error at import time. The one exception is an op another library defines
(``transformers::grouped_mm_fallback``): it exists only once that library is imported, so its
lowering is registered by qualified name (:func:`library_lowering`) and its row is made, keyed on
the op, the first time the op is looked up (kept apart from the ATen table: :func:`registered` lists ATen
rows only). A lowering has the signature
``fn(ctx, *args, **kwargs)`` where ``ctx`` is a :class:`LoweringContext` and the
arguments follow the op's ATen schema with tensors replaced by JAX arrays.

High-level ops registered with ``composite=True`` are emitted as
``jax.lax.composite(name="aten.<op>")``: the body is the decomposition and the
non-tensor schema arguments become composite attributes, so jaxpr and StableHLO
keep the op's meaning for the exporters (e.g. LiteRT maps ``aten.gelu`` to GELU).
"""

from __future__ import annotations

import contextlib
import difflib
from dataclasses import dataclass
from typing import Any, Callable, Iterator

import jax
import numpy as np
import torch

from converter.errors import SourceLocation, UnsupportedOpError

OpOverload = torch._ops.OpOverload


class RegistrationError(RuntimeError):
    """A lowering was registered twice or for something that is not an OpOverload."""


@dataclass(frozen=True)
class Lowering:
    """One row of the table."""

    op: OpOverload
    fn: Callable[..., Any]
    composite: bool | Callable[[dict], bool]
    module: str

    @property
    def composite_name(self) -> str:
        """Name of the emitted composite, e.g. ``aten.gelu``."""
        return "aten." + self.op._schema.name.split("::", 1)[1]


_TABLE: dict[OpOverload, Lowering] = {}

#: Ops whose output shape depends on the data: no static-shape target can take them.
DATA_DEPENDENT: dict[str, str] = {
    name: "its output shape depends on the input values, which compiled targets cannot express; "
          "use a fixed-size alternative (torch.where with a mask, nonzero_static, topk)"
    for name in ("aten.nonzero", "aten.unique", "aten._unique", "aten._unique2", "aten.unique_dim",
                 "aten.unique_consecutive", "aten.masked_select", "aten.nonzero_numpy", "aten.argwhere")
}
_OVERRIDES: dict[OpOverload, Lowering] = {}
#: Lowerings of ops other libraries define, by ``"namespace::name.overload"`` (see :func:`library_lowering`),
#: and the rows made for those ops once looked up.
_LIBRARY_OPS: dict[str, Callable[..., Any]] = {}
_LIBRARY_ROWS: dict[OpOverload, Lowering] = {}


def lowering(*ops: OpOverload, composite: bool | Callable[[dict], bool] = False) -> Callable:
    """Register ``fn`` as the lowering of each of ``ops``.

    Args:
        *ops: ATen ``OpOverload`` objects (``torch.ops.aten.add.Tensor``).
        composite: emit the op as ``jax.lax.composite`` so exporters see it whole; a
            callable ``(arguments by schema name) -> bool`` decides per call (e.g. a
            call that draws random numbers is emitted inline: a composite body cannot
            close over the program's PRNG key).

    Raises:
        RegistrationError: an op is registered twice or is not an OpOverload.
    """

    def decorate(fn: Callable) -> Callable:
        for op in ops:
            if not isinstance(op, OpOverload):
                raise RegistrationError(f"{op!r} is not an OpOverload (use torch.ops.aten.<op>.<overload>)")
            if op in _TABLE:
                raise RegistrationError(f"{op} is already lowered by {_TABLE[op].module}.{_TABLE[op].fn.__name__}")
            _TABLE[op] = Lowering(op, fn, composite, fn.__module__)
        return fn

    return decorate


def library_lowering(*names: str) -> Callable:
    """Register ``fn`` as the lowering of the ops named ``names`` (``"transformers::grouped_mm_fallback.default"``):
    ops another library defines when it is imported, which may not exist yet when the table loads. The row is
    made, keyed on the op, when the op is first looked up.

    Raises:
        RegistrationError: a name is registered twice or is not ``namespace::name.overload``.
    """

    def decorate(fn: Callable) -> Callable:
        for name in names:
            if "::" not in name or "." not in name.split("::", 1)[1]:
                raise RegistrationError(f"{name!r} is not a qualified op name (namespace::name.overload)")
            if name in _LIBRARY_OPS:
                raise RegistrationError(f"{name} is already lowered by {_LIBRARY_OPS[name].__module__}."
                                        f"{_LIBRARY_OPS[name].__name__}")
            _LIBRARY_OPS[name] = fn
        return fn

    return decorate


def _library_row(op: Any) -> Lowering | None:
    """The row of ``op`` when it is an op of another library with a :func:`library_lowering`."""
    row = _LIBRARY_ROWS.get(op)
    if row is not None or not isinstance(op, OpOverload) or op.namespace in ("aten", "prims"):
        return row
    fn = _LIBRARY_OPS.get(f"{op._schema.name}.{op._overloadname}")
    if fn is None:
        return None
    row = _LIBRARY_ROWS[op] = Lowering(op, fn, False, fn.__module__)
    return row


def library_ops() -> list[str]:
    """The qualified names of the other libraries' ops that have a lowering (loads the table first)."""
    _ensure_loaded()
    return sorted(_LIBRARY_OPS)


def lookup(op: Any, target: str = "tpu", location: SourceLocation | None = None) -> Lowering:
    """Return the lowering of ``op`` or raise :class:`UnsupportedOpError`.

    The error lists the nearest registered overloads of the same packet first,
    then names that look alike.
    """
    _ensure_loaded()
    row = _OVERRIDES.get(op) or _TABLE.get(op) or _library_row(op)
    if row is not None:
        return row
    name = str(op)
    packet_name = name.rsplit(".", 1)[0]
    if packet_name in DATA_DEPENDENT:
        raise UnsupportedOpError(name, target, location, reason=DATA_DEPENDENT[packet_name], hint=False)
    names = sorted(str(k) for k in _TABLE)
    packet = name.rsplit(".", 1)[0]
    nearest = [n for n in names if n.startswith(packet + ".")] or difflib.get_close_matches(name, names, n=3)
    raise UnsupportedOpError(name, target, location, nearest=nearest[:5])


def find(op: Any) -> Lowering | None:
    """The lowering of ``op``, or ``None`` (no error built: for callers that try other routes)."""
    _ensure_loaded()
    return _OVERRIDES.get(op) or _TABLE.get(op) or _library_row(op)


def aten_overloads() -> Iterator[OpOverload]:
    """Every ATen ``OpOverload`` of this PyTorch build, from the dispatcher's registry
    (``dir(torch.ops.aten)`` lists only the packets already touched)."""
    for full in torch._C._dispatch_get_all_op_names():
        if not full.startswith("aten::"):
            continue
        name, _, overload = full[len("aten::"):].partition(".")
        packet = getattr(torch.ops.aten, name, None)
        if not isinstance(packet, torch._ops.OpOverloadPacket):
            continue
        op = getattr(packet, overload or "default", None)
        if isinstance(op, OpOverload):
            yield op


def registered() -> dict[OpOverload, Lowering]:
    """A copy of the whole table (loads every family module first)."""
    _ensure_loaded()
    return dict(_TABLE)


@contextlib.contextmanager
def override(op: OpOverload, fn: Callable, composite: bool = False) -> Iterator[None]:
    """Test-only: replace one op's lowering inside a ``with`` block."""
    _ensure_loaded()
    _OVERRIDES[op] = Lowering(op, fn, composite, fn.__module__)
    try:
        yield
    finally:
        _OVERRIDES.pop(op, None)


def apply(row: Lowering, ctx: Any, args: tuple, kwargs: dict) -> Any:
    """Call a lowering, wrapping it in ``jax.lax.composite`` when it asks for one."""
    if not row.composite or not ctx.options.get("composites", True):
        return row.fn(ctx, *args, **kwargs)
    schema = row.op._schema.arguments
    bound: list[tuple[str, Any]] = []
    for i, arg in enumerate(schema):
        if i < len(args):
            bound.append((arg.name, args[i]))
        elif arg.name in kwargs:
            bound.append((arg.name, kwargs[arg.name]))
    if callable(row.composite) and not row.composite(dict(bound)):
        return row.fn(ctx, *args, **kwargs)
    operand_names = [n for n, v in bound if _is_array(v)]
    operands = [v for n, v in bound if _is_array(v)]
    attrs = {n: _attribute(v) for n, v in bound if not _is_array(v) and _attribute(v) is not None}
    attrs["operands"] = ",".join(operand_names)

    def decomposition(*ops: Any, **_: Any) -> Any:
        values = dict(bound)
        values.update(zip(operand_names, ops))
        pos = [values[n] for n, _ in bound[: len(args)]]
        kw = {n: values[n] for n, _ in bound[len(args):]}
        return row.fn(ctx, *pos, **kw)

    return jax.lax.composite(decomposition, name=row.composite_name)(*operands, **attrs)


def _is_array(v: Any) -> bool:
    return isinstance(v, (jax.Array, jax.core.Tracer))


def _attribute(v: Any) -> Any:
    """Encode a non-tensor schema argument as a composite attribute (None: omitted)."""
    if v is None:
        return None
    if isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch.dtype):
        return str(v).replace("torch.", "")
    if isinstance(v, (list, tuple)) and all(isinstance(x, (bool, int)) for x in v):
        return np.asarray(v, dtype=np.int64)
    if isinstance(v, (list, tuple)) and all(isinstance(x, (int, float)) for x in v):
        return np.asarray(v, dtype=np.float64)
    return None


_LOADED = False


def _ensure_loaded() -> None:
    """Import every family module so the table is complete."""
    global _LOADED
    if not _LOADED:
        _LOADED = True
        import converter.lowering.ops  # noqa: F401  (registers on import)
