"""Scale on paper: a training step of a GPT-style model on 64 ranks of a trn2.48xlarge (or any
rank count and instance) from ONE simulated rank, without launching 64 processes.

    python examples/distributed/estimate_64.py                      # GPT-2 tutorial model, FSDP2
    python examples/distributed/estimate_64.py --parallelism ddp

1. One rank's program: the step of distributed_train.py's model (forward, backward, SGD) on one
   simulated NeuronCore, timed with torch.Event (simulated device time) = compute per rank.
2. The collective pattern of that step under FSDP2 or DDP, derived from the model's parameters
   the way those wrappers issue collectives (neuron_sim.collectives.fsdp2_pattern /
   ddp_pattern; tests/distributed/test_parity.py checks both against the collectives a real
   2- and 4-rank run logs).
3. neuron_sim.collectives.estimate_step times the pattern on the target's NeuronLink fabric.
Method and limits: neuron_sim/collectives/scale.py and docs/distributed.md. The last line is
`RESULT key=value ...`.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--parallelism", choices=["ddp", "fsdp"], default="fsdp")
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--instance", default="trn2.48xlarge")
    # The AWS GPT-2 training tutorial's model: 4 layers, 8 heads, hidden 1024, GPT-2 vocabulary
    # (context 2048 there; a shorter default sequence keeps the run about a minute on a laptop).
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--vocab", type=int, default=50257)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--batch", type=int, default=1, help="sequences per rank")
    args = ap.parse_args(argv)
    os.environ.setdefault("NEURON_SIM_INSTANCE", args.instance)

    import torch

    from distributed_train import GPT, train_step
    from neuron_sim.collectives import ddp_pattern, estimate_step, fsdp2_pattern

    torch.manual_seed(0)
    model = GPT(vocab=args.vocab, dim=args.dim, heads=args.heads, layers=args.layers,
                context=args.seq).to("neuron")
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, foreach=False)
    data = torch.randint(0, args.vocab, (args.batch, args.seq + 1))
    x, y = data[:, :-1].to("neuron"), data[:, 1:].to("neuron")
    for step in range(2):                 # the second step is timed: caches are warm
        _, ms = train_step(model, opt, x, y, timed=True)
    compute_s = ms * 1e-3

    elem = 4   # fp32 parameters and gradients, as the script trains
    root = [p.shape for n, p in model.named_parameters() if not n.startswith("blocks.")]
    units = [[p.shape for p in b.parameters()] for b in model.blocks]

    def pattern(ranks):
        if args.parallelism == "fsdp":
            return fsdp2_pattern(root, units, ranks, elem)   # padding depends on the group size
        return ddp_pattern([p.numel() * elem for p in model.parameters()])

    params = sum(p.numel() for p in model.parameters())
    print(f"model: {params / 1e6:.1f} M parameters, {args.layers} layers, hidden {args.dim}, "
          f"sequence {args.seq}, batch {args.batch} per rank, {args.parallelism}")
    print(f"one rank's program on one {args.instance} NeuronCore: {compute_s * 1e3:.3f} ms")
    for ranks in sorted({2, args.ranks}):
        est = estimate_step(compute_s, pattern(ranks), args.instance, {"dp": ranks})
        print(est.summary())
    print(f"RESULT ranks={args.ranks} instance={args.instance} parallelism={args.parallelism} "
          f"params_M={params / 1e6:.1f} compute_ms={compute_s * 1e3:.3f} "
          f"comm_ms={est.comm_s * 1e3:.3f} step_serial_ms={est.serial_s * 1e3:.3f} "
          f"step_overlapped_ms={est.overlapped_s * 1e3:.3f}")


if __name__ == "__main__":
    main()
