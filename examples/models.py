"""A zoo of tiny models, one per architecture family, for tests, demos and benchmarks.

Every factory is ``def <family>() -> tuple[nn.Module, tuple]``: an eval-mode model
and its sample inputs. Factories are seeded (``torch.manual_seed(0)``), download
nothing (transformers models are built from configs with random weights) and are
small enough that converting and running all of them takes seconds on 2 CPU
cores. BatchNorm layers get random running statistics so inference-mode
BatchNorm (and its folding) is really exercised rather than being an identity.

Run ``python examples/models.py`` to check every factory in PyTorch eager mode.

>>> from examples.models import FAMILIES
>>> model, args = FAMILIES["resnet"]()
>>> model(*args).shape
torch.Size([2, 10])
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

if __package__ in (None, ""):  # loaded by file path (the CLI's FILE:FUNC form) or run as a script
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from examples.sequence_models import (BiGRUClassifier, KeywordSpotter, LastHiddenState, LogitsOnly,  # noqa: E402,F401
                                      LSTMTagger, bert, gru, kws, llama, lstm, mixtral, qwen2)

Factory = Callable[[], "tuple[nn.Module, tuple]"]


def _finish(model: nn.Module, args: tuple) -> tuple[nn.Module, tuple]:
    """Give BatchNorm layers non-trivial statistics and affine params; return eval mode."""
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.running_mean.copy_(torch.randn(m.num_features, generator=g) * 0.1)
                m.running_var.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.weight.copy_(torch.rand(m.num_features, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_features, generator=g) * 0.1)
            elif isinstance(m, nn.GroupNorm) and m.affine:
                m.weight.copy_(torch.rand(m.num_channels, generator=g) * 0.5 + 0.75)
                m.bias.copy_(torch.randn(m.num_channels, generator=g) * 0.1)
    return model.eval(), args


# --------------------------------------------------------------------------- mlp


class MLP(nn.Module):
    """Linear → LayerNorm → GELU → Dropout → Linear."""

    def __init__(self, d_in: int = 16, d_hidden: int = 32, d_out: int = 8):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.norm = nn.LayerNorm(d_hidden)
        self.act = nn.GELU()
        self.drop = nn.Dropout(0.1)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.drop(self.act(self.norm(self.fc1(x)))))


def mlp() -> tuple[nn.Module, tuple]:
    """MLP on a [4, 16] batch."""
    torch.manual_seed(0)
    return _finish(MLP(), (torch.randn(4, 16),))


# --------------------------------------------------------------------------- cnn


class SmallCNN(nn.Module):
    """Two conv/BN/ReLU stages with max pooling, global average pooling, a classifier."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        )
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(torch.flatten(self.pool(self.features(x)), 1))


def cnn() -> tuple[nn.Module, tuple]:
    """SmallCNN on [2, 3, 16, 16] images."""
    torch.manual_seed(0)
    return _finish(SmallCNN(), (torch.randn(2, 3, 16, 16),))


# --------------------------------------------------------------------------- mobilenet


