"""OpProgram: a simulated program kept for the profiler, with where its DMA bytes went.

The lowering makes one for every op it lowers (`neuron_sim.lower.lower_op` puts it in
`Timing.program`, from the program it times, so nothing is lowered twice); the explorer makes one
for a program the user simulated (`neuron_sim.explorer.program_of_result`). `classify_dma` splits
the HBM traffic of a program built with operands kept:

- reads of an op argument: by argument position (`read_bytes_by_arg`); the caller decides which
  are weights or intermediates of its region;
- writes of an op output: `write_bytes`;
- a DMA writing an HBM tensor that is neither argument nor output and a later DMA reading it
  back: spill save and spill reload (`spill_save_bytes`, `spill_reload_bytes`).

Big ops are built with a bounded number of identical blocks and extrapolated by the lowering
(`repeats`); the caller scales times and bytes by the op's Timing."""

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

    @property
    def extrapolated(self) -> bool:
        return any(r > e for r, e in self.repeats)

    @property
    def transpose_ns(self) -> float:
        """TensorE occupancy of nc_transpose instructions (Explorer's transpose share)."""
        r = self.result
        c = r.program.cols
        idx = [i for i, n in enumerate(r.program.opnames) if "transpose" in n]
        if not idx:
            return 0.0
        m = np.isin(c["op"], idx) & (c["engine"] == Engine.TENSOR)
        return float(r.busy_ns[m].sum())


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
