# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/tutorials/tutorial-hf-inference-torch-compile.html
# ("Tutorial: Run a Hugging Face model for inference with torch.compile": "generate() compiles the
# forward pass of a model when the model uses a static cache and a CompileConfig", with the
# neuron backend; its models are Qwen3 / Qwen2.5). Not a copy of the page's text: the stored copy
# is cut before its code, so this file follows that description: a Qwen3 causal LM moved to
# "neuron" generates greedily with cache_implementation="static" and
# CompileConfig(backend="neuron", dynamic=False), and the compiled forward is checked to be the
# one generate() used. Ours: a tiny Qwen3 built from its config with random weights (no download
# at test time, no tokenizer: prompts are token ids), no chunked prefill, and the check (not from
# the page) that the tokens equal CPU generate() token for token.
import torch
from transformers import CompileConfig, Qwen3Config, Qwen3ForCausalLM

config = Qwen3Config(vocab_size=512, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128)
torch.manual_seed(0)
model = Qwen3ForCausalLM(config).eval()
prompts = torch.randint(1, config.vocab_size, (2, 6), generator=torch.Generator().manual_seed(1))
kwargs = dict(max_new_tokens=8, do_sample=False, cache_implementation="static", pad_token_id=0)

with torch.no_grad():
    expected = model.generate(prompts, attention_mask=torch.ones_like(prompts), **kwargs)
    model = model.to("neuron")
    ids = prompts.to("neuron")
    out = model.generate(ids, attention_mask=torch.ones_like(ids), **kwargs,
                         compile_config=CompileConfig(backend="neuron", dynamic=False))

assert hasattr(model, "_compiled_call"), "generate() did not compile the forward pass"
assert out.device.type == "neuron"
assert torch.equal(out.cpu(), expected), (out.cpu(), expected)
print(f"generate() with a static cache, compiled with backend='neuron': {out.shape[1] - prompts.shape[1]} new "
      f"tokens per prompt, equal to CPU: {out[:, prompts.shape[1]:].tolist()}")
