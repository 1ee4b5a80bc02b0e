"""One rank of TorchTitan's llama3 debug model trained for a few steps with TorchTitan's own
parts: model_registry("debugmodel"), init_distributed, ParallelDims, set_determinism,
parallelize_llama (full activation checkpointing + FSDP2), meta-device build, to_empty +
init_weights (DTensor random init), its CrossEntropyLoss, AdamW container, LR schedule and
clip_grad_norm_; the step is Trainer.train_step's body (the Trainer class itself imports
`datasets`). Synthetic tokens, no downloads. argv[1] is "neuron" or "cpu" (the reference:
gloo, with TorchTitan's mesh device type set to cpu); argv[2] "compile" turns on TorchTitan's
per-block torch.compile. Last line: JSON of the losses.

TorchTitan 0.3.0 imports its expert-parallel Triton kernels module unconditionally (through
models.common.moe); the CPU wheel has no triton. That one module is replaced here by a stub
whose functions raise: the dense llama never calls them. Nothing else of TorchTitan is touched."""

import json
import sys
import types

import torch

DEVICE = sys.argv[1]
COMPILE = sys.argv[2:] == ["compile"]
STEPS, BATCH, SEQ = 4, 2, 64

kernels = types.ModuleType("torchtitan.distributed.minimal_async_ep.kernels")


def _triton_kernel(name):
    if name.startswith("__"):
        raise AttributeError(name)

    def missing(*args, **kwargs):
        raise RuntimeError(f"{name} is a Triton kernel of TorchTitan's expert parallelism")
    return missing


kernels.__getattr__ = _triton_kernel
sys.modules[kernels.__name__] = kernels

import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import FSDPModule  # noqa: E402
from torch.distributed.tensor import distribute_tensor  # noqa: E402
from torchtitan.components.loss import CrossEntropyLoss  # noqa: E402
from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw  # noqa: E402
from torchtitan.config import (  # noqa: E402
    CommConfig, CompileConfig, DebugConfig, ParallelismConfig, TrainingConfig)
from torchtitan.distributed import ParallelDims, parallel_dims  # noqa: E402
from torchtitan.distributed import utils as dist_utils  # noqa: E402
from torchtitan.distributed.activation_checkpoint import FullAC  # noqa: E402
from torchtitan.models.common.attention import ScaledDotProductAttention  # noqa: E402
from torchtitan.models.llama3 import model_registry  # noqa: E402
from torchtitan.models.llama3.sharding import set_llama3_sharding_config  # noqa: E402
from torchtitan.tools import utils  # noqa: E402

if DEVICE == "cpu":
    parallel_dims.device_type = "cpu"
    dist.init_process_group("gloo")
    device = torch.device("cpu")
else:
    assert utils.device_type == "neuron", utils.device_type
    device = utils.get_local_device()
    utils.device_module.set_device(device)
world = dist_utils.init_distributed(CommConfig())

training = TrainingConfig(local_batch_size=BATCH, seq_len=SEQ, steps=STEPS)
# spmd_backend: 0.3.0's default ("spmd_types") leaves parameters plain tensors with SPMD
# annotations that its fully_shard call expects torch to turn into DTensors; torch 2.13's FSDP2
# does not ("all parameters must be DTensors", on CPU as on neuron). "partial_dtensor" is
# TorchTitan's FSDP2-over-DTensor path that torch 2.13 has.
parallelism = ParallelismConfig(spmd_backend="partial_dtensor")
dims = ParallelDims.from_config(parallelism, world)
dist_utils.set_spmd_backend(parallelism.spmd_backend)
dist_utils.set_determinism(dims, device, DebugConfig(), distinct_seed_mesh_dims=["pp"])

spec = model_registry("debugmodel", attn_backend="flex")
# torch 2.13's flex_attention refuses every device but CUDA/CPU/XPU/HPU/MPS and has no CPU
# backward (torch/nn/attention/flex_attention.py, _validate_device), so neither this run nor
# its CPU reference can train with it. TorchTitan's own causal SDPA inner attention is used.
for layer in spec.model.layers:
    layer.attention.inner_attention = ScaledDotProductAttention.Config()
