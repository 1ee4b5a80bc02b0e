"""One rank of the real 4-process FSDP2 run the one-process simulation is compared with: the
distributed example's FSDP2 training on neuron/neuron; rank 0 writes its result."""

import json
import sys
from pathlib import Path

import torch.distributed as dist

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples" / "distributed"))
import distributed_train as example  # noqa: E402

ARGS = ["--parallelism", "fsdp", "--device", "neuron", "--backend", "neuron", "--steps", "3",
        "--dim", "256", "--heads", "4", "--seq", "64", "--layers", "2"]

if __name__ == "__main__":
    dist.init_process_group(backend="neuron")
    result = example.train(example.parser().parse_args(ARGS))
    if dist.get_rank() == 0:
        Path(sys.argv[1]).write_text(json.dumps({"step_ns": result["step_ns"],
                                                 "collectives": result["collectives"]}))
    dist.destroy_process_group()
