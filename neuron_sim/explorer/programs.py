"""A program the user simulated, seen as the profiler sees a lowered op's: `program_of_result`
wraps a Result in an OpProgram (neuron_sim/trace/op_program.py), finding its inputs, outputs and
spills from the order of its HBM accesses. A lowered op's OpProgram is made by the lowering
itself (`Timing.program`)."""

from __future__ import annotations

from ..program.ap import Memory
from ..trace.op_program import OpProgram, classify_dma


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
        reads, write, save, reload = classify_dma(prog, arg_of_tensor, outputs)
    return OpProgram(name, result, sbuf_peak, psum_peak, reads, write, save, reload)
