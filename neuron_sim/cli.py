"""`neuron-sim` command line: look at the hardware data and run the calibration.

  neuron-sim instances          instances with chips, logical cores, HBM per logical core
  neuron-sim chips              chips with clocks, SBUF, capabilities
  neuron-sim assumptions        every assumed hardware number with its reasoning
  neuron-sim calibrate          the calibration table (same as python -m neuron_sim.calibrate);
                                --llm adds the published LLM training/inference figures
  neuron-sim estimate MODEL     LLM training step or TTFT/TPOT on an instance from a Hugging
                                Face config, no weights (needs torch; torch_neuronx.estimate)
  neuron-sim explorer TRACE     Explorer-style summary of a saved torch.profiler trace.json
                                (--top N, --json, --plot out.png)
"""

from __future__ import annotations

import argparse
import json
import sys

from .hardware import ASSUMPTIONS, get_chip, get_instance, list_chips, list_instances


def _instances() -> None:
    print(f"{'instance':<28} {'chip':<5} {'chips':>5} {'lnc':>4} {'logical':>8} "
          f"{'HBM/logical GiB':>16}  note")
    for name in list_instances():
        i = get_instance(name)
        print(f"{name:<28} {i.chip.name:<5} {i.chips:>5} {i.chip.lnc_default:>4} "
              f"{i.logical_cores():>8} {i.hbm_bytes_per_logical_core() / 2**30:>16.1f}  "
              f"{'(assumed) ' if i.assumed else ''}{i.note[:60]}")


def _chips() -> None:
    for name in list_chips():
        c = get_chip(name)
        caps = [k for k in c.__dataclass_fields__ if k.startswith("has_") and getattr(c, k)]
        print(f"{name}: NC-v{c.neuroncore_version}, {c.cores_per_chip} cores; clocks GHz "
              f"PE {c.tensor_clock_hz / 1e9} DVE {c.vector_clock_hz / 1e9} "
              f"ACT {c.scalar_clock_hz / 1e9} POOL {c.gpsimd_clock_hz / 1e9}; SBUF "
              f"{c.sbuf_bytes_per_partition // 1024} KiB/partition; BF16 peak "
              f"{c.tensor_peak_flops() / 1e12:.1f} TF/core; {', '.join(caps)}")


def _assumptions() -> None:
    for a in ASSUMPTIONS.values():
        print(f"{a.name} [{a.unit}] = {a.values}\n    {a.reasoning}\n")


def _explorer(args) -> int:
    from .explorer import load_trace, summary_from_trace
    if not args.trace:
        print("neuron-sim explorer: give the trace.json to read (torch.profiler's "
              "export_chrome_trace or torch_neuronx.profiling.NeuronProfiler output)",
              file=sys.stderr)
        return 2
    try:
        s = summary_from_trace(load_trace(args.trace))
    except (OSError, ValueError) as e:
        print(f"neuron-sim explorer: {args.trace}: {e}", file=sys.stderr)
        return 1
    print(json.dumps(s.to_dict(), indent=1) if args.json else s.text(args.top))
    if args.plot:
        from .explorer.plots import plot_summary
        plot_summary(s, args.top).savefig(args.plot, dpi=100)
        print(f"figure written to {args.plot}")
    return 0


