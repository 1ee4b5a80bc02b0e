"""One process of the parity test: the example's DDP, FSDP2 and TP runs on CPU/gloo and on
neuron/neuron in one job (backend "cpu:gloo,neuron:neuron"); rank 0 writes every result."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "distributed"))
import distributed_train as example  # noqa: E402

out, checkpoint = sys.argv[1], sys.argv[2]
dist.init_process_group(backend="cpu:gloo,neuron:neuron")
results = {}
for parallelism in ("ddp", "fsdp", "tp"):
    for device in ("cpu", "neuron"):
        argv = ["--parallelism", parallelism, "--device", device, "--backend", "neuron"]
        if parallelism == "fsdp" and device == "neuron":
            argv += ["--checkpoint", checkpoint]
        results[f"{parallelism}/{device}"] = example.train(example.parser().parse_args(argv))
if dist.get_rank() == 0:
    Path(out).write_text(json.dumps(results))
dist.destroy_process_group()
