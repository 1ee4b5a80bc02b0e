"""Hugging Face: a small causal LM built from a config (no download) generates with a static
cache under torch.compile(backend="neuron"), as TorchNeuron's HF inference tutorial does.
A tied-embedding model (GPT-2) and a mixture of experts (Qwen3-MoE) from the model suite's
tiny configs (tests/models/hf_tiny.py) do the same, token for token with CPU."""

import pathlib
import sys
import warnings

import pytest
import torch

import torch_neuronx
import torch_neuronx.neuron_dynamo_backend as ndb

transformers = pytest.importorskip("transformers", reason="transformers is not installed "
                                   "(it is in the test extra)")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402
from transformers.generation.configuration_utils import CompileConfig  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "models"))
from hf_generate import timed_generate  # noqa: E402
from hf_tiny import tiny_causal_lm, tokens  # noqa: E402


@pytest.fixture(scope="module")
def model_and_prompt():
    config = LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=64)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    prompt = torch.randint(0, config.vocab_size, (1, 8), generator=torch.Generator().manual_seed(0))
    cpu_tokens = model.generate(prompt, max_new_tokens=8, do_sample=False,
                                cache_implementation="static")
    return model.to("neuron"), prompt.to("neuron"), cpu_tokens


def generate(model, prompt, **kw):
    return timed_generate(model, prompt, 8, **kw)     # the example's (examples/compile)


def test_static_cache_generation_compiles_and_matches_eager(model_and_prompt):
    model, prompt, cpu_tokens = model_and_prompt
    eager, eager_ns = generate(model, prompt, disable_compile=True)
    config = CompileConfig(backend="neuron", fullgraph=True, dynamic=False, mode="default")
    compiled, _ = generate(model, prompt, compile_config=config)
    assert compiled.device.type == "neuron"
    assert torch.equal(compiled.cpu(), eager.cpu())
    assert torch.equal(compiled.cpu(), cpu_tokens)
    graphs = ndb.get_dynamo_metrics()
    assert len(graphs) == 1 and graphs[0].kind == "inference"   # the decode step, one shape
    compiled_again, compiled_ns = generate(model, prompt, compile_config=config)
    assert torch.equal(compiled_again.cpu(), eager.cpu())
    assert len(ndb.get_dynamo_metrics()) == 1                   # static cache: no recompile
    assert compiled_ns < eager_ns


@pytest.mark.parametrize("model_type", ["gpt2", "qwen3_moe"])
def test_tied_and_moe_models_generate_like_cpu_eager_and_compiled(model_type):
    model = tiny_causal_lm(model_type).eval()
    prompt = tokens(batch=1, length=8)
    cpu_tokens = model.generate(prompt, max_new_tokens=8, do_sample=False,
                                cache_implementation="static")
    model.to("neuron")
    if model_type == "gpt2":
        assert model.lm_head.weight is model.transformer.wte.weight
    prompt = prompt.to("neuron")
    config = CompileConfig(backend="neuron", fullgraph=True, dynamic=False, mode="default")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")     # MoE routing's histc falls back to CPU, warned once
        eager, _ = generate(model, prompt, disable_compile=True)
        compiled, _ = generate(model, prompt, compile_config=config)
    assert torch.equal(eager.cpu(), cpu_tokens)
    assert torch.equal(compiled.cpu(), cpu_tokens)
    assert len(ndb.get_dynamo_metrics()) == 1       # the decode step, compiled once
