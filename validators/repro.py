"""Repro folders: everything needed to reproduce one target's parity failure.

Layout of ``repro/<target>/``::

    summary.md            the Markdown summary of this target (max abs / rel per output,
                          the first divergence, how to use the files below)
    inputs.npz            the failing input set (one array per model input)
    expected.npz          PyTorch's outputs on it
    got.npz               the target's outputs on it
    program.pt2           the ExportedProgram the target was lowered from (torch.export.save)
    subgraph/             the smallest failing subgraph — the first diverging op alone:
        node_inputs.npz   its tensor inputs as PyTorch computed them (t0, t1, …)
        repro.py          converts that one op for the target and compares with PyTorch

NumPy cannot store bfloat16: such arrays are saved as float32 (exact) and the
scripts cast them back.
"""

from __future__ import annotations

import io
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from exporters.atomic import write_dir

#: Arrays in a repro are saved as these dtypes when NumPy lacks the torch dtype.
_WIDENED = {torch.bfloat16: torch.float32}


@dataclass
class ReproBundle:
    """The in-memory contents of one repro folder (written by :func:`write_repro`).

    Attributes:
        target: the failing target.
        exported: the ExportedProgram the target was lowered from.
        input_names: names of the flat model inputs.
        inputs: the failing input set, flattened.
        expected: PyTorch's outputs, flattened.
        got: the target's outputs, flattened.
        node: the culprit FX node (``None`` when not localized).
        node_values: PyTorch's value of every FX node on ``inputs`` (for the subgraph).
        header: one line naming the op, the node and the source location.
        summary: the Markdown summary (filled in when the report is written).
    """

    target: str
    exported: Any
    input_names: list[str]
    inputs: list[torch.Tensor]
    expected: list[torch.Tensor]
    got: list[Any]
    node: Any = None
    node_values: dict = field(default_factory=dict, repr=False)
    header: str = ""
    summary: str = ""


def _storable(t: Any) -> tuple[np.ndarray, str]:
    if isinstance(t, torch.Tensor):
        t = t.detach().cpu()
        dtype = str(t.dtype).replace("torch.", "")
        return t.to(_WIDENED.get(t.dtype, t.dtype)).numpy(), dtype
    arr = np.asarray(t)
    if arr.dtype.name == "bfloat16":
        return arr.astype(np.float32), "bfloat16"
    return arr, arr.dtype.name


def _npz(arrays: dict[str, Any]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **{k: _storable(v)[0] for k, v in arrays.items()})
    return buf.getvalue()


