"""OpProgram: a simulated program kept for the profiler, with where its DMA bytes went.

The lowering makes one for every op it lowers (`neuron_sim.lower.lower_op` puts it in
`Timing.program`, from the program it times, so nothing is lowered twice); `program_of_result`
makes one for a program the user simulated, finding its inputs, outputs and spills from the order
of its HBM accesses. `classify_dma` splits the HBM traffic of a program built with operands kept:

- reads of an op argument: by argument position (`read_bytes_by_arg`); the caller decides which
  are weights or intermediates of its region;
- writes of an op output: `write_bytes`;
- a DMA writing an HBM tensor that is neither argument nor output and a later DMA reading it
  back: spill save and spill reload (`spill_save_bytes`, `spill_reload_bytes`).

Big ops are built with a bounded number of identical blocks and extrapolated by the lowering
(`repeats`); the lowering makes the byte classes, model FLOPs and transpose time the op's."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engines import Engine
from ..program.ap import Memory


@dataclass
class OpProgram:
    name: str
    result: object                      # neuron_sim.Result of the representative program
    sbuf_peak_bytes_per_partition: int
    psum_peak_bytes_per_partition: int
    read_bytes_by_arg: dict = field(default_factory=dict)   # arg index -> HBM bytes read
    write_bytes: float = 0.0
    spill_save_bytes: float = 0.0
    spill_reload_bytes: float = 0.0
    repeats: list = field(default_factory=list)             # (blocks per core, blocks emitted)
    time_scale: float = 1.0             # the op's time over the program's
    flops: float | None = None          # the op's TensorE FLOPs; None: the program's

    @property
    def extrapolated(self) -> bool:
        return any(r > e for r, e in self.repeats)

    @property
    def model_flops(self) -> float:
        """The op's nc_matmul* FLOPs (model FLOPs): its TensorE FLOPs in the program's share."""
        mm, total = self.result.matmul_flops, float(self.result.program.cols["flops"].sum())
        return mm if self.flops is None else self.flops * (mm / total) if total else 0.0

    @property
    def transpose_ns(self) -> float:
        """The op's TensorE occupancy of nc_transpose instructions (Explorer's transpose share)."""
        r = self.result
        idx = [i for i, n in enumerate(r.program.opnames) if "transpose" in n]
        if not idx:
            return 0.0
        m = np.isin(r.program.cols["op"], idx) & (r.program.cols["engine"] == Engine.TENSOR)
        return float(r.busy_ns[m].sum()) * self.time_scale


def classify_dma(program, arg_of_tensor: dict, outputs: set) -> tuple:
    """(read bytes by arg, write bytes, spill save, spill reload) of a program built with operands
    kept. arg_of_tensor: HBM tensor id -> argument index; outputs: HBM tensor ids of outputs."""
    reads, write, save, reload = {}, 0.0, 0.0, 0.0
    written_scratch = set()
    c = program.cols
    for i, e in enumerate(program.emits or ()):
        if e is None or e.dma is None:
            continue
        nbytes = float(c["dma_bytes"][i])
        src = e.reads[0].tensor if e.reads else None
        dst = e.writes[0].tensor if e.writes else None
        if src is not None and src.memory == Memory.HBM:
            if src.id in arg_of_tensor:
                j = arg_of_tensor[src.id]
                reads[j] = reads.get(j, 0.0) + nbytes
            elif src.id in written_scratch:
                reload += nbytes
            elif src.id not in outputs:
                reads[-1] = reads.get(-1, 0.0) + nbytes      # an HBM tensor nobody named
        if dst is not None and dst.memory == Memory.HBM:
            if dst.id in outputs or dst.id in arg_of_tensor:   # in-place ops write an argument
                write += nbytes
            else:
                save += nbytes
                written_scratch.add(dst.id)
    return reads, write, save, reload


def program_of_result(result, name: str = "program", sbuf_peak: int = 0, psum_peak: int = 0):
    """An OpProgram around a Result the user simulated (a ProgramBuilder program: operands are
    kept by default, so spills are found; every other HBM read counts as argument 0)."""
    prog = result.program
    # Without argument names: HBM tensors only read are inputs, only written are outputs,
    # written then read back are spills.
    first, read_after_write = {}, set()
    for e in prog.emits or ():
        if e is None or e.dma is None:
            continue
        src = e.reads[0].tensor if e.reads else None
        dst = e.writes[0].tensor if e.writes else None
        if src is not None and src.memory == Memory.HBM:
            if first.get(src.id) == "w":
                read_after_write.add(src.id)
            first.setdefault(src.id, "r")
        if dst is not None and dst.memory == Memory.HBM:
            first.setdefault(dst.id, "w")
    arg_of_tensor = {t: 0 for t, k in first.items() if k == "r"}
    outputs = {t for t, k in first.items() if k == "w" and t not in read_after_write}
    # a tensor first written then read is scratch: classify_dma finds it
    return OpProgram(name, result, sbuf_peak, psum_peak,
                     *classify_dma(prog, arg_of_tensor, outputs))
