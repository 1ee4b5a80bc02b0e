"""Vision-language models (LLaVA: CLIP + Llama; PaliGemma: SigLIP + Gemma, tied) built from
tiny configs train one step on 'neuron' equal to CPU: loss, logits, every gradient and every
updated weight (tolerances in hf_tiny.py)."""

import copy

import pytest
import torch

import torch_neuronx

pytest.importorskip("transformers", reason="transformers is not installed (it is in the test extra)")

from hf_tiny import VOCAB, assert_same_step, train_step  # noqa: E402

IMAGE, PATCH, TEXT = 32, 8, 8
IMAGE_TOKENS = (IMAGE // PATCH) ** 2
IMAGE_TOKEN_ID = VOCAB - 1
VISION = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
              image_size=IMAGE, patch_size=PATCH)
TEXT_SIZE = dict(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=128, pad_token_id=0)


def llava():
    from transformers import CLIPVisionConfig, LlamaConfig, LlavaConfig
    return LlavaConfig(vision_config=CLIPVisionConfig(projection_dim=32, **VISION),
                       text_config=LlamaConfig(num_key_value_heads=2, **TEXT_SIZE),
                       image_token_id=IMAGE_TOKEN_ID, vision_feature_layer=-1,
                       projector_hidden_act="gelu")


def paligemma():
    from transformers import GemmaConfig, PaliGemmaConfig, SiglipVisionConfig
    return PaliGemmaConfig(vision_config=SiglipVisionConfig(**VISION),
                           text_config=GemmaConfig(num_key_value_heads=1, head_dim=8, **TEXT_SIZE),
                           image_token_id=IMAGE_TOKEN_ID, projection_dim=32)


MODELS = {"llava": llava, "paligemma": paligemma}


@pytest.mark.parametrize("name", list(MODELS))
def test_training_step_matches_cpu(name):
    from transformers import AutoModelForImageTextToText
    torch.manual_seed(0)
    model = AutoModelForImageTextToText.from_config(MODELS[name]())
    g = torch.Generator().manual_seed(2)
    ids = torch.cat([torch.full((2, IMAGE_TOKENS), IMAGE_TOKEN_ID),
                     torch.randint(1, IMAGE_TOKEN_ID, (2, TEXT), generator=g)], 1)
    batch = {"input_ids": ids, "labels": ids,
             "pixel_values": torch.randn(2, 3, IMAGE, IMAGE, generator=g)}
    if name == "paligemma":     # image and prefix tokens attend both ways
        batch["token_type_ids"] = (torch.arange(ids.shape[1]) >= IMAGE_TOKENS).long().expand(2, -1)
    expected = train_step(copy.deepcopy(model), batch, "cpu")
    torch_neuronx.clear_op_tracking()
    actual = train_step(model, batch, "neuron")
    assert torch_neuronx.get_fallback_ops() == set()
    if name == "paligemma":
        assert model.get_output_embeddings().weight is model.get_input_embeddings().weight
    assert_same_step(actual, expected)
