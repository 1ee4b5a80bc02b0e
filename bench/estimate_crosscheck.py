"""The two figures of docs/estimate.md that check the estimator from another side:

1. Estimator vs the real FSDP2 code (section "Method"): an 8B-shaped Llama cut to LAYERS layers,
   seq 1024, micro-batch 1, rank 0 of FSDP64 on trn2.48xlarge, BF16, eager, no overlap.
   - estimator: estimate_training(..., compiled=False); compute = compute_s without AdamW
     (layers and head, forward and backward), collectives = every FSDP collective it charges
     (exposed + overlapped, i.e. serial).
   - simulate_rank: the Hugging Face model built on 'meta', fully_shard per layer and at the
     root, materialised in time-only mode, one warm-up step (forward, backward, AdamW foreach),
     then the forward and backward timed as the estimator times its parts (_measure: another
     warm-up call, then synchronize / device_time_ns around one call); collectives = the sum
     of that pass's collective log, compute = its simulated time minus them (eager collectives
     run on the compute stream).
   AdamW is timed apart on both sides and reported beside them; the top ops of the
   simulate_rank pass are printed (where the compute gap goes). Both take grouped-query
   attention as a flash kernel would (the estimator's _execution).
2. One GEMM of the Llama-3.1-8B TP8 MLP (K 4096, N 1792) at 1 and 2048 tokens, each timed alone
   the same way (_measure; timed without a synchronize after the warm-up, Adaptive Eager
   Execution would fuse the two calls into one program), normal execution (time-only mode's
   _scaled_mm shape check refuses the K-major weight): BF16 x @ W.T; FP8 through
   torch._scaled_mm in its required layout (weight column-major, K contiguous) with row-wise
   scales, operands quantised beforehand; the same with the FP8 weight stored K-major
   (row-major [K, N]).

    python bench/estimate_crosscheck.py [--layers 4] [--skip-fsdp] [--skip-gemm]

RESULT est_compute_ms est_coll_ms spmd_compute_ms spmd_coll_ms est_adamw_ms spmd_adamw_ms layers
       bf16_us_1 bf16_us_2048 fp8_us_1 fp8_us_2048 fp8_kmajor_us_1 fp8_kmajor_us_2048 wall_s
(whole script ~40 s of wall time on a loaded 2-core machine)
"""

import argparse
import os
import time

os.environ.setdefault("NEURON_SIM_INSTANCE", "trn2.48xlarge")

import torch  # noqa: E402

import torch_neuronx  # noqa: E402
# _measure: the estimator's own timing (a warm-up call, then the simulated time of one call)
from torch_neuronx.estimate import (PRESETS, _execution, _measure, estimate_training,  # noqa: E402
                                   load_config)

JOB = "trn2.48xlarge"
FSDP = 64
SEQ = 1024
K, N = 4096, 14336 // 8        # Llama-3.1-8B MLP at TP8: hidden 4096, intermediate 14336 / 8
TOKENS = (1, 2048)
TOP_OPS = 12                   # ops of the simulate_rank step shown by time


def _config(layers):
    return load_config(dict(PRESETS["llama-3.1-8b"], num_hidden_layers=layers))


def estimator_side(layers):
    """(forward+backward compute ms, collectives ms, AdamW ms) of the estimator, eager."""
    t = estimate_training(_config(layers), JOB, fsdp=FSDP, seq=SEQ, micro_batch=1,
                          dtype="bf16", compiled=False, time_only=True)
    print(t.report(), flush=True)
    return ((t.compute_s - t.optimizer_s) * 1e3, (t.exposed_comm_s + t.overlapped_comm_s) * 1e3,
            t.optimizer_s * 1e3)


