"""The two estimates issue 18 asks for, each from a Hugging Face config with no weights:

- Llama-3.1-8B training step, FSDP2 over the 64 logical cores of a trn2.48xlarge, BF16,
  seq 4096, micro-batch 1 per rank, every layer activation-checkpointed (without it the saved
  activations, ~1 GiB per layer, do not fit a core's 24 GiB; the script says so either way);
- Llama-3.3-70B inference at TP64 on a trn2.48xlarge, BF16, 10K input / 1.5K output tokens,
  batch 1 (static KV cache of 11.5K positions);

then every published LLM figure in the calibration data (neuron_sim/calibrate/public.json, ids
L*/T*) with its error, unless --no-published. Wall time and peak RSS are the whole script's.

With --precision fp8 both estimates run their layers' matmuls in FP8 (torch_neuronx.fp8_linear;
docs/estimate.md says why FP8 comes out slower than BF16 in this simulator).

    python bench/estimate_llm.py [--no-published] [--precision fp8]
"""

import argparse
import os
import resource
import time

os.environ.setdefault("NEURON_SIM_INSTANCE", "trn2.48xlarge")

import torch_neuronx  # noqa: E402
from neuron_sim.progress import Progress  # noqa: E402
from torch_neuronx.estimate import calibration_rows, estimate_inference, estimate_training  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--no-published", action="store_true", help="skip the published figures")
    ap.add_argument("--precision", default="bf16", choices=("bf16", "fp8"),
                    help="matmul precision of both estimates (mx needs a Trn3 instance)")
    args = ap.parse_args()
    t0 = time.perf_counter()
    bar = Progress("estimates", unit=" estimates", total=2 + (not args.no_published), delay_s=0)
    bar.stage("Llama-3.1-8B training step, FSDP64")
    train = estimate_training("llama-3.1-8b", "trn2.48xlarge", fsdp=64, seq=4096, micro_batch=1,
                              dtype="bf16", checkpoint=True, name="Llama-3.1-8B",
                              precision=args.precision)
    bar.tick()
    print(train.report(), flush=True)
    bar.stage("Llama-3.3-70B inference, TP64")
    infer = estimate_inference("llama-3.3-70b", "trn2.48xlarge", tp=64, input_len=10000,
                               output_len=1500, batch=1, dtype="bf16", name="Llama-3.3-70B",
                               precision=args.precision)
    bar.tick()
    print(infer.report(), flush=True)
    wall = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    extra = ""
    if not args.no_published:
        from neuron_sim.calibrate import format_table
        bar.stage("published figures")
        rows = calibration_rows()
        bar.tick()
        table = format_table(rows)
        print("\n".join(line for line in table.splitlines() if not line.startswith("RESULT")))
        errs = [r.error for r in rows if r.asserted]
        extra = (f" published_rows={len(rows)} published_median_err="
                 f"{sorted(errs)[len(errs) // 2]:.3f}" if errs else "")
    bar.close()
    print(f"RESULT train_step_s={train.step_s:.4f} train_tokens_per_s={train.tokens_per_s:.0f} "
          f"train_mfu={train.mfu:.3f} train_hbm_gib={train.hbm_per_core / 2**30:.1f} ttft_ms={infer.ttft_s * 1e3:.1f} "
          f"tpot_ms={infer.tpot_s * 1e3:.2f} precision={args.precision} time_only={int(train.time_only and infer.time_only)} "
          f"wall_s={wall:.1f} peak_rss_gb={rss:.2f}{extra}")


if __name__ == "__main__":
    main()
