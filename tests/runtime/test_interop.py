"""JAX code on tpu tensors (``tpu_runtime.as_jax`` / ``from_jax`` / ``call_jax``): values, gradients through
``jax.vjp``, a Pallas kernel, fused eager and ``torch.compile``."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from jax.experimental import pallas as pl

import tpu_runtime


def _weights(n: int, device: str) -> torch.Tensor:
    return torch.arange(n, dtype=torch.float32, device=device)


def test_a_jax_function_runs_on_tpu_tensors_with_its_gradient():
    x = torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    on_device = x.to("tpu").requires_grad_()
    y = tpu_runtime.call_jax(functools.partial(jax.nn.softmax, axis=-1), on_device)
    (y * _weights(6, "tpu")).sum().backward()
    on_cpu = x.clone().requires_grad_()
    want = torch.softmax(on_cpu, -1)
    (want * _weights(6, "cpu")).sum().backward()
    assert y.device.type == "tpu" and y.requires_grad
    torch.testing.assert_close(y.detach().cpu(), want.detach())
    torch.testing.assert_close(on_device.grad.cpu(), on_cpu.grad)


def test_a_pallas_kernel_runs_on_tpu_tensors():
    def kernel(a_ref, b_ref, o_ref):
        o_ref[...] = a_ref[...] * 2 + b_ref[...]

    def twice_plus(a, b):
        return pl.pallas_call(kernel, out_shape=jax.ShapeDtypeStruct(a.shape, a.dtype), interpret=True)(a, b)

    a, b = torch.randn(4, 8), torch.randn(4, 8)
    got = tpu_runtime.call_jax(twice_plus, a.to("tpu"), b.to("tpu"))
    assert torch.equal(got.cpu(), a * 2 + b)


def test_several_outputs_integer_arrays_and_cpu_inputs():
    def pick(v, idx, scale):
        return [v[idx] * scale, jnp.argmax(v, -1)]

    v = torch.randn(5, 3, device="tpu", requires_grad=True)
    rows, best = tpu_runtime.call_jax(functools.partial(pick, scale=3.0), v, torch.tensor([0, 2], device="tpu"))
    assert best.dtype == torch.int64 and not best.requires_grad  # (an integer output takes no gradient)
    rows.sum().backward()
    assert torch.equal(v.grad.cpu(), torch.tensor([3.0, 0, 3, 0, 0])[:, None].expand(5, 3))
    both = tpu_runtime.call_jax(lambda a: {"sin": jnp.sin(a), "cos": jnp.cos(a)}, v)  # (any pytree of arrays)
    v.grad = None
    (both["sin"] + 2 * both["cos"]).sum().backward()
    torch.testing.assert_close(v.grad.cpu(), v.detach().cpu().cos() - 2 * v.detach().cpu().sin())
    c = torch.randn(3, requires_grad=True)  # (a CPU input: uploaded, its gradient on the CPU)
    out = tpu_runtime.call_jax(jnp.exp, c)
    out.sum().backward()
    assert out.device.type == "tpu" and c.grad.device.type == "cpu"
    torch.testing.assert_close(c.grad, c.detach().exp())


def test_arrays_in_and_out_keep_values_shapes_and_dtypes():
    t = torch.arange(6, device="tpu").view(2, 3).t()  # (a view)
    assert np.array_equal(np.asarray(tpu_runtime.as_jax(t)), np.arange(6).reshape(2, 3).T)
    back = tpu_runtime.from_jax(jnp.ones((2, 2), jnp.bfloat16))
    assert back.device.type == "tpu" and back.dtype == torch.bfloat16
    assert torch.equal(back.cpu(), torch.ones(2, 2, dtype=torch.bfloat16))
    with tpu_runtime.set_eager_mode("fused"):
        d = torch.linspace(0, 1, 5, dtype=torch.float64, device="tpu") * 2  # (pending: the call reads it)
        r = tpu_runtime.call_jax(jnp.sin, d)
    assert r.dtype == torch.float64 and torch.equal(r.cpu(), (torch.linspace(0, 1, 5, dtype=torch.float64) * 2).sin())


def test_under_torch_compile_the_call_is_a_graph_break():
    @torch.compile(backend="tpu")
    def f(x):
        return tpu_runtime.call_jax(jnp.tanh, x * 2) + 1

    x = torch.randn(4, generator=torch.Generator().manual_seed(1))
    on_device = x.to("tpu").requires_grad_()
    f(on_device).sum().backward()
    torch.testing.assert_close(on_device.grad.cpu(), 2 * (1 - torch.tanh(2 * x) ** 2))


def test_what_is_not_a_tensor_or_an_array_is_refused():
    x = torch.ones(2, device="tpu")
    with pytest.raises(TypeError, match=r"argument 1 is a float, not a tensor .*functools\.partial"):
        tpu_runtime.call_jax(jnp.add, x, 3.0)
    with pytest.raises(TypeError, match=r"returned str; it must return a jax\.Array"):
        tpu_runtime.call_jax(lambda a: "a", x)
    z = torch.ones(2, dtype=torch.complex64, device="tpu", requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"complex tensor that requires grad; JAX's complex gradients"):
        tpu_runtime.call_jax(jnp.abs, z)