def spmd_side(layers):
    """(forward+backward compute ms, collectives ms, AdamW ms) of the real FSDP2 step as rank 0
    of FSDP64."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard
    from transformers import AutoModelForCausalLM

    from torch_neuronx.distributed import clear_collective_log, collective_log
    from torch_neuronx.distributed import spmd
    cfg = _config(layers)
    cfg._attn_implementation = "sdpa"
    with _execution(True), spmd.simulate_rank(FSDP, 0, JOB):
        mesh = init_device_mesh("neuron", (FSDP,))
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(cfg).to(torch.bfloat16)
        for layer in model.model.layers:
            fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
        model.to_empty(device="neuron")
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)
        dev = torch.device("neuron", torch.neuron.current_device())
        ids = torch.zeros(1, SEQ, dtype=torch.long, device=dev)

        def forward_backward():
            model(ids, labels=ids).loss.backward()

        forward_backward()                       # optimizer state and its lowering
        opt.step()

        def before():                            # gradients written, not accumulated
            opt.zero_grad(set_to_none=True)
            clear_collective_log()

        ns = _measure(forward_backward, dev, before).ns
        print(torch_neuronx.timing_report(TOP_OPS), flush=True)
        log = collective_log()
        opt_ns = _measure(opt.step, dev).ns
        if len(collective_log()) != len(log):
            raise RuntimeError("the optimizer step issued collectives; its time is not compute")
    coll = sum(r.ns for r in log)
    ops = {}
    for r in log:
        ops[r.model_op] = ops.get(r.model_op, 0) + r.ns
    print(f"simulate_rank forward+backward: {ns / 1e6:.1f} ms, collectives "
          + ", ".join(f"{k} {v / 1e6:.1f} ms" for k, v in ops.items())
          + f"; AdamW {opt_ns / 1e6:.2f} ms", flush=True)
    return (ns - coll) / 1e6, coll / 1e6, opt_ns / 1e6


def gemm_side():
    """{name: (us at 1 token, us at 2048 tokens)} of one 8B TP8 MLP GEMM."""
    from torch_neuronx.fp8_linear import _rowwise
    dev = torch.device("neuron", torch.neuron.current_device())
    w = torch.randn(N, K, dtype=torch.bfloat16, device=dev) * 0.02
    wq, ws = _rowwise(w)                          # [N, K] e4m3, scales [N, 1]
    wq_kmajor = wq.t().contiguous()               # [K, N] row-major
    out = {"bf16": [], "fp8": [], "fp8_kmajor": []}
    for m in TOKENS:
        x = torch.randn(m, K, dtype=torch.bfloat16, device=dev)
        xq, xs = _rowwise(x)
        runs = {
            "bf16": lambda: x @ w.t(),
            "fp8": lambda: torch._scaled_mm(xq, wq.t(), scale_a=xs, scale_b=ws.t(),
                                            out_dtype=torch.bfloat16),
            "fp8_kmajor": lambda: torch._scaled_mm(xq, wq_kmajor, scale_a=xs, scale_b=ws.t(),
                                                   out_dtype=torch.bfloat16),
        }
        for name, fn in runs.items():
            out[name].append(_measure(fn, dev).ns / 1e3)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=4, help="decoder layers of the 8B-shaped model")
    ap.add_argument("--skip-fsdp", action="store_true", help="only the GEMM figures")
    ap.add_argument("--skip-gemm", action="store_true", help="only the FSDP cross-check")
    args = ap.parse_args()
    t0 = time.perf_counter()
    fields = []
    if not args.skip_fsdp:
        ec, ecoll, eopt = estimator_side(args.layers)
        sc, scoll, sopt = spmd_side(args.layers)
        print(f"cross-check, {args.layers} layers, forward+backward: estimator compute {ec:.1f} ms, "
              f"collectives {ecoll:.1f} ms; simulate_rank compute {sc:.1f} ms, collectives "
              f"{scoll:.1f} ms (AdamW: estimator {eopt:.2f} ms, simulate_rank {sopt:.2f} ms)",
              flush=True)
        fields += [f"est_compute_ms={ec:.1f}", f"est_coll_ms={ecoll:.1f}",
                   f"spmd_compute_ms={sc:.1f}", f"spmd_coll_ms={scoll:.1f}",
                   f"est_adamw_ms={eopt:.2f}", f"spmd_adamw_ms={sopt:.2f}", f"layers={args.layers}"]
    if not args.skip_gemm:
        g = gemm_side()
        for name, (one, many) in g.items():
            print(f"GEMM K {K} N {N} {name}: {one:.0f} us at 1 token, {many:.0f} us at "
                  f"{TOKENS[1]} tokens", flush=True)
            fields += [f"{name}_us_1={one:.0f}", f"{name}_us_{TOKENS[1]}={many:.0f}"]
    print("RESULT " + " ".join(fields) + f" wall_s={time.perf_counter() - t0:.0f}")


if __name__ == "__main__":
    main()