def _conv_bn_relu6(c_in: int, c_out: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(nn.Conv2d(c_in, c_out, k, stride, k // 2, groups=groups, bias=False),
                         nn.BatchNorm2d(c_out), nn.ReLU6())


class InvertedResidual(nn.Module):
    """MobileNetV2 block: 1x1 expand → 3x3 depthwise → 1x1 linear projection (+ skip)."""

    def __init__(self, c_in: int, c_out: int, stride: int, expand: int):
        super().__init__()
        hidden = c_in * expand
        self.use_skip = stride == 1 and c_in == c_out
        self.block = nn.Sequential(
            _conv_bn_relu6(c_in, hidden, 1),
            _conv_bn_relu6(hidden, hidden, 3, stride, groups=hidden),
            nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block(x)
        return x + y if self.use_skip else y


class TinyMobileNet(nn.Module):
    """Stem conv, three inverted-residual blocks, 1x1 head, pooling, classifier."""

    def __init__(self, num_classes: int = 10):
        super().__init__()
        self.stem = _conv_bn_relu6(3, 8, 3, stride=2)
        self.blocks = nn.Sequential(InvertedResidual(8, 8, 1, 4), InvertedResidual(8, 16, 2, 4),
                                    InvertedResidual(16, 16, 1, 4))
        self.head = _conv_bn_relu6(16, 32, 1)
        self.fc = nn.Linear(32, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.head(self.blocks(self.stem(x)))
        return self.fc(F.adaptive_avg_pool2d(y, 1).flatten(1))


def mobilenet() -> tuple[nn.Module, tuple]:
    """TinyMobileNet on [2, 3, 16, 16] images."""
    torch.manual_seed(0)
    return _finish(TinyMobileNet(), (torch.randn(2, 3, 16, 16),))


# --------------------------------------------------------------------------- resnet


class BasicBlock(nn.Module):
    """ResNet basic block; a strided 1x1 conv + BN downsample when the shape changes."""

    def __init__(self, c_in: int, c_out: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(c_in, c_out, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(c_out)
        self.conv2 = nn.Conv2d(c_out, c_out, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(c_out)
        self.downsample = None
        if stride != 1 or c_in != c_out:
            self.downsample = nn.Sequential(nn.Conv2d(c_in, c_out, 1, stride, bias=False), nn.BatchNorm2d(c_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        y = F.relu(self.bn1(self.conv1(x)))
        return F.relu(self.bn2(self.conv2(y)) + identity)


class TinyResNet(nn.Module):
    """Stem (conv 3x3, BN, ReLU, max pool), two basic blocks, pooling, classifier."""

    def __init__(self, num_classes: int = 10, width: int = 8):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 3, 1, 1, bias=False), nn.BatchNorm2d(width), nn.ReLU(),
                                  nn.MaxPool2d(3, 2, 1))
        self.layer1 = BasicBlock(width, width)
        self.layer2 = BasicBlock(width, 2 * width, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(2 * width, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.layer2(self.layer1(self.stem(x)))
        return self.fc(torch.flatten(self.avgpool(y), 1))


def resnet() -> tuple[nn.Module, tuple]:
    """TinyResNet on [2, 3, 16, 16] images."""
    torch.manual_seed(0)
    return _finish(TinyResNet(), (torch.randn(2, 3, 16, 16),))


# --------------------------------------------------------------------------- unet


class ConvGNSiLU(nn.Sequential):
    """3x3 conv → GroupNorm → SiLU."""

    def __init__(self, c_in: int, c_out: int, groups: int = 4):
        super().__init__(nn.Conv2d(c_in, c_out, 3, padding=1), nn.GroupNorm(groups, c_out), nn.SiLU())


class TinyUNet(nn.Module):
    """Two-level U-Net: strided-conv down, ConvTranspose2d up, concatenated skips,
    and nearest / bilinear ``F.interpolate`` on the output path."""

    def __init__(self, c_in: int = 3, c_out: int = 2, width: int = 8):
        super().__init__()
        self.enc1 = ConvGNSiLU(c_in, width)
        self.down = nn.Conv2d(width, 2 * width, 3, stride=2, padding=1)
        self.enc2 = ConvGNSiLU(2 * width, 2 * width)
        self.bottleneck = ConvGNSiLU(2 * width, 2 * width)
        self.up = nn.ConvTranspose2d(2 * width, width, 2, stride=2)
        self.dec1 = ConvGNSiLU(2 * width, width)
        self.side = nn.Conv2d(2 * width, width, 1)
        self.head = nn.Conv2d(2 * width, c_out, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s1 = self.enc1(x)                                   # [N, w, H, W]
        s2 = self.enc2(self.down(s1))                       # [N, 2w, H/2, W/2]
        b = self.bottleneck(s2)
        d1 = self.dec1(torch.cat([self.up(b), s1], dim=1))  # [N, w, H, W]
        side = F.interpolate(self.side(s2), scale_factor=2, mode="nearest")
        y = self.head(torch.cat([d1, side], dim=1))
        return F.interpolate(y, size=(24, 24), mode="bilinear", align_corners=False)


def unet() -> tuple[nn.Module, tuple]:
    """TinyUNet on [1, 3, 16, 16] images; output [1, 2, 24, 24]."""
    torch.manual_seed(0)
    return _finish(TinyUNet(), (torch.randn(1, 3, 16, 16),))


# --------------------------------------------------------------------------- vit


class ViTBlock(nn.Module):
    """Pre-norm transformer block: LayerNorm → MultiheadAttention, LayerNorm → MLP."""

    def __init__(self, dim: int, heads: int, mlp_ratio: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, mlp_ratio * dim), nn.GELU(), nn.Linear(mlp_ratio * dim, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        return x + self.mlp(self.norm2(x))


class TinyViT(nn.Module):
    """Patch-embedding conv, class token, learned positional embedding, 2 blocks, head."""

    def __init__(self, image: int = 16, patch: int = 4, dim: int = 32, depth: int = 2, heads: int = 4,
                 num_classes: int = 10):
        super().__init__()
        self.patch_embed = nn.Conv2d(3, dim, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, n + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[ViTBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.patch_embed(x).flatten(2).transpose(1, 2)          # [N, n, dim]
        t = torch.cat([self.cls_token.expand(t.shape[0], -1, -1), t], dim=1) + self.pos_embed
        t = self.norm(self.blocks(t))
        return self.head(t[:, 0])


def vit() -> tuple[nn.Module, tuple]:
    """TinyViT on [2, 3, 16, 16] images (16 patches of 4x4 + a class token)."""
    torch.manual_seed(0)
    return _finish(TinyViT(), (torch.randn(2, 3, 16, 16),))


# --------------------------------------------------------------------------- transformer_encoder


class Encoder(nn.Module):
    """``nn.TransformerEncoder`` (batch_first) over features with a key padding mask."""

    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor, key_padding_mask: torch.Tensor) -> torch.Tensor:
        return self.out(self.encoder(x, src_key_padding_mask=key_padding_mask))


def transformer_encoder() -> tuple[nn.Module, tuple]:
    """Encoder on x [2, 8, 32] with a bool padding mask [2, 8] (True = padding)."""
    torch.manual_seed(0)
    mask = torch.zeros(2, 8, dtype=torch.bool)
    mask[1, 5:] = True
    return _finish(Encoder(), (torch.randn(2, 8, 32), mask))


# --------------------------------------------------------------------------- mingpt


class CausalSelfAttention(nn.Module):
    """minGPT attention: fused qkv projection, a registered tril buffer, masked_fill(-inf)."""

    def __init__(self, dim: int, heads: int, block_size: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(dim, 3 * dim)
        self.c_proj = nn.Linear(dim, dim)
        self.attn_dropout = nn.Dropout(0.1)
        self.register_buffer("bias", torch.tril(torch.ones(block_size, block_size)).view(1, 1, block_size, block_size))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / (k.shape[-1] ** 0.5))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class GPTBlock(nn.Module):
    """LayerNorm → causal attention, LayerNorm → MLP with GELU(tanh)."""

    def __init__(self, dim: int, heads: int, block_size: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(dim)
        self.attn = CausalSelfAttention(dim, heads, block_size)
        self.ln_2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(approximate="tanh"), nn.Linear(4 * dim, dim),
                                 nn.Dropout(0.1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class MinGPT(nn.Module):
    """Token + position embeddings, blocks, final LayerNorm, lm_head tied to the token embedding."""

    def __init__(self, vocab: int = 64, block_size: int = 16, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.wpe = nn.Embedding(block_size, dim)
        self.drop = nn.Dropout(0.1)
        self.h = nn.ModuleList([GPTBlock(dim, heads, block_size) for _ in range(layers)])
        self.ln_f = nn.LayerNorm(dim)
        self.lm_head = nn.Linear(dim, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(0, idx.shape[1], dtype=torch.long, device=idx.device).unsqueeze(0)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def mingpt() -> tuple[nn.Module, tuple]:
    """MinGPT on int64 token ids [2, 8]; returns logits [2, 8, 64]."""
    torch.manual_seed(0)
    return _finish(MinGPT(), (torch.randint(0, 64, (2, 8)),))


# --------------------------------------------------------------------------- dlrm


class TinyDLRM(nn.Module):
    """DLRM: bottom MLP on dense features, an Embedding and a sum-EmbeddingBag (with
    offsets) on sparse ones, pairwise dot-product interaction via bmm, top MLP."""

    def __init__(self, dense: int = 8, dim: int = 16, rows: int = 32):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 32), nn.ReLU(), nn.Linear(32, dim), nn.ReLU())
        self.emb = nn.Embedding(rows, dim)
        self.bag = nn.EmbeddingBag(rows, dim, mode="sum")
        n = 3  # dense vector + two sparse vectors
        li, lj = torch.triu_indices(n, n, offset=1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = nn.Sequential(nn.Linear(dim + li.numel(), 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense: torch.Tensor, idx: torch.Tensor, bag_idx: torch.Tensor,
                offsets: torch.Tensor) -> torch.Tensor:
        d = self.bottom(dense)                                            # [B, dim]
        feats = torch.stack([d, self.emb(idx), self.bag(bag_idx, offsets)], dim=1)  # [B, 3, dim]
        inter = torch.bmm(feats, feats.transpose(1, 2))                   # [B, 3, 3]
        z = torch.cat([d, inter[:, self.li, self.lj]], dim=1)
        return torch.sigmoid(self.top(z))


def dlrm() -> tuple[nn.Module, tuple]:
    """TinyDLRM on 4 samples: dense [4, 8], idx [4], bags of 10 indices with offsets [4]."""
    torch.manual_seed(0)
    args = (torch.randn(4, 8), torch.randint(0, 32, (4,)), torch.randint(0, 32, (10,)),
            torch.tensor([0, 3, 4, 7]))
    return _finish(TinyDLRM(), args)


# --------------------------------------------------------------------------- tensor_ops


class TensorOps(nn.Module):
    """One module touching many everyday tensor ops; returns several outputs.

    Inputs: ``x`` float [4, 8], ``img`` float [1, 4, 4, 4], ``idx`` int64 [4, 3].
    """

    def __init__(self):
        super().__init__()
        self.register_buffer("scale", torch.linspace(0.5, 1.5, 8))

    def forward(self, x: torch.Tensor, img: torch.Tensor, idx: torch.Tensor):
        # elementwise, activations, comparisons, logical ops
        pos = x > 0
        both = torch.logical_and(pos, x < 1.0) | torch.logical_not(x.abs() >= 0.5)
        y = torch.where(pos, x * self.scale, torch.clamp(x, min=-0.5, max=0.5))
        act = F.hardswish(y) + F.mish(x) + torch.erf(x) * 0.5
        act = act.masked_fill(both, 0.25)
        # reductions over dims
        red = torch.stack([x.sum(dim=1), x.mean(dim=-1), x.amax(dim=1), torch.cumsum(x, dim=1)[:, -1]], dim=1)
        arg = torch.argmax(x, dim=1)
        # indexing
        g = torch.gather(x, 1, idx)
        sel = torch.index_select(x, 0, torch.tensor([3, 0, 2]))
        sc = torch.zeros(4, 8).scatter(1, idx, torch.ones(4, 3))
        put = x.clone()
        put[torch.tensor([0, 2]), torch.tensor([1, 5])] = torch.tensor([10.0, -10.0])
        # shapes
        a, b = torch.chunk(x, 2, dim=1)
        s0, s1, s2 = torch.split(x, [2, 3, 3], dim=1)
        shp = (a.permute(1, 0) @ b) + s1.sum() - s0.mean() * s2.amax()
        ex = x[:, :1].expand(4, 8) + torch.arange(8, dtype=torch.float32)
        full = torch.full((4, 8), 2.0) + torch.ones(4, 8) - torch.zeros(4, 8)
        # padding and pixel shuffle
        pc = F.pad(img, (1, 1, 1, 1), mode="constant", value=-1.0)
        pr = F.pad(img, (1, 2, 2, 1), mode="reflect")
        pp = F.pad(img, (2, 1, 1, 2), mode="replicate")
        ps = F.pixel_shuffle(img, 2)
        # sorting
        topv, topi = torch.topk(x, 3, dim=1)
        srt, order = torch.sort(x, dim=1, descending=True)
        return (act, red, arg, g, sel, sc, put, shp, ex * full, pc, pr + pp, ps, topv, topi, srt, order,
                both)


def tensor_ops() -> tuple[nn.Module, tuple]:
    """TensorOps on x [4, 8], img [1, 4, 4, 4], idx [4, 3] (distinct per row)."""
    torch.manual_seed(0)
    idx = torch.stack([torch.randperm(8)[:3] for _ in range(4)])
    return _finish(TensorOps(), (torch.randn(4, 8), torch.randn(1, 4, 4, 4), idx))


# --------------------------------------------------------------------------- registry

FAMILIES: dict[str, Factory] = {
    "mlp": mlp,
    "cnn": cnn,
    "mobilenet": mobilenet,
    "resnet": resnet,
    "unet": unet,
    "vit": vit,
    "transformer_encoder": transformer_encoder,
    "mingpt": mingpt,
    "llama": llama,
    "qwen2": qwen2,
    "mixtral": mixtral,
    "bert": bert,
    "dlrm": dlrm,
    "lstm": lstm,
    "gru": gru,
    "kws": kws,
    "tensor_ops": tensor_ops,
}


def build() -> tuple[nn.Module, tuple]:
    """The demo model: the small CNN and its sample images."""
    return cnn()


if __name__ == "__main__":
    for name, factory in FAMILIES.items():
        model, args = factory()
        with torch.no_grad():
            out = model(*args)
        shapes = [tuple(o.shape) for o in torch.utils._pytree.tree_leaves(out)]
        params = sum(p.numel() for p in model.parameters())
        print(f"{name:20s} params={params:6d} outputs={shapes}")
