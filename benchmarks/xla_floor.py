"""The XLA floor of a training step: the MLP step of ``bench_eager.py`` written in JAX, one ``jax.jit``.

Fused eager can at best hand XLA each step's forward, backward and optimizer update as graphs and cost nothing
itself. This step is that best case and more: the whole step is one graph (fused eager makes two, cut where
``loss.backward()`` and ``opt.step()`` end), with no torch and no runtime around it. ``strict time / this time``
bounds what fused/strict can reach on this machine, whatever the runtime does. The twin is checked against
PyTorch on the CPU (:func:`check_twin`) before it is timed.
"""

from __future__ import annotations

import math
from typing import Any, Callable

import jax
import jax.numpy as jnp
import torch

#: torch.optim.AdamW's defaults (``bench_eager.py`` sets only ``lr``).
BETAS, EPS, WEIGHT_DECAY = (0.9, 0.999), 1e-8, 1e-2


def _forward(params: dict, x: jax.Array) -> jax.Array:
    """``examples.models.MLP``: Linear → LayerNorm → GELU (erf) → Dropout(p=0) → Linear."""
    h = x @ params["fc1.weight"].T + params["fc1.bias"]
    mean = h.mean(-1, keepdims=True)
    var = ((h - mean) ** 2).mean(-1, keepdims=True)
    h = (h - mean) / jnp.sqrt(var + 1e-5) * params["norm.weight"] + params["norm.bias"]
    h = 0.5 * h * (1 + jax.scipy.special.erf(h / math.sqrt(2)))
    return h @ params["fc2.weight"].T + params["fc2.bias"]


def _step(params: dict, m: dict, v: dict, t: jax.Array, x: jax.Array, y: jax.Array, lr: float) -> tuple:
    """One AdamW step on the mean squared error, as ``torch.optim.AdamW`` computes it."""
    loss, grads = jax.value_and_grad(lambda p: jnp.mean((_forward(p, x) - y) ** 2))(params)
    t = t + 1
    (b1, b2), new = BETAS, ({}, {}, {})
    for k, p in params.items():
        g = grads[k]
        mk = m[k] + (g - m[k]) * (1 - b1)
        vk = v[k] * b2 + (1 - b2) * g * g
        denom = jnp.sqrt(vk) / jnp.sqrt(1 - b2 ** t) + EPS
        new[0][k] = p * (1 - lr * WEIGHT_DECAY) - (lr / (1 - b1 ** t)) * mk / denom
        new[1][k], new[2][k] = mk, vk
    return (*new, t, loss)


def mlp_step(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, lr: float) -> Callable[[], float]:
    """A call running one whole AdamW step of ``model`` (an ``examples.models.MLP`` on the CPU, its dropout off)
    on the batch ``(x, y)`` as one jitted JAX function, returning the loss (as ``loss.item()``: it waits)."""
    params = {k: jnp.asarray(v.detach().numpy()) for k, v in model.named_parameters()}
    state = [params, {k: jnp.zeros_like(p) for k, p in params.items()},
             {k: jnp.zeros_like(p) for k, p in params.items()}, jnp.zeros((), jnp.float32)]
    jitted = jax.jit(_step, donate_argnums=(0, 1, 2), static_argnums=6)
    xj, yj = jnp.asarray(x.numpy()), jnp.asarray(y.numpy())

    def step() -> float:
        *state[:4], loss = jitted(*state, xj, yj, lr)
        return float(loss)

    step.params = lambda: state[0]
    return step


def check_twin(make: Callable[[], torch.nn.Module], x: torch.Tensor, y: torch.Tensor, lr: float,
               steps: int = 3) -> None:
    """Raise unless :func:`mlp_step` and PyTorch's AdamW on the CPU give the same losses and parameters."""
    model = make()
    twin = mlp_step(model, x, y, lr)
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for _ in range(steps):
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        got = twin()
        if not math.isclose(got, loss.item(), rel_tol=1e-4, abs_tol=1e-6):
            raise AssertionError(f"the JAX twin's loss {got} is not PyTorch's {loss.item()}")
    for k, p in model.named_parameters():
        torch.testing.assert_close(torch.from_numpy(jax.device_get(twin.params()[k]).copy()), p.detach(),
                                   rtol=1e-4, atol=1e-4)  # (Adam divides near-zero gradients by their own size)


def floor_step(task: Any, lr: float) -> Callable[[], float] | None:
    """The XLA floor of ``task``'s step (a ``bench_eager`` task: its model seeded as there, dropout off), checked
    against PyTorch first; ``None`` for a model that is not the MLP (the minGPT has no JAX twin here)."""
    from examples.models import MLP
    from examples.train import _model

    def make() -> torch.nn.Module:
        return _model(task, dropout=False)

    if type(make()) is not MLP:
        return None
    x, y = task.batches[0]
    check_twin(make, x, y, lr)
    return mlp_step(make(), x, y, lr)
