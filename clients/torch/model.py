"""A GPT-style decoder (pre-norm blocks of causal self-attention and an MLP, tied embeddings)
written out with plain tensor operations, so every kernel it runs has a deterministic form; the
attention takes an optional key/value cache for step-by-step inference."""

import math

import torch
from torch import nn
from torch.nn import functional as F


class Block(nn.Module):
    """One decoder block: causal self-attention and an MLP, each after a layer norm."""

    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x, cache=None):
        batch, length, width = x.shape
        q, k, v = self.qkv(self.norm1(x)).split(width, dim=2)
        shape = (batch, length, self.heads, width // self.heads)
        q, k, v = (t.view(shape).transpose(1, 2) for t in (q, k, v))
        if cache is not None:
            if "k" in cache:
                # The cache grows by concatenation, one new tensor per step, as simple
                # inference loops do: the pattern that exercises a caching allocator.
                k = torch.cat([cache["k"], k], dim=2)
                v = torch.cat([cache["v"], v], dim=2)
            cache["k"], cache["v"] = k, v
        total = k.shape[2]
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        # Query i (at position total - length + i) sees keys up to its own position.
        rows = torch.arange(total - length, total, device=x.device).unsqueeze(1)
        cols = torch.arange(total, device=x.device).unsqueeze(0)
        scores = scores.masked_fill(cols > rows, float("-inf"))
        attention = F.softmax(scores.float(), dim=-1).to(v.dtype)
        y = (attention @ v).transpose(1, 2).reshape(batch, length, width)
        x = x + self.proj(y)
        return x + self.down(F.gelu(self.up(self.norm2(x))))


class GPT(nn.Module):
    """Token and position embeddings, `layers` blocks, a final norm, the tied output head."""

    def __init__(self, vocab=32000, width=768, layers=12, heads=12, max_length=1024):
        super().__init__()
        self.tokens = nn.Embedding(vocab, width)
        self.positions = nn.Embedding(max_length, width)
        self.blocks = nn.ModuleList(Block(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, ids, caches=None, start=0):
        positions = torch.arange(start, start + ids.shape[1], device=ids.device)
        x = self.tokens(ids) + self.positions(positions)
        for index, block in enumerate(self.blocks):
            x = block(x, None if caches is None else caches[index])
        return self.norm(x) @ self.tokens.weight.t()


def build(args, device):
    """The model the options describe, initialised from the seed."""
    return GPT(args.vocab, args.width, args.layers, args.heads, args.max_length).to(device)


def add_model_options(p):
    """Model size options (defaults: about 110 M parameters)."""
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--width", type=int, default=768)
    p.add_argument("--layers", type=int, default=12)
    p.add_argument("--heads", type=int, default=12)
    p.add_argument("--max-length", type=int, default=1024)
