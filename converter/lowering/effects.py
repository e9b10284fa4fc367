"""``with_effects``: the higher-order op AOTAutograd wraps effectful ops in (a token in, a token out).

The one effectful op a graph of ordinary PyTorch code carries is ``torch.linalg``'s error check,
``_linalg_check_errors(info, api_name, is_matrix)``: it raises ``LinAlgError`` when ``info`` is not
zero (a singular matrix for ``inv``/``solve``, a non positive-definite one for ``cholesky``). A compiled
program cannot raise on a value it computes, so the check is recorded in the context
(``ctx.checks``) and its ``info`` handed to whoever runs the program, which raises torch's own error
after the run (``torch.compile``'s backend and ``convert(target="tpu")``'s module do; an exported file
cannot). The token passes through unchanged.
"""

from __future__ import annotations

from typing import Any

import torch

from converter.errors import UnsupportedOpError
from converter.lowering.context import LoweringContext

_HOPS = getattr(torch.ops, "higher_order", None)
WITH_EFFECTS = getattr(_HOPS, "with_effects", None)
#: The effect higher-order ops this module lowers (those this torch has).
EFFECT_OPS = frozenset(op for op in (WITH_EFFECTS,) if op is not None)
#: Effectful ops whose effect is an error check the caller can run afterwards.
CHECKS = frozenset({torch.ops.aten._linalg_check_errors.default})


def check(node: torch.fx.Node, target: str, location: Any) -> None:
    """Raise :class:`~converter.errors.UnsupportedOpError` unless the wrapped op is a known check."""
    if node.args[1] not in CHECKS:
        raise UnsupportedOpError(str(node.args[1]), target, location,
                                 reason="an effectful op (with_effects) other than torch.linalg's error check")


def call(node: torch.fx.Node, args: tuple, kwargs: dict, ctx: LoweringContext) -> tuple:
    """Lower one ``with_effects(token, op, *args)`` node: record the check, pass the token on."""
    token, op, rest = args[0], args[1], args[2:]
    ctx.checks.append((rest[0], op, tuple(rest[1:]), dict(kwargs)))
    return (token,)


__all__ = ["CHECKS", "EFFECT_OPS", "WITH_EFFECTS", "call", "check"]
