"""Every hardware number the public documents do not give, in one place, each with its reasoning.

Calibration (`python -m neuron_sim.calibrate`) replaces or confirms these values; nothing else in
the simulator invents a hardware number. Values are per chip name where they differ by generation.
Sources in brackets refer to ../shared/reference/trainium-hw.md (copied facts live in
trainium-hw.json next to this file).
"""

from __future__ import annotations

from dataclasses import dataclass


def _same(value) -> dict:
    """The values of an assumption that is the same on every chip."""
    return {"trn1": value, "trn2": value, "trn3": value}


@dataclass(frozen=True)
class Assumption:
    name: str
    values: dict  # chip name -> value
    unit: str
    reasoning: str


ASSUMPTIONS: dict[str, Assumption] = {a.name: a for a in [
    Assumption(
        "cross_engine_semaphore_latency_s", _same(75e-9), "s",
        "Unknown [§5]. Bracketed by the 189 ns dependent-instruction interval on one engine [Perf]; "
        "the middle of the data sheet's 50-100 ns range. Charged on every dependency edge between "
        "two different instruction streams (engines or DMA queues)."),
    Assumption(
        "dependent_latency_cycles", _same(100), "engine cycles",
        "Documented for NC-v2 only: 'static ~100 cycles when instructions are dependent and back "
        "to back' [ArchV2][ISAcost]; kept on v3/v4 as the data sheet suggests."),
    Assumption(
        "tensor_access_latency_cycles", _same(60), "engine cycles",
        "'~60 cycles of static overhead per tensor access' on NC-v2 [ArchV2]. Modelled as latency "
        "(not throughput, since the documented back-to-back costs max(64, N) already are the "
        "initiation interval) and charged once per tensor operand (inputs and output). With the "
        "100-cycle dependent overhead this gives a dependent 1-element activation chain of "
        "64 + 100 + 2*60 = 284 cycles against 264 measured (C17)."),
    Assumption(
        "tensor_mm_latency_extra_cycles", _same(192), "TensorE cycles",
        "~128 cycles of systolic column traversal plus ~64 of PSUM write [§5]; only the "
        "initiation interval is documented. Matters only for dependent chains."),
    Assumption(
        "mm_init_latency_cycles", _same(64), "TensorE cycles",
        "MM_INIT_LATENCY documented for NC-v2 [ArchV2]; C8 matches the formula with it on NC-v3."),
    Assumption(
        "fast_load_stationary_speedup", _same(4), "x",
        "Documented for NC-v2 [ArchV2][Perf]; kept on v3/v4."),
    Assumption(
        "dma_descriptor_overhead_s", _same(1e-9), "s",
        "Fitted with the documented sustained engine rate (23 B/ns on NC-v3 [DMAbw]) to the two "
        "Trn2 measurements [DMAov]: 16 engines x 8 partitions x 256 B in 97 ns (C16) and one "
        "engine x 4 partitions x 8 KiB in 1416 ns (C15) leave about 1 ns per descriptor. The data "
        "sheet's 11 ns fit counts one descriptor for C16 instead of one per partition."),
    Assumption(
        "dma_fixed_latency_s", _same(1.05e-6), "s",
        "Trigger to first byte. The profile of C16 shows ~1.2 us from trigger to completion of a "
        "97 ns transfer [DMAov], i.e. ~1.05 us after subtracting the data phase and the completion "
        "semaphore (75 ns); with the semaphore latency on the triggering side this reproduces the "
        "'~1300 ns cross-engine' fixed cost [DMAbw]. Overlaps other transfers (it is latency, not "
        "engine occupancy)."),
    Assumption(
        "dma_static_issue_s", _same(5e-8), "s",
        "Minimum interval between two DMA triggers on one queue with prebuilt (static) "
        "descriptors: one sequencer instruction, ~64 cycles at ~1.2-1.4 GHz [ArchV2]."),
    Assumption(
        "swdge_instr_s", _same(1.0e-6), "s",
        "Software descriptor generation on GpSimd [DGE]: not measured; taken slower than the "
        "documented ~600 ns hardware DGE because GpSimd runs it as code."),
    Assumption(
        "hbm_bytes_per_s_per_core",
        {"trn1": 106e9, "trn2": 2.9e12 / 8, "trn3": 4.9e12 / 8}, "B/s",
        "HBM read+write bandwidth one NeuronCore's DMA engines get (the data sheet lists this as "
        "unknown, §5). Trn2/Trn3: chip bandwidth / 8 cores as the data sheet suggests. Trn1: the "
        "four NKI matmul tutorial stages (C1-C4) move 5.44, 4.43, 2.28 and 0.74 GB in 51.8, 43.0, "
        "22.1 and 6.97 ms: 105, 103, 103 and 106 GB/s although their latencies differ 7x and their "
        "rows range from 256 B to 4 KiB, which identifies one bandwidth ceiling (not descriptor "
        "overhead). 106 GB/s is that ceiling; it is far below 820 GB/s / 2 cores, so it most likely "
        "reflects how the 2024 toolchain spread a single core's DMAs, not the HBM itself. Still a "
        "fit: no documented figure gives it. The docs give 16 engines x 27.2 GB/s theoretical "
        "[DMAov] (27 GiB/s [ArchV2]), 17 B/ns sustained = 272 GB/s at >= 4 KiB per partition "
        "[DMAbw], 'larger than 32KiB' per transfer for ideal bandwidth [Perf], and the tutorial's "
        "own roofline threshold of 222 FLOP/B (~413 GB/s) [MMtut-old]; 106 GB/s is 39% of the "
        "sustained figure, and with 410 GB/s here C1-C3 come out 60% fast. Fits of C1-C3 with a "
        "per-descriptor or per-transfer cost come out negative (C1 needs 1.5x the transfers and "
        "descriptors per byte of C2, yet is faster per byte)."),
    Assumption(
        "tensor_didt_reset_idle_s", _same(1.5e-6), "s",
        "The dI/dt limit returns when TensorE utilisation drops below 50% in a ~3 us window "
        "[Explorer]; an idle gap of half the window is the shortest gap that does that."),
    Assumption(
        "vector_psum_operand_single_pass", _same(True), "rule",
        "Two-input VectorE ops cost max(64, 2N) [ISAcost], but max(64, N) when one input is in "
        "PSUM and the other in SBUF. Documented for NC-v2; kept on v3/v4 because C8 (Trn2) shows "
        "VectorE 10.55% active for 4096 PSUM+SBUF adds of [128, 512] FP32 in ~28.3 ms, which "
        "only the N rule reproduces (2N would give ~17%)."),
    Assumption(
        "reuse_loop_invariant", {"trn1": True, "trn2": False, "trn3": False}, "rule",
        "The compiler computes an instruction whose operands do not change across a loop's "
        "iterations once (loop-invariant code motion; nki/reuse.py). Trn1: not documented; the "
        "published Trn1 kernels were built by the 2024 toolchain, whose NKI was integrated into "
        "the graph compiler early ('About the NKI Compiler', NKI docs), and the Mamba tutorial's "
        "profiles imply it [Mamba]: v2 computes deltaU = delta * u inside its state loop, yet "
        "VectorE is active 8.4 cycles per element and state at seq 8192 (58.93% of 53.33 ms), "
        "which a deltaU per state (10N) cannot give and one per channel tile (8.1N) does; v3's "
        "deltaU depends on the sequence tile of the inner loop, cannot move, and shows the 7.0N "
        "of the cost table with it in the loop. Without it v2 at seq 7168-8192 holds one more "
        "[128, seq] tile per state and spills 3x the bytes: +34% and +42% against the published "
        "sweep (C13), within 17% with it. Trn2/Trn3: today's NKI compiler 'compiles kernel code "
        "while preserving the developer's optimization choices', transforming resource "
        "allocation and instruction scheduling (same page), so a kernel runs as written."),
    Assumption(
        "scalar_activation_cycles", _same("max(64,N)"), "formula",
        "One cost for every activation function [ISAcost]; per-function throughput unknown."),
    Assumption(
        "gpsimd_elementwise_cycles", _same("150+N"), "formula",
        "Consistent with the iota and affine_select formulas [ISAcost] (§5)."),
    Assumption(
        "gemm_panel_budget_bytes_per_partition", _same(128 * 1024), "bytes",
        "SBUF per partition a lowered matmul keeps for its resident B panel (all of K); how much "
        "the compiler gives it is not published. The lowering's choice since its first matmul "
        "rule: two thirds of Trn1's 192 KiB, the rest for A tiles and outputs; the same on every "
        "chip so that a matmul tiles alike across generations. No calibration row measures it."),
    Assumption(
        "gemm_a_block_bytes_per_partition", _same(48 * 1024), "bytes",
        "SBUF per partition for the A tiles of one lowered matmul block of several M tiles (two "
        "buffers), which one DMA fetches together to amortise the ~1 us DMA latency. The lowering's "
        "choice, not published; no calibration row measures it."),
    Assumption(
        "gemm_whole_k_bytes_per_partition", _same(64 * 1024), "bytes",
        "SBUF per partition for a lowered matmul's double-buffered whole-K operand tiles: above it "
        "the lowering blocks K (output-stationary), and tiny batched products group at most this "
        "much. The lowering's choice, not published; no calibration row measures it."),
    Assumption(
        "row_op_small_tiles_bytes_per_partition", _same(8192), "bytes",
        "SBUF per partition a lowered norm backward leaves for its small tiles (statistics, "
        "ones, column sums) when it sizes the pieces of a long row. The lowering's choice."),
    Assumption(
        "sbuf_alloc_align_bytes", _same(64), "bytes",
        "Where the NKI front end's memory plan may start an SBUF tile (per partition). NKI "
        "documents 1 (nl.tile_size.sbuf_min_align), not what its allocator does. Not published."),
    Assumption(
        "stream_sbuf_bytes_per_partition", _same(96 * 1024), "bytes",
        "SBUF per partition a lowered streaming op's triple-buffered tiles take; the rest holds a "
        "fused sequence's resident tensors. The lowering's choice (half of Trn1's 192 KiB)."),
    Assumption(
        "resident_reserve_bytes_per_partition", _same(16 * 1024), "bytes",
        "SBUF per partition a fused sequence keeps free beside its resident tensors and the "
        "streaming tiles, for the small tiles of its ops (statistics, scales, partial sums). The "
        "lowering's choice."),
    Assumption(
        "resident_sbuf_bytes_per_partition", _same(96 * 1024), "bytes",
        "SBUF per partition an AEE-fused or compiled program may keep intermediates resident in "
        "(at most; less where the streaming tiles and the reserve leave less), the rest for the "
        "tiles each op streams through. The lowering's choice (half of Trn1's 192 KiB)."),
    Assumption(
        "stream_chunk_min_bytes_per_partition", _same(2048),
        "bytes", "A big tensor's streamed chunks move at least this per partition and DMA: "
        "the DMA engines approach their sustained rate from ~2 KiB [DMAbw]. The lowering's choice."),
    Assumption(
        "stream_chunk_max_bytes_per_partition", _same(16384),
        "bytes", "... and at most this: 16 KiB reaches the sustained rate [DMAbw], bigger chunks "
        "only lengthen the pipeline's fill and drain. The lowering's choice."),
    Assumption(
        "gemm_k_chunk_bytes_per_partition", _same(96 * 1024), "bytes",
        "SBUF per partition for a lowered batched matmul's double-buffered K chunks of A and B "
        "(output-stationary blocks). The lowering's choice (half of Trn1's 192 KiB)."),
    Assumption(
        "gemm_output_coalesce_bytes_per_partition", _same(16 * 1024), "bytes",
        "A lowered matmul block whose outputs take at most this per partition stores them with "
        "one DMA (one ~1 us DMA latency per block, not per tile). The lowering's choice."),
    Assumption(
        "attention_head_sbuf_bytes_per_partition", _same(144 * 1024), "bytes",
        "SBUF per partition lowered flash attention keeps resident per head (K, V, backward the "
        "dK/dV sums); longer heads get the roofline. The lowering's choice; not published."),
    Assumption(
        "copy_piece_bytes", _same(4 << 20), "bytes",
        "A lowered HBM->HBM copy's DMAs move at most this: full rate ('larger than 32KiB' "
        "[Perf]) with several queues in parallel. The lowering's choice."),
    Assumption(
        "copy_split_min_bytes", _same(64 << 10), "bytes",
        "A smaller HBM->HBM copy stays on one core at LNC=2: the second core's DMA latency (~1 us, "
        "dma_fixed_latency_s) costs more than half of what it saves. The lowering's choice."),
    Assumption(
        "gather_rows_bytes_per_partition", _same(8192), "bytes",
        "A lowered gather/scatter block moves at most this per partition of indexed rows, inside "
        "the DMA's 2-16 KiB sweet spot [DMAbw]. The lowering's choice."),
    Assumption(
        "row_whole_max_elems", _same(4096), "elements",
        "Lowered row ops (softmax, norms) keep rows up to this long whole in SBUF; longer rows "
        "run in two passes over pieces, reading x twice. The lowering's choice."),
    Assumption(
        "row_piece_elems", _same(2048), "elements",
        "A row tile per partition: the pieces of a longer row, or as many short rows as fit; 8 KiB "
        "of FP32, inside the DMA's 2-16 KiB sweet spot [DMAbw]. The lowering's choice."),
    Assumption(
        "host_link_bytes_per_s", _same(50e9), "B/s",
        "Host <-> device copies cross PCIe; a Gen5 x16 link moves ~50 GB/s in practice. Not "
        "measured on a Neuron host; the device backend's first roofline assumed it."),
    Assumption(
        "eager_launch_s", {"trn1": 25e-6, "trn2": 25e-6, "trn3": 5e-6}, "s",
        "Start of one eager program (one op, or one AEE-fused group): TorchNeuron runs each eager "
        "op as a cached NEFF; the runtime release notes say Trn3 cut NEFF start overhead 'by "
        "20 us' [torchneuron-api §2.7, runtime.rst], so a Trn2 start costs more than that: Trn2 "
        "25 us, Trn3 5 us, Trn1 as Trn2. Charged once per program, so AEE fusion of n ops saves "
        "n - 1 starts."),
]}


def value(name: str, chip: str):
    """The assumed value of `name` for chip `chip` (trn1/trn2/trn3)."""
    return ASSUMPTIONS[name].values[chip]
