"""The simulated program of one lowered op, kept whole for the profiler (the lowering's cache keeps
only a Timing): its Result, SBUF/PSUM peaks, and where its DMA bytes went.

`op_program(op, chip, lnc)` builds the same representative program `neuron_sim.lower.lower_op`
times (same rule, same repeat cap) with operands kept, simulates it and classifies every DMA:

- reads of an op argument: by argument position (`read_bytes_by_arg`); the caller decides which
  are weights or intermediates of its region;
- writes of an op output: `write_bytes`;
- a DMA writing an HBM tensor that is neither argument nor output and a later DMA reading it
  back: spill save and spill reload (`spill_save_bytes`, `spill_reload_bytes`).

Big ops are built with a bounded number of identical blocks and extrapolated by the lowering;
`time_scale` = Timing.total_ns / program total says how much longer the real op is, and byte
counts are scaled the same way (`byte_scale`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..engines import Engine
from ..program.ap import Memory
from ..timing import simulate


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
        import numpy as np
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


def op_program(op, chip, lnc: int = 1):
    """The representative program of `op` (a neuron_sim.lower.OpSpec), or None when no rule
    lowers it (the op is then timed by the roofline estimate and has no lanes)."""
    from ..lower.api import build_op
    from ..lower.context import LowerCtx
    from ..lower.registry import rule_for
    from ..lower.spec import TensorSpec

    if rule_for(op.name) is None:
        return None
    op, ctx = build_op(op, chip, lnc, keep_operands=True)
    prog = ctx.b.build()
    if len(prog) == 0:
        return None
    res = simulate(prog)
    arg_ids = {}
    for j, a in enumerate(op.args):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, TensorSpec):
                arg_ids[LowerCtx.key(t)] = j
    out_keys = {LowerCtx.key(t) for t in op.outputs if isinstance(t, TensorSpec)}
    arg_of_tensor = {h.id: arg_ids[k] for k, h in ctx._hbm.items() if k in arg_ids}
    outputs = {h.id for k, h in ctx._hbm.items() if k in out_keys}
    reads, write, save, reload = classify_dma(prog, arg_of_tensor, outputs)
    return OpProgram(op.name, res, ctx.b.sbuf_peak_bytes_per_partition,
                     ctx.b.psum_peak_bytes_per_partition, reads, write, save, reload,
                     list(ctx.repeats))


def program_of_result(result, name: str = "program", sbuf_peak: int = 0, psum_peak: int = 0):
    """An OpProgram around a Result the user simulated (a ProgramBuilder program: operands are
    kept by default, so spills are found; every other HBM read counts as argument 0)."""
    prog = result.program
    outputs = set()
    reads, write, save, reload = {}, 0.0, 0.0, 0.0
    if prog.emits:
        # Without argument names: HBM tensors only read are inputs, only written are outputs,
        # written then read back are spills.
        first, read_after_write = {}, set()
        for e in prog.emits:
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
        reads, write, save, reload = classify_dma(prog, arg_of_tensor, set())
        # classify_dma counted writes of never-read outputs as spill saves: move them back
        ws = _writes_to(prog, outputs)
        save -= ws
        write += ws
    return OpProgram(name, result, sbuf_peak, psum_peak, reads, write, save, reload)


def _writes_to(prog, ids) -> float:
    total = 0.0
    for i, e in enumerate(prog.emits or ()):
        if e is not None and e.dma is not None and e.writes and e.writes[0].tensor.id in ids:
            total += float(prog.cols["dma_bytes"][i])
    return total
