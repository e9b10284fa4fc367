"""``model.to("tpu")`` (and ``.half()``, ``.to(dtype)`` … of a tpu model): refused up front, with the reason, when
PyTorch's in-place swap of a parameter would fail half way.

A module's ``_apply`` replaces each parameter by swapping the new tensor into the old Python object
(``torch.utils.swap_tensors``) whenever the new one is a tensor subclass, as tpu tensors are: tied weights stay
tied and optimizers keep their references. The swap refuses a parameter something else still holds at the C++
level: an autograd graph that saved it (the output of a forward pass run with gradients enabled, e.g. a CPU
reference output kept for comparison), a view of it, a weak reference to it. PyTorch then raises "Couldn't swap
LayerNorm.weight" from a use-count assertion, after it has already swapped the parameters before that one: the
model is left half on the tpu device. (On CUDA ``_apply`` assigns ``param.data`` instead, which needs a C++
tensor type; PyTorch has no hook for a Python one.)

:func:`check_move` runs when the first parameter of such a move reaches the runtime (its CPU → tpu copy, or its
dtype copy on the device): it finds the module being moved on the Python stack (``Module._apply``'s frame, the one
place that knows it; as :mod:`tpu_runtime.lazy` finds an uninitialized tensor's), asks of every other parameter
what the swap will ask, and raises one error naming each parameter that would be refused, and why, before any is
swapped. Of the parameter being copied only weak references are asked about: its use count is raised by the copy in
flight (by one on a move to the device, by three on a dtype change there), so a view of it or a graph holding it is
left to PyTorch's own check: if only it is held, PyTorch refuses it, and nothing has been moved either.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

import torch

from converter.errors import caller_location

#: The code of the frame that moves a module's parameters.
_APPLY = torch.nn.Module._apply.__code__
#: How far up the stack the innermost ``_apply`` frame can be from :func:`check_move`'s caller: the runtime's
#: kernel and dispatch, ``__torch_dispatch__``, the conversion function ``_apply`` was given.
_MAX_DEPTH = 16
#: Conversion functions (``_apply``'s ``fn``: one per ``model.to(...)`` call) whose module was checked.
_CHECKED: "weakref.WeakSet[Any]" = weakref.WeakSet()


def check_move(param: Any) -> None:
    """Called as a parameter's copy is made on the tpu device: when ``Module._apply`` is moving it, make sure on the
    first such call of that move that PyTorch will be able to swap every parameter of the module.

    Raises:
        RuntimeError: another parameter of the module is held where PyTorch's swap refuses it (nothing moved yet).
    """
    if not isinstance(param, torch.nn.Parameter):
        return
    frame, outer = sys._getframe(1), None
    for _ in range(_MAX_DEPTH):
        if frame is None or frame.f_code is _APPLY:
            break
        frame = frame.f_back
    if frame is None or frame.f_code is not _APPLY:
        return
    fn = frame.f_locals.get("fn")
    try:
        if fn is None or fn in _CHECKED:
            return
        _CHECKED.add(fn)
    except TypeError:  # (a conversion function without weak references: its first copy is not known; as before)
        return
    while frame is not None:  # the outermost _apply of this move: the module the user moved
        if frame.f_code is _APPLY and frame.f_locals.get("fn") is fn:
            outer = frame
        frame = frame.f_back
    root = outer.f_locals.get("self") if outer is not None else None
    if not isinstance(root, torch.nn.Module):
        return
    dropped = _dropped_refs(root)
    refused = [f"{name} ({why})" for name, p in _parameters(root)
               for why in [_refusal(p, dropped) if p is not param else _weak(p, dropped)] if why is not None]
    if refused:
        raise RuntimeError(
            f"cannot move {type(root).__name__} (at {caller_location()}): PyTorch moves a module's parameters to the "
            f"tpu device by swapping each one in place (torch.utils.swap_tensors), and it refuses "
            f"{', '.join(refused)}. Nothing was moved. Run the pass whose output still holds them under "
            "torch.no_grad() (or delete its outputs), and drop views of and weak references to the parameters, "
            "before moving the model.")


def _parameters(root: torch.nn.Module) -> list[tuple[str, Any]]:
    """Every ``(dotted name, parameter)`` ``_apply`` will swap (a tied one once)."""
    seen, found = set(), []
    for prefix, module in root.named_modules(remove_duplicate=False):
        for key, p in module._parameters.items():
            if p is not None and id(p) not in seen:
                seen.add(id(p))
                found.append((f"{prefix}.{key}" if prefix else key, p))
    return found


def _dropped_refs(root: torch.nn.Module) -> set[int]:
    """The ids of the weak references to parameters that modules of ``root`` drop themselves before theirs are
    swapped: an ``nn.RNNBase``'s ``_flat_weight_refs`` (its ``_apply`` empties the list first, then makes it anew)."""
    return {id(r) for m in root.modules() if isinstance(m, torch.nn.RNNBase)
            for r in getattr(m, "_flat_weight_refs", ()) if r is not None}


#: ``sys.getrefcount`` of a weak reference nothing holds but an RNN's list, as :func:`_weak` reads it (that list,
#: ``getweakrefs``' result, the loop's name, the call's argument). A user's ``weakref.ref(p)`` is the same object
#: (CPython shares a callback-less one), one count more: that one is still there when the swap comes.
_RNN_ONLY = 4


def _weak(p: Any, dropped: set[int]) -> str | None:
    """Why the swap will refuse ``p`` for a weak reference to it (a reason its copy in flight does not hide); one
    only an RNN module holds (``dropped``: :func:`_dropped_refs`) is gone by then."""
    for r in weakref.getweakrefs(p):
        if id(r) not in dropped or sys.getrefcount(r) > _RNN_ONLY:
            return "a weak reference to it exists"
    return None


def _refusal(p: Any, dropped: set[int]) -> str | None:
    """Why ``torch.utils.swap_tensors`` will refuse to swap the parameter ``p`` (its own checks), or ``None`` when it
    may not: a use count of 2 on a leaf that requires grad passes when the other holder is its gradient accumulator,
    which cannot be told from here without making one (below autograd no node is made), so that case is left to the
    swap."""
    weak = _weak(p, dropped)
    if weak is not None:
        return weak
    held = p._use_count()
    if held > 2 or (held == 2 and not (p.is_leaf and p.requires_grad)):
        return "an autograd graph or a view still holds it"
    return None


__all__ = ["check_move"]
