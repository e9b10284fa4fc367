"""Fused optimizer steps (``torch.optim.Adam/AdamW/SGD/Adagrad(..., fused=True)``) and
``torch.amp.GradScaler``'s ops on tpu tensors.

A fused optimizer issues one ``aten._fused_adam_`` / ``_fused_adamw_`` / ``_fused_sgd_`` /
``_fused_adagrad_`` call per device and dtype, over lists of every parameter and its state. The
dispatcher routes it to the functional twin (``_fused_adam.default`` …), whose
kernel here updates every tensor in one plan: strict eager runs the whole optimizer
step as one executable, fused eager records it as one node. The outputs are
written back into the argument lists the in-place op mutates.

The arithmetic follows PyTorch's CPU fused kernels (``FusedAdamKernel.cpp``,
``FusedSGDKernel.cpp``, ``FusedAdagradKernel.cpp``): step-size scalars in float64, the element-wise update in
the parameter's dtype (float32 for float16/bfloat16), ``grad_scale`` divides the
gradients (and the unscaled gradients are stored back), and ``found_inf == 1``
leaves every tensor as it was. Python floats (``lr``, betas, ``eps``, weight decay)
are traced inputs, so an LR scheduler does not recompile the step; "weight decay
is zero" is therefore decided on the device, with the same result as skipping it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax.numpy as jnp
import torch

aten = torch.ops.aten


_HALF = (jnp.float16, jnp.bfloat16)


def _calc_dtype(x: Any) -> Any:
    return jnp.float32 if x.dtype in _HALF else x.dtype


def _f64(x: Any) -> Any:
    return jnp.asarray(x, jnp.float64)


def _skip(found_inf: Any, old: Any, new: Any) -> Any:
    """``new``, or ``old`` where the step was skipped (``found_inf == 1``)."""
    return new if found_inf is None else jnp.where(jnp.reshape(found_inf, ()) == 1, old, new)


def _gradient(p: Any, g: Any, grad_scale: Any, maximize: bool) -> tuple:
    """``(c, p, g_stored, g)``: ``c`` casts to ``p``'s compute dtype; ``p`` in it; the gradient
    unscaled by ``grad_scale`` (what the step stores back); the gradient to step with
    (negated for ``maximize``)."""
    dt = _calc_dtype(p)

    def c(x: Any) -> Any:
        return jnp.asarray(x).astype(dt)

    gc = c(g)
    if grad_scale is not None:
        gc = gc / c(jnp.reshape(grad_scale, ()))
    return c, c(p), gc, (-gc if maximize else gc)


def _l2(g: Any, p: Any, wd: Any, c: Any) -> Any:
    """``g + wd * p``, or ``g`` itself when ``wd`` is zero (decided on the device)."""
    return jnp.where(wd != 0, g + p * c(wd), g)


def _adam(self: list, grads: list, exp_avgs: list, exp_avg_sqs: list, max_exp_avg_sqs: list, state_steps: list,
          lr: Any, beta1: Any, beta2: Any, weight_decay: Any, eps: Any, amsgrad: bool, maximize: bool,
          grad_scale: Any, found_inf: Any, decoupled: bool) -> tuple:
    outs: tuple[list, list, list, list, list] = ([], [], [], [], [])
    b1, b2, wd, lr64 = _f64(beta1), _f64(beta2), _f64(weight_decay), _f64(lr)
    for i, (p, g, m, v) in enumerate(zip(self, grads, exp_avgs, exp_avg_sqs)):
        step = _f64(state_steps[i])
        bc1 = 1 - b1 ** step
        bc2_sqrt = jnp.sqrt(1 - b2 ** step)
        c, pc, g_stored, gc = _gradient(p, g, grad_scale, maximize)
        mc, vc = c(m), c(v)
        if decoupled:
            pc = jnp.where(wd != 0, pc - pc * c(lr64 * wd), pc)
        else:
            gc = _l2(gc, pc, wd, c)
        mc = mc * c(b1) + gc * c(1 - b1)
        vc = vc * c(b2) + gc * gc * c(1 - b2)
        if amsgrad:
            mx = jnp.maximum(c(max_exp_avg_sqs[i]), vc)
            denom = jnp.sqrt(mx) / c(bc2_sqrt) + c(eps)
        else:
            denom = jnp.sqrt(vc) / c(bc2_sqrt) + c(eps)
        pc = pc - c(lr64 / bc1) * mc / denom
        news = [pc, g_stored, mc, vc] + ([mx] if amsgrad else [])
        olds = [p, g, m, v] + ([max_exp_avg_sqs[i]] if amsgrad else [])
        for out, old, new in zip(outs, olds, news):
            out.append(_skip(found_inf, old, new.astype(old.dtype)))
    return outs


def fused_adam(ctx: Any, self: list, grads: list, exp_avgs: list, exp_avg_sqs: list, max_exp_avg_sqs: list,
               state_steps: list, *, lr: Any, beta1: float, beta2: float, weight_decay: float, eps: float,
               amsgrad: bool, maximize: bool, grad_scale: Any = None, found_inf: Any = None) -> tuple:
    """_fused_adam(Tensor[] self, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs, Tensor[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> (Tensor[] self_out, Tensor[] grads_out, Tensor[] exp_avgs_out, Tensor[] exp_avg_sqs_out, Tensor[] max_exp_avg_sqs_out)

    Adam with L2 weight decay added to the gradient (also the ``tensor_lr`` overload).
    """
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, decoupled=False)


def fused_adamw(ctx: Any, self: list, grads: list, exp_avgs: list, exp_avg_sqs: list, max_exp_avg_sqs: list,
                state_steps: list, *, lr: Any, beta1: float, beta2: float, weight_decay: float, eps: float,
                amsgrad: bool, maximize: bool, grad_scale: Any = None, found_inf: Any = None) -> tuple:
    """_fused_adamw(Tensor[] self, Tensor[] grads, Tensor[] exp_avgs, Tensor[] exp_avg_sqs, Tensor[] max_exp_avg_sqs, Tensor[] state_steps, *, float lr, float beta1, float beta2, float weight_decay, float eps, bool amsgrad, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> (Tensor[] self_out, Tensor[] grads_out, Tensor[] exp_avgs_out, Tensor[] exp_avg_sqs_out, Tensor[] max_exp_avg_sqs_out)

    AdamW: decoupled weight decay (``p -= p * lr * weight_decay``) before the Adam update.
    """
    return _adam(self, grads, exp_avgs, exp_avg_sqs, max_exp_avg_sqs, state_steps, lr, beta1, beta2,
                 weight_decay, eps, amsgrad, maximize, grad_scale, found_inf, decoupled=True)


def fused_sgd(ctx: Any, self: list, grads: list, momentum_buffer_list: list, *, weight_decay: float,
              momentum: float, lr: Any, dampening: float, nesterov: bool, maximize: bool, is_first_step: bool,
              grad_scale: Any = None, found_inf: Any = None) -> tuple:
    """_fused_sgd(Tensor[] self, Tensor[] grads, Tensor[] momentum_buffer_list, *, float weight_decay, float momentum, float lr, float dampening, bool nesterov, bool maximize, bool is_first_step, Tensor? grad_scale=None, Tensor? found_inf=None) -> (Tensor[] self_out, Tensor[] grads_out, Tensor[] momentum_buffer_list_out)

    SGD with optional momentum (an empty ``momentum_buffer_list`` means none), dampening
    and Nesterov; on the first step the momentum buffer is the gradient.
    """
    outs: tuple[list, list, list] = ([], [], [])
    wd, mom, damp, lr64 = _f64(weight_decay), _f64(momentum), _f64(dampening), _f64(lr)
    for i, (p, g) in enumerate(zip(self, grads)):
        c, pc, g_stored, gc = _gradient(p, g, grad_scale, maximize)
        gc = _l2(gc, pc, wd, c)
        news, olds = [None, g_stored], [p, g]
        if momentum_buffer_list:
            buf = gc if is_first_step else c(momentum_buffer_list[i]) * c(mom) + gc * c(1 - damp)
            gc = gc + buf * c(mom) if nesterov else buf
            news.append(buf)
            olds.append(momentum_buffer_list[i])
        news[0] = pc - gc * c(lr64)
        for out, old, new in zip(outs, olds, news):
            out.append(_skip(found_inf, old, new.astype(old.dtype)))
    return outs


def _adagrad(self: list, grads: list, state_sums: list, state_steps: list, lr: Any, lr_decay: Any,
             weight_decay: Any, eps: Any, maximize: bool, grad_scale: Any, found_inf: Any, with_steps: bool) -> tuple:
    outs: tuple[list, list, list, list] = ([], [], [], [])
    wd, lr64, decay = _f64(weight_decay), _f64(lr), _f64(lr_decay)
    for i, (p, g, acc) in enumerate(zip(self, grads, state_sums)):
        clr = lr64 / (1 + (_f64(state_steps[i]) - 1) * decay)
        c, pc, g_stored, gc = _gradient(p, g, grad_scale, maximize)
        if p.dtype in _HALF:  # (the CPU's vectorized kernel takes them in the parameters' dtype)
            clr, eps_p, wd_p = (jnp.asarray(x).astype(p.dtype) for x in (clr, eps, wd))
        else:
            eps_p, wd_p = eps, wd
        gc = _l2(gc, pc, wd_p, c)
        total = c(acc) + gc * gc
        pc = pc - c(clr) * gc / (jnp.sqrt(total) + c(eps_p))
        for out, old, new in zip(outs, (p, g, acc), (pc, g_stored, total)):
            out.append(_skip(found_inf, old, new.astype(old.dtype)))
        outs[3].append(state_steps[i])
    return outs if with_steps else outs[:3]


def fused_adagrad(ctx: Any, self: list, grads: list, state_sums: list, state_steps: list, *, lr: Any,
                  lr_decay: float, weight_decay: float, eps: float, maximize: bool, grad_scale: Any = None,
                  found_inf: Any = None) -> tuple:
    """_fused_adagrad(Tensor[] self, Tensor[] grads, Tensor[] state_sums, Tensor[] state_steps, *, float lr, float lr_decay, float weight_decay, float eps, bool maximize, Tensor? grad_scale=None, Tensor? found_inf=None) -> (Tensor[] self_out, Tensor[] grads_out, Tensor[] state_sums_out, Tensor[] state_steps_out)

    Adagrad: ``clr = lr / (1 + (step - 1) * lr_decay)``, ``sum += g²``,
    ``p -= clr * g / (sqrt(sum) + eps)`` (the steps come back unchanged; the ``tensor_lr``
    overload returns no steps).
    """
    return _adagrad(self, grads, state_sums, state_steps, lr, lr_decay, weight_decay, eps, maximize, grad_scale,
                    found_inf, with_steps=len(ctx.meta) == 4)


def amp_unscale(ctx: Any, self: list, found_inf: Any, inv_scale: Any) -> tuple:
    """_amp_foreach_non_finite_check_and_unscale(Tensor[] self, Tensor found_inf, Tensor inv_scale) -> (Tensor[] self_out, Tensor found_inf_out)

    ``GradScaler.unscale_``: every gradient times ``inv_scale``; ``found_inf`` becomes 1
    if any gradient holds an inf or NaN (it is left as it was otherwise).
    """
    scale = jnp.reshape(inv_scale, ()).astype(jnp.float32)
    bad = jnp.zeros((), bool)
    outs = []
    for g in self:
        bad = bad | ~jnp.all(jnp.isfinite(g))
        outs.append((g.astype(jnp.float32) * scale).astype(g.dtype))
    return outs, jnp.where(bad, jnp.ones_like(found_inf), found_inf)


def amp_update_scale(ctx: Any, self: Any, growth_tracker: Any, found_inf: Any, scale_growth_factor: Any,
                     scale_backoff_factor: Any, growth_interval: int) -> tuple:
    """_amp_update_scale(Tensor self, Tensor growth_tracker, Tensor found_inf, float scale_growth_factor, float scale_backoff_factor, int growth_interval) -> (Tensor, Tensor growth_tracker_out)

    ``GradScaler.update``: after an inf/NaN the scale backs off and the tracker resets;
    after ``growth_interval`` clean steps in a row the scale grows (if it stays finite).
    """
    inf = jnp.reshape(found_inf, self.shape) > 0
    grown = growth_tracker + 1
    grow = grown >= growth_interval
    bigger = self * jnp.asarray(scale_growth_factor, self.dtype)
    scale = jnp.where(inf, self * jnp.asarray(scale_backoff_factor, self.dtype),
                      jnp.where(grow & jnp.isfinite(bigger), bigger, self))
    tracker = jnp.where(inf | grow, jnp.zeros_like(growth_tracker), grown)
    return scale, tracker


#: Kernels by functional op; the dispatcher writes their outputs back for the in-place ops.
KERNELS = {
    aten._fused_adam.default: fused_adam,
    aten._fused_adam.tensor_lr: fused_adam,
    aten._fused_adamw.default: fused_adamw,
    aten._fused_adamw.tensor_lr: fused_adamw,
    aten._fused_sgd.default: fused_sgd,
    aten._fused_sgd.tensor_lr: fused_sgd,
    aten._fused_adagrad.default: fused_adagrad,
    aten._fused_adagrad.tensor_lr: fused_adagrad,
}
#: GradScaler's ops (torch has meta kernels for them).
AMP_KERNELS = {
    aten._amp_foreach_non_finite_check_and_unscale.default: amp_unscale,
    aten._amp_update_scale.default: amp_update_scale,
}


def _grads_unless_scaled(args: tuple, kwargs: dict) -> tuple:
    """The mutated arguments a step leaves as they were: ``grads`` (position 1) without ``grad_scale``."""
    return (1,) if kwargs.get("grad_scale") is None else ()


def _adagrad_unchanged(args: tuple, kwargs: dict) -> tuple:
    """:func:`_grads_unless_scaled`, and Adagrad's step counters (position 3: torch increments
    them before the call)."""
    return _grads_unless_scaled(args, kwargs) + (3,)


#: Functional op → which mutated argument positions come back unchanged for a call (not written back:
#: a gradient is often a view, and writing it through its view chain would cost a scatter).
UNCHANGED = {op: _grads_unless_scaled for op in KERNELS}
UNCHANGED[aten._fused_adagrad.default] = UNCHANGED[aten._fused_adagrad.tensor_lr] = _adagrad_unchanged


def _lists_meta(n: int, *args: Any, **kwargs: Any) -> tuple:
    """The outputs of a functional fused step on meta tensors: its first ``n`` list arguments, copied."""
    return tuple([torch.empty_like(t) for t in args[i]] for i in range(n))


#: Output shapes (torch has meta kernels for few of these functional ops).
META_FUNCTIONS = {op: functools.partial(_lists_meta, len(op._schema.returns)) for op in KERNELS}


__all__ = ["fused_adam", "fused_adamw", "fused_sgd", "fused_adagrad", "amp_unscale", "amp_update_scale", "KERNELS", "AMP_KERNELS", "META_FUNCTIONS", "UNCHANGED"]
