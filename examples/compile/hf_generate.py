"""Hugging Face generation with a static cache under torch.compile(backend="neuron"), as in
TorchNeuron's HF inference tutorial. The model is built from a config: nothing is downloaded.

Run: .venv/bin/python examples/compile/hf_generate.py   (needs `pip install transformers`)
"""

import torch
from transformers import LlamaConfig, LlamaForCausalLM
from transformers.generation.configuration_utils import CompileConfig

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb


def timed_generate(model, prompt, new_tokens=16, **kw):
    """Greedy generation with a static cache: (tokens, simulated device ns it took)."""
    torch.neuron.synchronize()
    start = torch_neuronx.device_time_ns()
    out = model.generate(prompt, max_new_tokens=new_tokens, do_sample=False,
                         cache_implementation="static", **kw)
    torch.neuron.synchronize()
    return out, torch_neuronx.device_time_ns() - start


def main():
    config = LlamaConfig(vocab_size=1024, hidden_size=256, intermediate_size=512,
                         num_hidden_layers=2, num_attention_heads=8, num_key_value_heads=4,
                         max_position_embeddings=128)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval().to("neuron")
    prompt = torch.randint(0, config.vocab_size, (1, 16)).to("neuron")
    compile_config = CompileConfig(backend="neuron", fullgraph=True, dynamic=False,
                                   mode="default")
    eager, eager_ns = timed_generate(model, prompt, disable_compile=True)
    timed_generate(model, prompt, compile_config=compile_config)          # compiles decode
    compiled, compiled_ns = timed_generate(model, prompt, compile_config=compile_config)
    assert torch.equal(eager.cpu(), compiled.cpu())
    print("tokens:", compiled[0, prompt.shape[1]:].tolist())
    print(f"simulated generate(16 tokens): eager {eager_ns / 1e6:.3f} ms, "
          f"compiled decode {compiled_ns / 1e6:.3f} ms")
    for g in ndb.get_dynamo_metrics():
        print(f"graph {g.graph_name}: {g.ops} ops, {g.sim_run_ns / 1e3:.1f} us per decode step")


if __name__ == "__main__":
    main()
