"""Tiny Hugging Face models built from configs in code (no download, no network), and the
one-training-step comparison with CPU the model tests share.

Every architecture gets the same small shape (2 layers, hidden 32, vocab 128); the
overrides are only what a config names differently or needs to be consistent. A uniquely
named module (several test folders have a conftest.py).
"""

import torch

VOCAB = 128

COMMON = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
              head_dim=8, pad_token_id=0)

MOE = dict(num_experts_per_tok=2)

# model_type -> config overrides. Grouped as the issue names them: tied input/output
# embeddings first, then untied dense models, then mixtures of experts.
TIED = {
    "gpt2": dict(n_inner=64, bos_token_id=1, eos_token_id=2),     # defaults are 50256
    "gemma": {}, "gemma2": {}, "gemma3_text": {},
    "opt": dict(ffn_dim=64, word_embed_proj_dim=32),
    "bloom": dict(n_layer=2, n_head=4),
    "falcon": dict(num_kv_heads=2, head_dim=None),
    "mpt": dict(d_model=32, n_heads=4, n_layers=2, expansion_ratio=2),
    "starcoder2": {}, "cohere": {}, "cohere2": {}, "smollm3": {}, "biogpt": {},
    "xglm": dict(d_model=32, ffn_dim=64, attention_heads=4, num_layers=2),
    "gpt_neo": dict(attention_types=[[["global", "local"], 1]], window_size=16),
    "gpt_bigcode": {}, "ernie4_5": {},
    "mamba": dict(state_size=4, expand=2, conv_kernel=4),
}
UNTIED = {
    "llama": {}, "mistral": {}, "qwen2": {}, "qwen3": {}, "phi": {}, "phi3": {},
    "stablelm": {}, "gptj": dict(rotary_dim=4), "gpt_neox": {}, "olmo": {}, "olmo2": {},
    "granite": {}, "glm": {}, "glm4": {}, "helium": {}, "nemotron": {},
    "codegen": dict(n_ctx=64, rotary_dim=4),
}
MOES = {
    "mixtral": dict(MOE, num_local_experts=4),
    "qwen2_moe": dict(MOE, num_experts=4, moe_intermediate_size=32,
                      shared_expert_intermediate_size=32),
    "qwen3_moe": dict(MOE, num_experts=4, moe_intermediate_size=32),
    "deepseek_v3": dict(MOE, n_routed_experts=4, moe_intermediate_size=32, n_shared_experts=1,
                        first_k_dense_replace=1, kv_lora_rank=16, q_lora_rank=16,
                        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, n_group=1,
                        topk_group=1, num_key_value_heads=4),
    "gpt_oss": dict(MOE, num_local_experts=4, sliding_window=16,
                    layer_types=["sliding_attention", "full_attention"]),
    "olmoe": dict(MOE, num_experts=4),
    "granitemoe": dict(MOE, num_local_experts=4),
    "phimoe": dict(MOE, num_local_experts=4),
}
ARCHITECTURES = {**TIED, **UNTIED, **MOES}


def tiny_config(model_type, **extra):
    from transformers import AutoConfig
    kwargs = {**COMMON, **ARCHITECTURES[model_type], **extra}
    # None drops a common key the config computes itself (Falcon's head_dim is a property).
    return AutoConfig.for_model(model_type, **{k: v for k, v in kwargs.items() if v is not None})


def tiny_causal_lm(model_type, seed=0, **extra):
    """A freshly initialised model (same weights for the same seed), in eval-free train mode
    with dropout off so CPU and neuron runs see the same function."""
    from transformers import AutoModelForCausalLM
    config = tiny_config(model_type, **extra)
    for name in ("dropout", "attention_dropout", "hidden_dropout", "resid_pdrop", "embd_pdrop",
                 "attn_pdrop", "hidden_dropout_prob", "attention_probs_dropout_prob",
                 "activation_dropout", "attention_dropout_prob", "summary_first_dropout"):
        if isinstance(getattr(config, name, None), float):
            setattr(config, name, 0.0)
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(config)


def tokens(batch=2, length=16, seed=1):
    return torch.randint(1, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# Comparison of one training step (float32): loss, logits, every gradient, every updated weight.
LOSS_TOL = dict(rtol=1e-5, atol=1e-6)
TENSOR_TOL = dict(rtol=1e-4, atol=1e-5)


def train_step(model, batch, device):
    model.to(device)
    batch = {k: v.to(device) for k, v in batch.items()}
    torch.manual_seed(5)            # PhiMoE's router samples in training mode
    out = model(**batch)
    out.loss.backward()
    result = {
        "loss": out.loss.item(),
        "logits": out.logits.detach().cpu(),
        "grads": {n: p.grad.cpu() for n, p in model.named_parameters() if p.grad is not None},
    }
    torch.optim.SGD(model.parameters(), lr=0.1).step()
    result["weights"] = {n: p.detach().cpu() for n, p in model.named_parameters()}
    return result


def assert_same_step(actual, expected):
    torch.testing.assert_close(actual["loss"], expected["loss"], **LOSS_TOL)
    torch.testing.assert_close(actual["logits"], expected["logits"], **TENSOR_TOL)
    assert actual["grads"].keys() == expected["grads"].keys()
    assert len(expected["grads"]) > 0
    for kind in ("grads", "weights"):
        for name, value in expected[kind].items():
            torch.testing.assert_close(actual[kind][name], value, **TENSOR_TOL,
                                       msg=lambda m, n=name, k=kind: f"{k} of {n}: {m}")
