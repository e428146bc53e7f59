"""Small PyTorch models for the import tests: the zoo's MLP, a Transformer encoder, a ViT, a
VGG-style CNN and a GPT-2 style decoder in plain torch.nn, each a factory hap-import calls
(tests/import/test_import_torch.sh)."""

import math

import torch
from torch import nn


class MLP(nn.Module):
    """Linear layers with sigmoid and ReLU, logits for --loss cross_entropy."""

    def __init__(self, width=16, hidden=32, layers=2, classes=5):
        super().__init__()
        dims = [width] + [hidden] * layers
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(dims, dims[1:]))
        self.head = nn.Linear(hidden, classes)

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = torch.sigmoid(layer(x)) if i % 2 == 0 else torch.relu(layer(x))
        return self.head(x)


class Encoder(nn.Module):
    """Token embedding, a position buffer, nn.TransformerEncoder, a vocabulary head; returns the
    logits as [N, vocab, S] for cross-entropy against the tokens' targets."""

    def __init__(self, vocab=32, width=16, heads=2, layers=2, seq=6, batch_first=True,
                 norm_first=False):
        super().__init__()
        self.embed = nn.Embedding(vocab, width)
        self.register_buffer("pos", torch.randn(1, seq, width) * 0.1)
        layer = nn.TransformerEncoderLayer(width, heads, dim_feedforward=2 * width, dropout=0.0,
                                           batch_first=batch_first, norm_first=norm_first)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.batch_first = batch_first
        self.head = nn.Linear(width, vocab)

    def forward(self, tokens):
        x = self.embed(tokens) * 2.0 + self.pos
        if not self.batch_first:
            x = x.transpose(0, 1)
        x = self.encoder(x)
        if not self.batch_first:
            x = x.transpose(0, 1)
        return self.head(x).transpose(1, 2)


class VGG(nn.Module):
    """VGG19's layer pattern at a small width: 3x3 convolutions, ReLU, 2x2 max pooling,
    adaptive average pooling and a classifier (torchvision's layout)."""

    def __init__(self, width=4, classes=10, cfg=(1, 1, "M", 2, "M", 4, 4, "M")):
        super().__init__()
        layers, c = [], 3
        for v in cfg:
            if v == "M":
                layers.append(nn.MaxPool2d(2, 2))
            else:
                layers += [nn.Conv2d(c, v * width, 3, padding=1), nn.ReLU(inplace=True)]
                c = v * width
        self.features = nn.Sequential(*layers)
        self.avgpool = nn.AdaptiveAvgPool2d((2, 2))
        self.classifier = nn.Sequential(nn.Linear(c * 4, 32), nn.ReLU(True), nn.Dropout(0.0),
                                        nn.Linear(32, classes))

    def forward(self, x):
        x = self.avgpool(self.features(x))
        return self.classifier(torch.flatten(x, 1))


class CausalSelfAttention(nn.Module):
    """GPT-2's attention in plain PyTorch: one packed q/k/v projection split three ways, heads by
    view and transpose, a causal mask buffer applied with masked_fill."""

    def __init__(self, width, heads, seq):
        super().__init__()
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)
        self.heads, self.width = heads, width
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        b, t, c = x.size()
        q, k, v = self.c_attn(x).split(self.width, dim=2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = nn.functional.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        return self.c_proj(y)


class Block(nn.Module):
    """A GPT-2 decoder block: pre-norm attention and MLP (tanh GELU), each added back."""

    def __init__(self, width, heads, seq):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, seq)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(approximate="tanh"),
                                 nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    """Token and learned position embeddings (positions by torch.arange), GPT-2 blocks, a final
    layer norm and a vocabulary head; logits as [N, vocab, S] for cross-entropy."""

    def __init__(self, vocab=32, width=16, heads=2, layers=2, seq=8):
        super().__init__()
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq, width)
        self.h = nn.ModuleList(Block(width, heads, seq) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.lm_head = nn.Linear(width, vocab, bias=False)

    def forward(self, idx):
        pos = torch.arange(0, idx.size(1), dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x)).transpose(1, 2)


class ViT(nn.Module):
    """The zoo's ViT in plain PyTorch: patches by a strided convolution, a learned class token
    appended last (torch.cat), learned positions, pre-norm encoder layers with GELU, the head on
    the class token."""

    def __init__(self, image=16, patch=8, width=16, heads=2, layers=2, classes=10):
        super().__init__()
        self.patches = nn.Conv2d(3, width, patch, stride=patch)
        n = (image // patch) ** 2
        self.cls = nn.Parameter(torch.randn(1, 1, width) * 0.02)
        self.pos = nn.Parameter(torch.randn(1, n + 1, width) * 0.02)
        layer = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0,
                                           activation="gelu", batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, classes)

    def forward(self, x):
        x = self.patches(x).flatten(2).transpose(1, 2)
        x = torch.cat([x, self.cls.expand(x.size(0), -1, -1)], dim=1) + self.pos
        x = self.norm(self.encoder(x))
        return self.head(x[:, -1])


class WithLoss(nn.Module):
    """A module whose forward returns its own loss (the default --loss output)."""

    def __init__(self):
        super().__init__()
        self.net = MLP()

    def forward(self, x, y):
        return nn.functional.cross_entropy(self.net(x), y)


class Unsupported(nn.Module):
    """Three ops hap lacks (group norm, SiLU, cumsum) around supported ones: the exporter must
    name them all."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.norm = nn.GroupNorm(2, 4)
        self.act = nn.SiLU()
        self.fc = nn.Linear(4 * 8 * 8, 3)

    def forward(self, x):
        x = self.act(self.norm(self.conv(x)))
        x = torch.cumsum(x, dim=1)
        return self.fc(torch.flatten(x, 1))


def mlp(**kw):
    return MLP(**kw)


def encoder(**kw):
    return Encoder(**kw)


def vgg(**kw):
    return VGG(**kw)


def gpt(**kw):
    return GPT(**kw)


def gpt_tied(**kw):
    """gpt with GPT-2's tied weights: the head is the token embedding (one parameter, two
    uses, its gradient the sum of both)."""
    model = GPT(**kw)
    model.lm_head.weight = model.wte.weight
    return model


def vit(**kw):
    return ViT(**kw)


def torchvision_vit(image_size=16, patch_size=8, num_layers=2, num_heads=2, hidden_dim=16,
                    mlp_dim=32, num_classes=10):
    """torchvision's VisionTransformer (class token prepended by torch.cat, attention unpacked
    as `x, _ = self_attention(...)`, erf GELU, LayerNorm eps 1e-6), small. Its head and class
    token start at zero; both are drawn N(0, 0.02) here so that every gradient is non-trivial."""
    import torchvision  # pylint: disable=import-outside-toplevel

    model = torchvision.models.vision_transformer.VisionTransformer(
        image_size=image_size, patch_size=patch_size, num_layers=num_layers,
        num_heads=num_heads, hidden_dim=hidden_dim, mlp_dim=mlp_dim, num_classes=num_classes)
    with torch.no_grad():
        nn.init.normal_(model.heads.head.weight, std=0.02)
        nn.init.normal_(model.class_token, std=0.02)
    return model


def with_loss():
    return WithLoss()


def unsupported():
    return Unsupported()


class Branchy(nn.Module):
    """Control flow on a tensor's value: torch.fx cannot trace it."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return x


def untraceable():
    return Branchy()
