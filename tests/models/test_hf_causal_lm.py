"""Hugging Face causal LMs, built from tiny configs, train one step on 'neuron' equal to CPU.

44 architectures from `transformers` (tied-embedding ones, untied dense ones and mixtures of
experts; see hf_tiny.py). For each: the same initial weights on CPU and on neuron, the
same tokens and RNG seed, a forward with labels, backward and one SGD step. Compared:
loss (rtol 1e-5), logits (atol 1e-5, rtol 1e-4), every gradient and every updated weight
(atol 1e-5, rtol 1e-4); float32 throughout. Results on neuron are CPU PyTorch's computed on
device memory, so the differences seen are at most a few float32 ulps (reduction order).
A few encoder models (BERT, RoBERTa) do the same with a masked-LM head.
Generation with a static cache, eager and compiled, is in tests/compile/test_hf_generate.py.
"""

import copy
import warnings

import pytest
import torch

import torch_neuronx

pytest.importorskip("transformers", reason="transformers is not installed (it is in the test extra)")

from hf_tiny import (ARCHITECTURES, MOES, TIED, VOCAB, assert_same_step,  # noqa: E402
                     tiny_causal_lm, tokens, train_step)


@pytest.mark.parametrize("model_type", list(ARCHITECTURES))
def test_training_step_matches_cpu(model_type):
    model = tiny_causal_lm(model_type)
    cpu_model = copy.deepcopy(model)
    ids = tokens()
    batch = {"input_ids": ids, "labels": ids}
    expected = train_step(cpu_model, batch, "cpu")
    torch_neuronx.clear_op_tracking()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # MoE routing's histc falls back to CPU, warned once
        actual = train_step(model, batch, "neuron")
    assert all(p.device.type == "neuron" for p in model.parameters())
    assert len(list(model.parameters())) == len(list(cpu_model.parameters()))
    if model_type in TIED:
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    if model_type in MOES:
        # Integer histc of the expert ids, as on CUDA (it has no NeuronCore kernel).
        assert torch_neuronx.get_fallback_ops() <= {"aten::histc"}
    else:
        assert torch_neuronx.get_fallback_ops() == set()
    assert_same_step(actual, expected)


def test_suite_covers_what_it_claims():
    assert len(ARCHITECTURES) >= 30
    assert {"gpt2", "gemma", "opt", "bloom"} <= set(TIED)
    assert {"mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss"} <= set(MOES)


ENCODERS = {
    "bert": dict(intermediate_size=64),
    "roberta": dict(intermediate_size=64, pad_token_id=1),
}


@pytest.mark.parametrize("model_type", list(ENCODERS))
def test_masked_lm_training_step_matches_cpu(model_type):
    from transformers import AutoConfig, AutoModelForMaskedLM
    config = AutoConfig.for_model(model_type, vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
                                  **ENCODERS[model_type])
    torch.manual_seed(0)
    model = AutoModelForMaskedLM.from_config(config)
    ids = tokens(seed=3)
    labels = torch.where(torch.arange(ids.shape[1]) % 4 == 0, ids, torch.full_like(ids, -100))
    batch = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "labels": labels}
    expected = train_step(copy.deepcopy(model), batch, "cpu")
    actual = train_step(model, batch, "neuron")
    assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert_same_step(actual, expected)
