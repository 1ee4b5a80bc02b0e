"""LLM estimates (torch_neuronx.estimate): one layer timed and multiplied must give what running
the whole small model gives on the simulated device; parameter counts are the published ones;
collectives follow the parallel layout; bad input is named."""

import json

import pytest
import torch

import torch_neuronx
from neuron_sim.collectives import estimate as collective_estimate
from neuron_sim.collectives import fabric_for
from torch_neuronx.estimate import (estimate_inference, estimate_training, load_config,
                                    parameter_counts)
from device_time import device_ns

SMALL = dict(model_type="llama", hidden_size=512, intermediate_size=1024, num_hidden_layers=3,
             num_attention_heads=8, num_key_value_heads=2, head_dim=64, vocab_size=2048,
             tie_word_embeddings=False)
SEQ = 256
# This process's device may simulate any Trn2 instance; estimates for trn2.48xlarge use its
# fabric and the same Trn2 core.
pytestmark = pytest.mark.skipif(
    not torch_neuronx.get_instance().startswith("trn2"),
    reason="the device of this process simulates another chip than Trn2")


@pytest.mark.parametrize("name,total", [("llama-3.2-1b", 1_235_814_400),
                                        ("llama-3.1-8b", 8_030_261_248),
                                        ("llama-3.3-70b", 70_553_706_496),
                                        ("llama-3.1-405b", 405_853_388_800)])
def test_preset_parameter_counts_are_the_published_models(name, total):
    assert parameter_counts(load_config(name))["total"] == total


@pytest.fixture(scope="module")
def small_model():
    from transformers import AutoModelForCausalLM
    cfg = load_config(SMALL)
    cfg._attn_implementation = "sdpa"
    return AutoModelForCausalLM.from_config(cfg).to("neuron", torch.bfloat16)


def test_prefill_of_one_layer_times_layers_matches_the_compiled_model(small_model):
    est = estimate_inference(SMALL, "trn2.48xlarge", input_len=SEQ, output_len=32,
                             time_only=False)
    ids = torch.zeros(1, SEQ, dtype=torch.long, device="neuron")
    prefill = torch.compile(
        lambda i: small_model(i, use_cache=False, logits_to_keep=1).logits.argmax(-1),
        backend="neuron")
    small_model.eval()
    with torch.no_grad():
        whole, _ = device_ns(lambda: prefill(ids), warmup=True)
    # measured 188.9 vs 177.6 us (+6.3%; +1.8% when a DMA was held back only for its own
    # queue's critical DMAs, the whole graph then 197.8 us). With DMAs hoisted past the
    # embedding's store on its FIFO queue (before the scheduler's priority) it took 268.8 us (-20%)
    assert est.ttft_s * 1e9 == pytest.approx(whole, rel=0.10)
    assert est.compiled and not est.time_only and est.tpot_s < est.ttft_s


def test_training_step_of_one_layer_matches_the_compiled_model(small_model):
    est = estimate_training(SMALL, "trn2.48xlarge", seq=SEQ, time_only=False)
    ids = torch.zeros(1, SEQ, dtype=torch.long, device="neuron")
    small_model.train()
    opt = torch.optim.AdamW(small_model.parameters(), lr=1e-4, foreach=True)
    step = torch.compile(lambda i: small_model(i, labels=i, use_cache=False).loss.backward(),
                         backend="neuron")
    def fresh_step():    # gradients written, not accumulated, as in the estimate
        small_model.zero_grad(set_to_none=True)
        step(ids)

    fwd_bwd, _ = device_ns(fresh_step, warmup=True)
    optimizer, _ = device_ns(opt.step, warmup=True)
    # measured 546.1 vs 529.3 us (+3.2%): a DMA is held back for a more critical DMA of any
    # queue on its DMA engines (the pass adds the semaphore). -12.8% when held back only for
    # its own queue's (another queue's hoisted DMAs filled the shared engines ahead of the
    # critical one), -15.7% before the scheduler's DMA priority
    assert (est.compute_s - est.optimizer_s) * 1e9 == pytest.approx(fwd_bwd, rel=0.10)
    assert est.optimizer_s * 1e9 == pytest.approx(optimizer, rel=0.10)
    assert est.step_s == est.compute_s and est.collectives == []      # one rank: no collective
    n = parameter_counts(load_config(SMALL))["total"]
    assert est.hbm_bytes["optimizer"] == 12 * n and est.hbm_bytes["parameters"] == 2 * n