# What Llama3Model.Config.update_from_config does for a non-Trainer config (that method imports
# the Trainer, and with it `datasets`).
set_llama3_sharding_config(spec.model, enable_sp=parallelism.enable_sequence_parallel)
with torch.device("meta"):
    model = spec.model.build()
# TorchTitan compiles each block with compile.backend (Inductor by default, which TorchNeuron
# does not use: its torch.compile backend is "neuron"; the CPU reference takes aot_eager).
compile_config = CompileConfig(enable=COMPILE, components=["model"],
                               backend="neuron" if DEVICE == "neuron" else "aot_eager")
model = spec.parallelize_fn(model, parallel_dims=dims, training=training,
                            parallelism=parallelism, compile_config=compile_config,
                            ac_config=FullAC.Config(), dump_folder="")
if DEVICE == "cpu":
    # gloo has no ReduceOp.PREMUL_SUM, which FSDP2 uses for TorchTitan's divide factor of 1.0;
    # a plain SUM is the same reduction (the premultiplier is 1).
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_force_sum_reduction_for_comms(True)
model.to_empty(device=device)
with torch.no_grad():
    model.init_weights(buffer_device=None)
model.train()
# Start both runs from the same weights, as TorchTitan's seed checkpoint does: DTensor's random
# init above draws from the device's RNG tracker on neuron and from the plain CPU generator on a
# CPU mesh, so its values differ between the two runs by design. An unsharded copy initialised
# on CPU under one seed is sharded into the model (distribute_tensor scatters rank 0's values).
torch.manual_seed(0)
seed_model = spec.model.build()
with torch.no_grad():
    seed_model.init_weights(buffer_device=None)
    seed = dict(seed_model.named_parameters())
    for name, param in model.named_parameters():
        full = seed[name.replace("_checkpoint_wrapped_module.", "")].to(device)
        param.copy_(distribute_tensor(full, param.device_mesh, param.placements))
del seed_model, seed

loss_fn = CrossEntropyLoss.Config(global_vocab_size=spec.model.vocab_size).build(
    compile_config=CompileConfig())
optimizers = default_adamw(lr=8e-4).build(model_parts=[model])
schedulers = LRSchedulersContainer.Config(warmup_steps=2).build(optimizers=optimizers,
                                                                training_steps=STEPS)

# One synthetic batch per rank, repeated: the loss must fall.
gen = torch.Generator().manual_seed(1234 + dist.get_rank())
tokens = torch.randint(0, spec.model.vocab_size, (BATCH, SEQ + 1), generator=gen)
losses, step_ms = [], []
for step in range(STEPS):
    if DEVICE == "neuron":
        start, end = torch.Event(enable_timing=True), torch.Event(enable_timing=True)
        start.record()
    inputs, labels = tokens[:, :-1].to(device), tokens[:, 1:].to(device)
    optimizers.zero_grad()
    global_valid = dist_utils.dist_sum_tensor(torch.tensor(labels.numel(), device=device),
                                             dims.get_mesh("batch"))
    loss, _ = loss_fn(model(inputs), labels, global_valid)
    loss.backward()
    grad_norm = dist_utils.clip_grad_norm_(list(model.parameters()), training.max_norm,
                                           foreach=True)
    optimizers.step()
    schedulers.step()
    losses.append(dist_utils.dist_sum(loss.detach(), dims.get_optional_mesh("loss")))
    if DEVICE == "neuron":
        end.record()
        step_ms.append(start.elapsed_time(end))
print(json.dumps({"rank": dist.get_rank(), "losses": losses, "simulated_step_ms": step_ms,
                  "grad_norm": float(grad_norm.full_tensor().item()
                                     if hasattr(grad_norm, "full_tensor") else grad_norm)}))
dist.destroy_process_group()
