"""Complex values inside exported programs (``exporters/complex_values.py``), through ONNX and LiteRT: a log-mel
spectrogram front end (``stft`` → ``abs``), ``istft``, the ``torch.fft`` family (odd and even lengths, every
norm, 2-D, another axis), rotary embeddings written with ``view_as_complex`` and a complex buffer, and complex
arithmetic; each artifact run in ONNX Runtime / the LiteRT Interpreter against PyTorch. A complex model input
or output is refused by name."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch import nn

from converter.api import build, convert
from converter.errors import UnsupportedOpError
from exporters.litert import build as build_litert
from exporters.onnx import build as build_onnx
from tests.litert.adapter import JaxProgram
from tests.targets import one_capture

TARGETS = ["onnx", "litert"]
#: one worker: each model's capture serves both targets
pytestmark = pytest.mark.xdist_group("exporter-complex")


class Spectrogram(nn.Module):
    """Log-mel spectrogram (a keyword-spotting / speech front end): Hann-windowed, centred STFT, power, mel."""

    def __init__(self, n_fft: int = 50, hop: int = 16, n_mels: int = 8):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("mel", torch.rand(n_fft // 2 + 1, n_mels, generator=torch.Generator().manual_seed(0)))

    def forward(self, audio):
        spec = torch.stft(audio, self.n_fft, self.hop, window=self.window, return_complex=True)
        power = spec.abs().pow(2)
        resynth = torch.istft(spec, self.n_fft, self.hop, window=self.window, length=audio.shape[-1])
        return torch.log(power.transpose(-1, -2) @ self.mel + 1e-6), resynth


class Signals(nn.Module):
    """The torch.fft family, complex arithmetic and a rotary embedding with a complex buffer."""

    def __init__(self):
        super().__init__()
        angles = torch.outer(torch.arange(6.0), 1.0 / 10000 ** (torch.arange(0, 8, 2).float() / 8))
        self.register_buffer("freqs", torch.polar(torch.ones(6, 4), angles))

    def forward(self, x, y, z, q):
        c = torch.view_as_complex(z)
        rotated = torch.view_as_complex(q.reshape(*q.shape[:-1], -1, 2)) * self.freqs
        return (
            torch.view_as_real(torch.fft.fft(x)), torch.fft.rfft(x[:, :9]).abs(),
            torch.view_as_real(torch.fft.ifft(torch.fft.fft(x, norm="ortho") * 2, norm="ortho")),
            torch.fft.irfft(torch.fft.rfft(x) * 1.5, n=12), torch.fft.irfft(torch.fft.rfft(x[:, :9]), n=9),
            torch.view_as_real(torch.fft.fft2(y, norm="forward")), torch.fft.rfft2(y).abs(),
            torch.fft.irfft2(torch.fft.rfft2(y)), torch.fft.fft(x, dim=0).angle(),
            torch.view_as_real(c / (c * 1j + 2)), torch.exp(c).abs(), c.pow(3).real, c.sgn().imag,
            torch.view_as_real((c[:4].reshape(2, 2) @ c[:4].reshape(2, 2).T).sum(0)),
            torch.view_as_real(rotated).flatten(-2),
        )


def _inputs():
    g = torch.Generator().manual_seed(0)
    return (torch.randn(3, 12, generator=g), torch.randn(2, 4, 6, generator=g), torch.randn(5, 2, generator=g),
            torch.randn(2, 6, 8, generator=g))


def _check(program, model, args, target, rtol):
    with torch.no_grad():
        want = model(*args)
    got = build(program, target=target)(*args)
    for i, (g, w) in enumerate(zip(got, want, strict=True)):
        g = torch.as_tensor(np.asarray(g))
        err = ((g - w).abs().max() / w.abs().max()).item()
        assert err < rtol, f"output {i}: relative error {err:.2e}"


def _audio():
    return (torch.randn(2, 400, generator=torch.Generator().manual_seed(1)),)


@one_capture
def _spectrogram():
    return Spectrogram().eval(), _audio()


@pytest.mark.parametrize("target", TARGETS)
def test_log_mel_spectrogram_and_istft_export(target):
    _check(_spectrogram(), Spectrogram(), _audio(), target, 1e-6)


class _LogMel(Spectrogram):
    def forward(self, audio):
        return super().forward(audio)[0]


@one_capture
def _log_mel():
    return _LogMel().eval(), (torch.randn(2, 400),), ({0: torch.export.Dim("batch")},)


@pytest.mark.parametrize("target", TARGETS)
def test_log_mel_spectrogram_with_a_dynamic_batch(target):
    model = _LogMel().eval()
    art = build(_log_mel(), target=target)
    for n in (1, 3):
        audio = torch.randn(n, 400, generator=torch.Generator().manual_seed(n))
        want = model(audio)
        got = torch.as_tensor(np.asarray(art(audio)))
        assert got.shape == want.shape and ((got - want).abs().max() / want.abs().max()).item() < 1e-6


@one_capture
def _fft_over_time():
    return _ComplexAbs().eval(), (torch.randn(2, 16),), ({1: torch.export.Dim("time")},)


@pytest.mark.parametrize("target", TARGETS)
def test_an_fft_over_a_dynamic_axis_is_refused_by_name(target):
    with pytest.raises(UnsupportedOpError, match="an FFT over a dynamic axis"):
        build(_fft_over_time(), target=target)


@one_capture
def _signals():
    return Signals().eval(), _inputs()


@pytest.mark.parametrize("target", TARGETS)
def test_fft_family_complex_arithmetic_and_rotary_embedding_export(target):
    _check(_signals(), Signals(), _inputs(), target, 1e-6)


class _ComplexAbs(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x).abs()


class _ComplexOut(nn.Module):
    def forward(self, x):
        return torch.fft.rfft(x)


class _ComplexIn(nn.Module):
    def forward(self, x):
        return torch.fft.irfft(x)


@pytest.mark.parametrize("target", TARGETS)
def test_complex_outputs_and_inputs_are_refused_by_name(target):
    with pytest.raises(UnsupportedOpError, match=r"a complex output .*view_as_real") as info:
        convert(_ComplexOut(), (torch.randn(2, 8),), target=target)
    assert f"{__file__}:" in str(info.value)
    with pytest.raises(UnsupportedOpError, match=r"input 0.*complex64.*no complex tensors.*view_as_real"):
        convert(_ComplexIn(), (torch.randn(2, 5, dtype=torch.complex64),), target=target)


def _jax_complex_ops(x, y):
    z = jax.lax.complex(x, y)
    w = z * (0.5 - 2j)
    return (jnp.real(z ** -2), jnp.imag(z ** 3), (z == w).astype(jnp.float32), (z != z * 1).astype(jnp.float32),
            jnp.real(z @ x.T), jnp.imag(x @ z.T), jnp.imag(jax.lax.conj(x) + z), jnp.abs(jnp.sign(z)),
            jnp.real(jnp.cumsum(z, axis=1)), jnp.imag(jnp.concatenate([z, w], 0)[::-1]),
            jnp.abs(jnp.pad(z, ((1, 0), (0, 2)), constant_values=1 + 1j)), jnp.real(jnp.where(x > 0, z, w)))


@pytest.mark.parametrize("target", TARGETS)
def test_complex_primitive_formulas_match_jax(target):
    """The formulas of :mod:`exporters.complex_values` on primitives torch programs rarely reach (negative integer
    powers, comparisons, a complex-by-real ``dot_general``, ``conj`` of a real value, cumsum, pad, select)."""
    g = np.random.default_rng(0)
    x, y = g.standard_normal((3, 4)).astype(np.float32), g.standard_normal((3, 4)).astype(np.float32)
    program = JaxProgram(_jax_complex_ops, [x, y])
    got = {"onnx": build_onnx, "litert": build_litert}[target](program)(x, y)
    for i, (o, w) in enumerate(zip(got, program.reference(x, y), strict=True)):
        np.testing.assert_allclose(o, w, rtol=2e-5, atol=1e-5, err_msg=f"output {i}")