def test_collectives_follow_the_mesh():
    est = estimate_training(SMALL, "trn2.48xlarge", tp=2, fsdp=4, dp=2, seq=64, grad_accum=2,
                            time_only=False)
    by = {c.what: c for c in est.collectives}
    layers = SMALL["num_hidden_layers"]
    tp_ar = by["TP layer activations"]
    assert tp_ar.count == 4 * layers * 2 and tp_ar.nbytes == 64 * 512 * 2
    assert by["FSDP layer all-gather"].count == 2 * layers * 2
    layer_bytes = parameter_counts(load_config(SMALL))["layer"] // 2 * 2
    assert by["FSDP layer all-gather"].nbytes == layer_bytes
    # rank 0's FSDP group is cores 0, 2, 4, 6 (tp fastest), timed inside the compiled graph
    want = collective_estimate("all_gather", layer_bytes, [0, 2, 4, 6],
                               fabric_for("trn2.48xlarge"), in_graph=True)
    assert by["FSDP layer all-gather"].seconds_each == want.seconds
    assert est.tokens_per_step == 64 * 2 * 8
    assert est.step_serial_s >= est.step_s >= est.compute_s


def test_time_only_gives_the_normal_layer_time():
    if not hasattr(torch_neuronx, "time_only"):
        pytest.skip("this build has no time-only execution")
    a = estimate_inference(SMALL, "trn2.48xlarge", tp=2, input_len=128, output_len=16,
                           time_only=False)
    b = estimate_inference(SMALL, "trn2.48xlarge", tp=2, input_len=128, output_len=16,
                           time_only=True)
    assert b.time_only and (a.prefill_layer.ns, a.decode_layer.ns) == (b.prefill_layer.ns,
                                                                       b.decode_layer.ns)


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="does not divide the 8 attention heads"):
        estimate_inference(SMALL, "trn2.48xlarge", tp=3)
    with pytest.raises(ValueError, match="unknown model 'llama-9b'"):
        load_config("llama-9b")
    with pytest.raises(ValueError, match="dtype 'fp8' is not supported"):
        estimate_inference(SMALL, "trn2.48xlarge", dtype="fp8")
    with pytest.raises(ValueError, match=r"need this process's device on a trn3 instance"):
        estimate_inference(SMALL, "trn3.48xlarge")
    with pytest.raises(ValueError, match="TP128 needs 2 instances"):
        estimate_inference(dict(SMALL, num_attention_heads=128, head_dim=4), "trn2.48xlarge",
                           tp=128)


def test_cli_prints_the_estimate(tmp_path, capsys):
    from neuron_sim.cli import main
    path = tmp_path / "config.json"
    path.write_text(json.dumps(SMALL))
    assert main(["estimate", str(path), "infer", "--tp", "2", "--input-len", "128",
                 "--output-len", "8"]) == 0
    out = capsys.readouterr().out
    assert "TTFT" in out and "TPOT" in out and "TP layer activations" in out
    assert main(["estimate", str(path), "infer", "--tp", "3"]) == 2
    assert "does not divide" in capsys.readouterr().err


def test_activation_checkpointing_trades_a_forward_for_the_saved_activations():
    plain = estimate_training(SMALL, "trn2.48xlarge", seq=SEQ, time_only=False)
    ckpt = estimate_training(SMALL, "trn2.48xlarge", seq=SEQ, checkpoint=True, time_only=False)
    saved = SMALL["num_hidden_layers"] * SEQ * SMALL["hidden_size"] * 2   # each layer's input
    extra = ckpt.hbm_bytes["activations"] - max(ckpt.layer.peak_bytes, ckpt.head.peak_bytes)
    assert extra == pytest.approx(saved, rel=0.05)
    assert ckpt.hbm_bytes["activations"] < plain.hbm_bytes["activations"]
    assert plain.layer.ns < ckpt.layer.ns < 2 * plain.layer.ns


def test_sequence_parallel_shortens_only_the_prefill():
    kw = dict(tp=4, input_len=SEQ, output_len=16, time_only=False)
    plain = estimate_inference(SMALL, "trn2.48xlarge", sequence_parallel=False, **kw)
    sp = estimate_inference(SMALL, "trn2.48xlarge", **kw)
    assert sp.sequence_parallel and not plain.sequence_parallel
    assert sp.prefill_layer.ns < plain.prefill_layer.ns
    assert sp.decode_layer.ns == plain.decode_layer.ns
    assert [c.seconds for c in sp.prefill_collectives] == [c.seconds
                                                          for c in plain.prefill_collectives]
