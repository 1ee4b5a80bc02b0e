"""A small GPT-style decoder (token + position embeddings, pre-norm blocks with causal
self-attention and a GELU MLP, tied LM head) for the compile tests and the benchmark."""

import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

# The blocks are the demo GPT's (examples/gpt/gpt_model.py), made with this model's sizes.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "gpt"))
from gpt_model import Block, GPTConfig  # noqa: E402


class TinyGPT(nn.Module):
    def __init__(self, vocab=256, d=128, heads=4, layers=2, context=64):
        super().__init__()
        self.tok = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(context, d)
        self.blocks = nn.ModuleList(Block(GPTConfig(n_embd=d, n_head=heads)) for _ in range(layers))
        self.ln = nn.LayerNorm(d)
        for m in self.modules():                  # GPT-2 initialisation
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx, targets):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.ln(x) @ self.tok.weight.t()
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def make(device="neuron", seed=0, **kw):
    torch.manual_seed(seed)
    return TinyGPT(**kw).to(device)


def batch(device="neuron", b=4, t=64, vocab=256, seed=1):
    g = torch.Generator().manual_seed(seed)
    idx = torch.randint(0, vocab, (b, t + 1), generator=g)
    return idx[:, :-1].contiguous().to(device), idx[:, 1:].contiguous().to(device)
