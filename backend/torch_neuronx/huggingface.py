"""Hugging Face Trainer support: simulated Trainium time in the Trainer's logs.

    from transformers import Trainer
    from torch_neuronx.huggingface import SimulatedTimeCallback

    trainer = Trainer(model, args, train_dataset=ds, callbacks=[SimulatedTimeCallback()])

With `accelerate` installed, `TrainingArguments().device` is already `neuron:0`; the model and
batches go there unchanged. The Trainer's own `train_runtime` is wall time on this machine;
the callback adds, to every log line and to `trainer.state.log_history`:

  sim_step_ms          simulated device time per optimizer step since the last log
  sim_time_s           simulated device time since training began
  sim_mfu              model FLOPs utilisation: the Trainer's FLOP count (6 x tokens x
                       parameters for PreTrainedModels) over simulated time x the TensorE peak
                       of one logical NeuronCore in the training dtype
  neuron_fallback_ops  ops of this process that ran on CPU (no NeuronCore kernel), when ones
                       not reported yet appear (`torch_neuronx.get_fallback_ops()`)

and to the final metrics `sim_train_runtime` and `sim_train_steps_per_second`. The per-run
summary is also in `callback.summary()`.
"""

from __future__ import annotations

import torch

try:
    from transformers import TrainerCallback
except ImportError as e:  # pragma: no cover - the message is the point
    raise ImportError("torch_neuronx.huggingface needs the transformers package "
                      "(pip install 'transformers>=4.50')") from e

import torch_neuronx


def _device_index(args):
    device = getattr(args, "device", None)
    if isinstance(device, torch.device) and device.type == "neuron":
        return device.index or 0
    return None


class SimulatedTimeCallback(TrainerCallback):
    """Reports simulated Trainium time per step and per run, MFU and CPU-fallback ops."""

    def __init__(self):
        self.device = None
        self.peak_flops = None
        self.steps = 0
        self.train_ns = 0
        self._train_start = 0
        self._log_ns = 0          # simulated time at the last log
        self._log_steps = 0
        self._log_flos = 0.0
        self._fallbacks_reported: set[str] = set()

    # -- clock ------------------------------------------------------------------------------
    def _now(self) -> int:
        torch.neuron.synchronize(self.device)
        return torch_neuronx.device_time_ns(self.device)

    def _peak(self, args, model) -> float | None:
        if args.bf16 or args.fp16:
            dtype = "bfloat16"            # TensorE runs float16 at the bfloat16 rate
        else:
            param = next(model.parameters(), None) if model is not None else None
            dtype = str(param.dtype).removeprefix("torch.") if param is not None else "float32"
        visible = torch_neuronx._visible()
        return visible.instance.peak_flops_per_logical_core(dtype, visible.lnc)

    # -- Trainer events ---------------------------------------------------------------------
    def on_train_begin(self, args, state, control, model=None, **kwargs):
        self.device = _device_index(args)
        if self.device is None:
            return
        self.peak_flops = self._peak(args, model)
        self.steps = 0
        self._train_start = self._log_ns = self._now()
        self._log_steps = 0
        self._log_flos = state.total_flos
        self._fallbacks_reported = set()

    def on_step_end(self, args, state, control, **kwargs):
        # No synchronize here: a sync point per step would cut Adaptive Eager Execution's
        # fusion where a plain training loop has none. The clock is read when logging.
        if self.device is not None:
            self.steps += 1

    def on_train_end(self, args, state, control, **kwargs):
        if self.device is not None:
            self.train_ns = self._now() - self._train_start

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self.device is None or logs is None:
            return
        added = {}
        self.train_ns = self._now() - self._train_start
        if "train_runtime" in logs:      # the run's final metrics
            added["sim_train_runtime"] = round(self.train_ns / 1e9, 6)
            if self.train_ns > 0:
                added["sim_train_steps_per_second"] = round(self.steps / (self.train_ns / 1e9), 3)
        else:
            now = self._train_start + self.train_ns
            steps = self.steps - self._log_steps
            if steps > 0:
                elapsed = now - self._log_ns
                added["sim_step_ms"] = round(elapsed / steps / 1e6, 6)
                added["sim_time_s"] = round(self.train_ns / 1e9, 6)
                flos = state.total_flos - self._log_flos
                if flos > 0 and elapsed > 0 and self.peak_flops:
                    added["sim_mfu"] = round(flos / (elapsed / 1e9) / self.peak_flops, 6)
                self._log_ns, self._log_steps, self._log_flos = now, self.steps, state.total_flos
        new_fallbacks = torch_neuronx.get_fallback_ops() - self._fallbacks_reported
        if new_fallbacks:
            added["neuron_fallback_ops"] = ", ".join(sorted(new_fallbacks))
            self._fallbacks_reported |= new_fallbacks
        logs.update(added)
        # Trainer.log appended a copy of `logs` to the history before calling us.
        if state.log_history and all(state.log_history[-1].get(k) == v for k, v in logs.items()
                                     if k not in added):
            state.log_history[-1].update(added)

    def summary(self) -> dict:
        """The run so far: steps, simulated time, time per step, the process's fallback ops."""
        return {"steps": self.steps, "sim_time_s": self.train_ns / 1e9,
                "sim_step_ms": self.train_ns / self.steps / 1e6 if self.steps else None,
                "fallback_ops": sorted(torch_neuronx.get_fallback_ops())}
