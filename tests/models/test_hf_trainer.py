"""The Hugging Face Trainer fine-tunes a GPT-2 (tiny, from a config) on 'neuron' for 20 steps
with the same losses as on CPU, and SimulatedTimeCallback puts simulated time in its logs."""

import math

import pytest
import torch

pytest.importorskip("transformers", reason="transformers is not installed (it is in the test extra)")
pytest.importorskip("accelerate", reason="the Trainer needs accelerate (it is in the test extra)")

from transformers import Trainer, TrainingArguments  # noqa: E402

import torch_neuronx  # noqa: E402
from hf_tiny import tiny_causal_lm, tokens  # noqa: E402
from torch_neuronx.huggingface import SimulatedTimeCallback  # noqa: E402

STEPS = 20


class TokenDataset(torch.utils.data.Dataset):
    def __init__(self):
        self.ids = tokens(batch=32, length=16, seed=7)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def fine_tune(tmp_path, use_cpu):
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=4,
                             learning_rate=1e-3, logging_steps=5, save_strategy="no", report_to=[],
                             use_cpu=use_cpu, seed=0, disable_tqdm=True)
    callback = SimulatedTimeCallback()
    trainer = Trainer(model=tiny_causal_lm("gpt2"), args=args, train_dataset=TokenDataset(),
                      callbacks=[callback])
    trainer.train()
    return args, trainer, callback


def test_gpt2_fine_tune_matches_cpu_and_reports_simulated_time(tmp_path):
    torch_neuronx.clear_op_tracking()      # fallback ops are tracked per process
    cpu_args, cpu_trainer, _ = fine_tune(tmp_path / "cpu", use_cpu=True)
    args, trainer, callback = fine_tune(tmp_path / "neuron", use_cpu=False)
    assert cpu_args.device.type == "cpu"
    assert args.device == torch.device("neuron", 0)       # no user action: accelerate picks it
    model = trainer.model
    assert model.lm_head.weight.device.type == "neuron"
    assert model.lm_head.weight is model.transformer.wte.weight   # still tied after the Trainer's move

    history = [h for h in trainer.state.log_history if "loss" in h]
    cpu_history = [h for h in cpu_trainer.state.log_history if "loss" in h]
    assert [h["step"] for h in history] == [5, 10, 15, 20]
    assert [h["step"] for h in cpu_history] == [5, 10, 15, 20]
    for h, c in zip(history, cpu_history):
        assert h["loss"] == pytest.approx(c["loss"], rel=1e-5), h["step"]
    assert history[-1]["loss"] < history[0]["loss"]        # it learns

    # Simulated time on every log line, and for the run.
    for h in history:
        assert h["sim_step_ms"] > 0 and 0 < h["sim_mfu"] < 1
        assert "sim_step_ms" not in next(c for c in cpu_history if c["step"] == h["step"])
    assert [h["sim_time_s"] for h in history] == sorted(h["sim_time_s"] for h in history)
    final = trainer.state.log_history[-1]
    assert final["sim_train_runtime"] == pytest.approx(history[-1]["sim_time_s"], rel=1e-3)
    assert final["sim_train_steps_per_second"] == pytest.approx(
        STEPS / final["sim_train_runtime"], rel=1e-2)
    # Four log intervals of five steps each add up to the run.
    per_step = [h["sim_step_ms"] for h in history]
    assert math.isclose(sum(per_step) * 5 / 1e3, final["sim_train_runtime"], rel_tol=1e-2)
    summary = callback.summary()
    assert summary["steps"] == STEPS and summary["sim_time_s"] == pytest.approx(
        final["sim_train_runtime"], rel=1e-3)
    assert summary["fallback_ops"] == []        # GPT-2 runs entirely on NeuronCores
