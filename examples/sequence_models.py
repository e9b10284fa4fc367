"""The zoo's sequence models (``examples/models.py`` lists them in ``FAMILIES``): tiny transformers decoders
and encoder built from configs with random weights (``llama``, ``qwen2``, the mixture-of-experts ``mixtral``,
``bert``), recurrent nets (``lstm``, ``gru``) and a keyword spotter on raw audio (``kws``: a log-mel front end computed with ``torch.stft``).

None has a BatchNorm or GroupNorm, so a factory only puts its model in eval mode (``models._finish``'s other work
is giving those layers statistics)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def _eval(model: nn.Module, args: tuple) -> tuple[nn.Module, tuple]:
    return model.eval(), args


# --------------------------------------------------------------------------- transformers models


class LogitsOnly(nn.Module):
    """Wrap a transformers causal LM: ``input_ids → logits``, no KV cache."""

    def __init__(self, lm: nn.Module):
        super().__init__()
        self.lm = lm

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm(input_ids=input_ids, use_cache=False).logits


_TINY_DECODER = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                     num_key_value_heads=2, vocab_size=64, max_position_embeddings=64)


def llama() -> tuple[nn.Module, tuple]:
    """Tiny LlamaForCausalLM (GQA 4 heads / 2 kv heads, SDPA) on input_ids [1, 8]."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(**_TINY_DECODER, attn_implementation="sdpa")
    return _eval(LogitsOnly(LlamaForCausalLM(config)), (torch.randint(0, 64, (1, 8)),))


def qwen2() -> tuple[nn.Module, tuple]:
    """Tiny Qwen2ForCausalLM (GQA, qkv bias, SDPA) on input_ids [1, 8]."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)
    config = Qwen2Config(**_TINY_DECODER, attn_implementation="sdpa")
    return _eval(LogitsOnly(Qwen2ForCausalLM(config)), (torch.randint(0, 64, (1, 8)),))


def mixtral() -> tuple[nn.Module, tuple]:
    """Tiny MixtralForCausalLM (4 experts, top 2, SDPA) on input_ids [1, 8]: a mixture-of-experts decoder.

    Traced in float32, transformers' expert layers call their grouped-matmul custom op
    (``transformers::grouped_mm_fallback``); on the tpu device they call ``F.grouped_mm``."""
    from transformers import MixtralConfig, MixtralForCausalLM

    torch.manual_seed(0)
    config = MixtralConfig(**_TINY_DECODER, num_local_experts=4, num_experts_per_tok=2, attn_implementation="sdpa")
    return _eval(LogitsOnly(MixtralForCausalLM(config)), (torch.randint(0, 64, (1, 8)),))


class LastHiddenState(nn.Module):
    """Wrap a transformers encoder: ``(input_ids, attention_mask) → last_hidden_state``."""

    def __init__(self, encoder: nn.Module):
        super().__init__()
        self.encoder = encoder

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


def bert() -> tuple[nn.Module, tuple]:
    """Tiny BertModel on input_ids [2, 8] and an attention mask with padding in row 1."""
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=32)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 6:] = 0
    return _eval(LastHiddenState(BertModel(config, add_pooling_layer=False)), (torch.randint(0, 64, (2, 8)), mask))


# --------------------------------------------------------------------------- rnn


class LSTMTagger(nn.Module):
    """2-layer batch-first LSTM; a Linear on every step."""

    def __init__(self, d_in: int = 8, hidden: int = 16, d_out: int = 4):
        super().__init__()
        self.rnn = nn.LSTM(d_in, hidden, num_layers=2, batch_first=True)
        self.fc = nn.Linear(hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y, _ = self.rnn(x)
        return self.fc(y)


def lstm() -> tuple[nn.Module, tuple]:
    """LSTMTagger on [2, 6, 8] sequences."""
    torch.manual_seed(0)
    return _eval(LSTMTagger(), (torch.randn(2, 6, 8),))


class BiGRUClassifier(nn.Module):
    """Bidirectional batch-first GRU; a Linear on the concatenated final states."""

    def __init__(self, d_in: int = 8, hidden: int = 16, d_out: int = 4):
        super().__init__()
        self.rnn = nn.GRU(d_in, hidden, batch_first=True, bidirectional=True)
        self.fc = nn.Linear(2 * hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        _, h = self.rnn(x)                          # [2, B, hidden]
        return self.fc(torch.cat([h[0], h[1]], dim=-1))


def gru() -> tuple[nn.Module, tuple]:
    """BiGRUClassifier on [2, 6, 8] sequences."""
    torch.manual_seed(0)
    return _eval(BiGRUClassifier(), (torch.randn(2, 6, 8),))


# --------------------------------------------------------------------------- kws


def _mel_filters(n_freqs: int, n_mels: int, sample_rate: int) -> torch.Tensor:
    """A triangular mel filterbank ``[n_freqs, n_mels]`` (HTK mel scale, no normalization)."""
    def mel(f: torch.Tensor) -> torch.Tensor:
        return 2595.0 * torch.log10(1.0 + f / 700.0)

    freqs = torch.linspace(0, sample_rate / 2, n_freqs)
    edges = 700.0 * (10 ** (torch.linspace(0, float(mel(torch.tensor(sample_rate / 2))), n_mels + 2) / 2595.0) - 1)
    lo, mid, hi = edges[:-2], edges[1:-1], edges[2:]
    up = (freqs[:, None] - lo) / (mid - lo)
    down = (hi - freqs[:, None]) / (hi - mid)
    return torch.clamp(torch.minimum(up, down), min=0.0)


class KeywordSpotter(nn.Module):
    """A keyword-spotting net on raw audio: log-mel front end (Hann-windowed STFT, power, mel filterbank, log),
    two 1-D convolutions over time, average pooling, a linear head."""

    def __init__(self, n_fft: int = 128, hop: int = 64, n_mels: int = 12, classes: int = 10):
        super().__init__()
        self.n_fft, self.hop = n_fft, hop
        self.register_buffer("window", torch.hann_window(n_fft))
        self.register_buffer("mel", _mel_filters(n_fft // 2 + 1, n_mels, 16000))
        self.conv1 = nn.Conv1d(n_mels, 24, 3, padding=1)
        self.conv2 = nn.Conv1d(24, 24, 3, stride=2, padding=1)
        self.head = nn.Linear(24, classes)

    def forward(self, audio: torch.Tensor) -> torch.Tensor:
        spec = torch.stft(audio, self.n_fft, self.hop, window=self.window, return_complex=True)
        feats = torch.log((spec.abs() ** 2).transpose(1, 2) @ self.mel + 1e-6).transpose(1, 2)
        h = F.relu(self.conv2(F.relu(self.conv1(feats))))
        return self.head(h.mean(-1))


def kws() -> tuple[nn.Module, tuple]:
    """KeywordSpotter on [2, 1600] audio (0.1 s at 16 kHz)."""
    torch.manual_seed(0)
    return _eval(KeywordSpotter(), (torch.randn(2, 1600),))