def literal(value: Any, tensors: list[torch.Tensor]) -> str:
    """Python source for an op argument; tensors become ``t[i]`` and are appended to ``tensors``.

    Raises:
        ValueError: the argument has no literal form (the script cannot be written).
    """
    if isinstance(value, torch.Tensor):
        tensors.append(value)
        return f"t[{len(tensors) - 1}]"
    if value is None or isinstance(value, (bool, int, str)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f"float('{value}')"
    if isinstance(value, (torch.dtype, torch.memory_format, torch.layout)):
        return repr(value)
    if isinstance(value, torch.device):
        return f"torch.device({str(value)!r})"
    if isinstance(value, (list, tuple)):
        items = [literal(v, tensors) for v in value]
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    raise ValueError(f"no literal for {type(value).__name__}")


def op_source(op: Any) -> str:
    """``torch.ops.<ns>.<name>.<overload>`` for an OpOverload."""
    return f"torch.ops.{op.namespace}.{op._schema.name.split('::', 1)[1]}.{op._overloadname}"


_SCRIPT = '''"""{header}

The op alone, on the values PyTorch computed for its inputs (node_inputs.npz):
converted for target "{target}" with tpu-export and compared with PyTorch.
Run it from a tpu-export checkout (or with tpu-export installed):

    python repro.py

Exit status 0 when the target matches PyTorch, 1 when it does not.
"""

import sys
from pathlib import Path

import numpy as np
import torch

from converter.api import convert
from validators.metrics import compare

OP = {op}
TARGET = {target!r}
DTYPES = {dtypes!r}


def call(t):
    """The op with its recorded arguments (t[i] are the tensor inputs)."""
    return OP({args})


class OneOp(torch.nn.Module):
    """The failing op as a module, so it goes through capture → lowering → target."""

    def forward(self, *t):
        return call(t)


def main():
    """Run PyTorch and the target on the saved inputs; print the errors."""
    data = np.load(Path(__file__).with_name("node_inputs.npz"))
    t = [torch.from_numpy(data[f"t{{i}}"]).to(getattr(torch, d)) for i, d in enumerate(DTYPES)]
    with torch.no_grad():
        expected = call(t)
    got = convert(OneOp().eval(), tuple(t), target=TARGET)(*t)
    leaves = torch.utils._pytree.tree_leaves
    expected = [x for x in leaves(expected) if isinstance(x, torch.Tensor)]
    got = [x for x in leaves(got) if hasattr(x, "shape")]
    ok = True
    for i, (e, g) in enumerate(zip(expected, got)):
        err = compare(f"output_{{i}}", e, g)
        print(f"output_{{i}}: max abs {{err.max_abs:.3e}}, max rel {{err.max_rel:.3e}} -> "
              f"{{'PASS' if err.passed else 'FAIL'}}")
        ok &= err.passed
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
'''


def subgraph_script(bundle: ReproBundle) -> tuple[str, dict[str, Any]] | None:
    """The one-op script and its input arrays, or ``None`` without a localized ATen op."""
    node = bundle.node
    if node is None or not isinstance(node.target, torch._ops.OpOverload):
        return None
    tensors: list[torch.Tensor] = []

    def value(a: Any) -> Any:
        return bundle.node_values[a.name] if isinstance(a, torch.fx.Node) else a

    args = torch.fx.node.map_aggregate(node.args, value)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, value)
    parts = [literal(a, tensors) for a in args] + [f"{k}={literal(v, tensors)}" for k, v in kwargs.items()]
    dtypes = [str(x.dtype).replace("torch.", "") for x in tensors]
    script = _SCRIPT.format(header=bundle.header, target=bundle.target, op=op_source(node.target),
                            dtypes=dtypes, args=", ".join(parts))
    return script, {f"t{i}": x for i, x in enumerate(tensors)}


def write_repro(bundle: ReproBundle, path: Path) -> Path:
    """Write one repro folder atomically (see the module docstring for its layout).

    Returns:
        The folder.
    """

    def fill(d: Path) -> None:
        (d / "inputs.npz").write_bytes(_npz(dict(zip(bundle.input_names, bundle.inputs))))
        (d / "expected.npz").write_bytes(_npz({f"output_{i}": v for i, v in enumerate(bundle.expected)}))
        (d / "got.npz").write_bytes(_npz({f"output_{i}": v for i, v in enumerate(bundle.got)}))
        extra = []
        try:
            torch.export.save(bundle.exported, str(d / "program.pt2"))
        except Exception as e:  # torch.export.save raises many types; say why in the summary instead
            extra.append(f"- program.pt2 was not written: {type(e).__name__}: {str(e).splitlines()[0]}")
        try:
            sub = subgraph_script(bundle)
        except ValueError as e:
            sub = None
            extra.append(f"- subgraph/repro.py was not written: an argument of the op has {e}")
        if sub is not None:
            (d / "subgraph").mkdir()
            (d / "subgraph" / "repro.py").write_text(sub[0])
            (d / "subgraph" / "node_inputs.npz").write_bytes(_npz(sub[1]))
        elif not extra:
            extra.append("- no subgraph: the divergence was not localized to one ATen op")
        usage = ["## Files", "",
                 "- `inputs.npz`, `expected.npz`, `got.npz`: the failing input set, PyTorch's and the target's outputs",
                 "- `program.pt2`: `torch.export.load('program.pt2').module()(*inputs)` reruns the captured program",
                 "- `subgraph/repro.py`: the first diverging op alone, converted for the target and compared"]
        (d / "summary.md").write_text(bundle.summary.rstrip() + "\n\n" + "\n".join(usage + extra) + "\n")

    return write_dir(path, fill)
