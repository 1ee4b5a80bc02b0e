"""A small GPT-style decoder used by the demo, the benchmarks and the tests."""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclass
class GPTConfig:
    vocab_size: int = 1024
    n_layer: int = 4
    n_head: int = 4
    n_embd: int = 256
    block_size: int = 128


def causal_attention(q, k, v):
    """Causal self-attention written out (scores, scale, mask, softmax, weighted sum), the
    examples' one copy of it: q, k, v [B, H, T, D] -> [B, T, H * D], the heads side by side."""
    b, h, t, d = q.shape
    att = (q @ k.transpose(-2, -1)) * (1.0 / (k.size(-1) ** 0.5))
    mask = torch.ones(t, t, device=q.device, dtype=torch.bool).tril()
    att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
    return (att @ v).transpose(1, 2).reshape(b, t, h * d)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.ln1 = nn.LayerNorm(cfg.n_embd)
        self.qkv = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.proj = nn.Linear(cfg.n_embd, cfg.n_embd)
        self.ln2 = nn.LayerNorm(cfg.n_embd)
        self.fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.fc_out = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        x = x + self.proj(causal_attention(q, k, v))
        return x + self.fc_out(F.gelu(self.fc(self.ln2(x))))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.pos = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx, targets=None):
        t = idx.shape[1]
        x = self.tok(idx) + self.pos(torch.arange(t, device=idx.device))
        for block in self.blocks:
            x = block(x)
        logits = self.head(self.ln_f(x))
        if targets is None:
            return logits
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def make_batch(cfg: GPTConfig, batch: int, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    data = torch.randint(0, cfg.vocab_size, (batch, cfg.block_size + 1), generator=g)
    return data[:, :-1].contiguous(), data[:, 1:].contiguous()


def train_step(model, opt, x, y):
    opt.zero_grad(set_to_none=True)
    loss = model(x, y)
    loss.backward()
    opt.step()
    return loss


def fresh(cfg: GPTConfig, batch: int, device="neuron"):
    """(model, AdamW optimizer, inputs, targets): a GPT made with seed 0 and one batch."""
    torch.manual_seed(0)
    model = GPT(cfg).to(device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = (t.to(device) for t in make_batch(cfg, batch))
    return model, opt, x, y


def neuron_trainer(cfg: GPTConfig, batch: int, compiled: bool):
    """One AdamW training step of a fresh GPT on 'neuron', eager or compiled with the neuron
    backend (model and optimizer step), as a closure: returns (step, losses, parameter count);
    each step() appends its loss."""
    model, opt, x, y = fresh(cfg, batch)
    step, losses = stepper(model, opt, x, y, compiled, compiled)
    return step, losses, sum(p.numel() for p in model.parameters())


def stepper(model, opt, x, y, compile_model=False, compile_step=False):
    """(step, losses): step() runs one training step on (x, y), the model and the optimizer step
    compiled with the neuron backend as asked, and appends its loss to losses."""
    run = torch.compile(model, backend="neuron") if compile_model else model
    step_opt = torch.compile(opt.step, backend="neuron") if compile_step else opt.step
    losses = []

    def step():
        loss = run(x, y)
        loss.backward()
        step_opt()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return step, losses
