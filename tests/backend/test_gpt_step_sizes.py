"""A GPT training step at hidden 2048 has no estimated op (issue 19). The attention copies
(q/k/v out of the fused projection, heads merged back) failed to lower at this size and fell
back to the roofline, and every fallback ended an AEE group: this one-layer step took 11 program
launches with 3 estimated copies; it is 7 launches with none."""

import os
import sys

import torch

import torch_neuronx
from torch_neuronx import _state

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "examples", "gpt"))
from gpt_model import GPTConfig, fresh, train_step  # noqa: E402


def test_gpt_step_at_hidden_2048_lowers_every_op():
    # 100 tokens: a chunk of the head copies is not a whole number of 128-element head rows
    m, opt, x, y = fresh(GPTConfig(vocab_size=64, n_layer=1, n_head=16, n_embd=2048,
                                   block_size=100), 1)
    torch_neuronx.set_adaptive_eager(True)
    before = dict(torch_neuronx.estimated_ops())    # earlier tests' estimates, if any
    try:
        train_step(m, opt, x, y).item()          # cold: lowers every op once
        torch_neuronx.reset_timing_stats()
        train_step(m, opt, x, y).item()
        b = torch_neuronx.timing_breakdown()
    finally:
        torch_neuronx.set_adaptive_eager(None)
    new = {k: v - before.get(k, 0) for k, v in torch_neuronx.estimated_ops().items()
           if v > before.get(k, 0)}
    assert not new, {k: _state["cost_model"].cache.estimate_reasons.get(k) for k in new}
    assert b["launches"] <= 8, b["launches"]     # 7 measured; 11 with the copies estimated
    assert b["fused_ops"] > 100