def _estimate(args) -> int:
    import os
    # The estimator runs the model on the simulated device, so it lives with the device
    # (torch_neuronx.estimate); this command only forwards to it. The device must simulate the
    # instance's chip from its first use, hence the variable before torch is imported.
    os.environ["NEURON_SIM_INSTANCE"] = args.instance
    try:
        from torch_neuronx import estimate as E
    except ImportError as e:
        print(f"neuron-sim estimate needs torch and torch_neuronx ({e})", file=sys.stderr)
        return 1
    common = dict(instance=args.instance, tp=args.tp, lnc=args.lnc, dtype=args.dtype,
                  precision=args.precision, compiled=not args.eager, name=args.model)
    try:
        if args.mode == "train":
            r = E.estimate_training(args.model, fsdp=args.fsdp, dp=args.dp, seq=args.seq,
                                    micro_batch=args.batch, grad_accum=args.grad_accum,
                                    checkpoint=args.checkpoint, **common)
        else:
            r = E.estimate_inference(args.model, input_len=args.input_len,
                                     output_len=args.output_len, batch=args.batch,
                                     kv_len=args.kv_len, **common)
    except (ValueError, OSError) as e:
        print(f"neuron-sim estimate: {e}", file=sys.stderr)
        return 2
    print(json.dumps(r.to_dict(), indent=1) if args.json else r.report())
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="neuron-sim", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="command", metavar="COMMAND", required=True)
    sub.add_parser("instances", help="instances with chips, logical cores, HBM per logical core")
    sub.add_parser("chips", help="chips with clocks, SBUF, capabilities")
    sub.add_parser("assumptions", help="every assumed hardware number with its reasoning")
    cal = sub.add_parser("calibrate", help="the calibration table")
    cal.add_argument("--llm", action="store_true", help="also the published LLM figures "
                     "(runs the estimator: minutes; needs torch)")
    est = sub.add_parser(
        "estimate", help="LLM training step or inference TTFT/TPOT from a Hugging Face config",
        description="Estimate an LLM on a simulated instance from its Hugging Face config (a "
        "preset name such as llama-3.1-8b or llama-3.3-70b, or a local config.json; no weights, "
        "no download). Prints time, throughput, MFU, HBM per core and the per-engine and "
        "collective breakdown. Method: torch_neuronx/estimate.py.")
    est.add_argument("model", help="preset (llama-3.2-1b, llama-3.1-8b, llama-3.1-70b, "
                     "llama-3.3-70b, llama-3.1-405b, mixtral-8x7b, qwen3-30b-a3b) or a "
                     "config.json path")
    est.add_argument("mode", choices=("train", "infer"), help="training step or inference")
    est.add_argument("--instance", default="trn2.48xlarge", help="default trn2.48xlarge")
    est.add_argument("--tp", type=int, default=1, help="tensor-parallel degree")
    est.add_argument("--fsdp", type=int, default=1, help="FSDP (fully sharded) degree")
    est.add_argument("--dp", type=int, default=1, help="data-parallel (replicated) degree")
    est.add_argument("--lnc", type=int, default=None, help="logical core size (default: chip's)")
    est.add_argument("--dtype", default="bf16", help="bf16 (default) or fp32")
    est.add_argument("--precision", default="bf16", choices=("bf16", "fp8", "mx"),
                     help="matmuls of the layers: bf16 (default), fp8 (Trn2/Trn3) or mx (Trn3)")
    est.add_argument("--seq", type=int, default=4096, help="training sequence length")
    est.add_argument("--batch", type=int, default=1, help="micro-batch (train) or batch (infer)")
    est.add_argument("--grad-accum", type=int, default=1, help="gradient accumulation steps")
    est.add_argument("--input-len", type=int, default=1024, help="prompt tokens")
    est.add_argument("--output-len", type=int, default=128, help="generated tokens")
    est.add_argument("--kv-len", type=int, default=None,
                     help="static KV cache positions (default input + output)")
    est.add_argument("--eager", action="store_true", help="eager programs instead of compiled")
    est.add_argument("--checkpoint", action="store_true",
                     help="train: activation checkpointing of every layer")
    est.add_argument("--json", action="store_true", help="print the estimate as JSON")
    ex = sub.add_parser(
        "explorer", help="Explorer-style summary of a saved torch.profiler trace.json",
        description="Explorer-style summary of a saved torch.profiler trace: the full summary "
        "when the trace was written by torch_neuronx.profiling.NeuronProfiler, device time "
        "and engine-lane activity only for a plain torch.profiler trace (the summary then "
        "says what it cannot know).")
    ex.add_argument("trace", nargs="?", help="a trace.json (NeuronProfiler output, "
                    "export_chrome_trace or tensorboard_trace_handler)")
    ex.add_argument("--top", type=int, default=10, help="ops listed (default 10)")
    ex.add_argument("--json", action="store_true", help="print the summary as JSON")
    ex.add_argument("--plot", metavar="PNG", help="also save the summary figure")
    args = ap.parse_args(argv)
    if args.command == "explorer":
        return _explorer(args)
    if args.command == "estimate":
        return _estimate(args)
    if args.command == "calibrate":
        from .calibrate import format_table, run
        rows = run()
        if args.llm:
            from torch_neuronx.estimate import calibration_rows   # needs torch (see _estimate)
            rows += calibration_rows()
        print(format_table(rows))
    else:
        {"instances": _instances, "chips": _chips, "assumptions": _assumptions}[args.command]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
