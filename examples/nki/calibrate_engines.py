"""Calibration through kernels: the published single-engine measurements (C15-C19) as NKI kernels.

    python examples/nki/calibrate_engines.py          # ~2 s

Each workload of ../shared/calibration/public.json that is not a matmul tutorial stage, written
as a kernel author would and measured from the instruction times the front end reports
(``nki.last_report().instruction_times()``), with the definitions of the ISA-level calibration
(neuron_sim/calibrate):

- C15  [4, 4096] BF16 HBM->SBUF: the DMA's data phase (Trn2).
- C16  [128, 128] BF16 HBM->SBUF, then a VectorE copy of it: per-engine data phase, and trigger
       to the start of the waiting VectorE instruction (Trn2).
- C17  dependent 1-element-per-partition activations: start-to-start interval (Trn1).
- C18  hardware-DGE DMAs: start-to-start interval on one queue (Trn2).
- C19  back-to-back matmuls after TensorE idled: first MultiplyMoving's utilisation (ii / busy)
       and the time until one runs at full rate (Trn2).

The last line is ``RESULT median_err=... max_err=... n=...`` over the asserted rows.
"""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim import calibrate


# ---- the kernels -------------------------------------------------------------------------------
@nki.jit
def dma_load(src):
    """C15: one HBM->SBUF load."""
    t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return src


@nki.jit
def dma_load_then_copy(src):
    """C16: a load and the VectorE instruction that waits for it."""
    t = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    u = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=u, src=t)
    out = nl.ndarray(src.shape, dtype=src.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=u)
    return out


@nki.jit
def activation_chain(x, steps=64):
    """C17: each activation reads the previous one's [128, 1] result (copy and exp alternate)."""
    a = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    b = nl.ndarray((x.shape[0], 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=x)
    for i in range(steps):
        src, dst = (a, b) if i % 2 == 0 else (b, a)
        nisa.activation(dst=dst, op=nl.exp if i % 2 else nl.copy, data=src)
    out = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=a)
    return out


@nki.jit
def hwdge_loads(src):
    """C18: src[i] ([128, 64]) into column block i of one SBUF tile, descriptors from hardware DGE."""
    n, P, F = src.shape
    dst = nl.ndarray((P, n, F), dtype=src.dtype, buffer=nl.sbuf)
    for i in range(n):
        nisa.dma_copy(dst=dst[:, i, :], src=src[i], dge_mode=nisa.dge_mode.hwdge)
    return src


@nki.jit
def matmul_burst(stationary, moving, steps=64):
    """C19: the same [128, 128] x [128, 512] matmul back to back, from an idle TensorE."""
    st = nl.ndarray(stationary.shape, dtype=stationary.dtype, buffer=nl.sbuf)
    mv = nl.ndarray(moving.shape, dtype=moving.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=st, src=stationary)
    nisa.dma_copy(dst=mv, src=moving)
    for _ in nl.affine_range(steps):
        acc = nl.ndarray((stationary.shape[1], moving.shape[1]), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=acc, stationary=st, moving=mv)
    return stationary


# ---- measurements ------------------------------------------------------------------------------
def _run(kernel, target, *args, numerics=False):
    nki.simulate(kernel, platform_target=target, numerics=numerics)(*args)
    return nki.last_report()


def c15_rows(pub):
    rep = _run(dma_load, "trn2", np.zeros((4, 4096), nl.bfloat16))
    (dma,) = rep.instruction_times(op="dma_copy")
    engines = rep.programs[0].cols["dma_engines"][dma.row]
    return [calibrate.Row(
        "C15", "ns", "trn2", pub["C15"]["result"]["ns"], dma.busy_ns, asserted=False,
        note=f"data phase; the front end spreads 4 partitions over {engines} engines (one per "
             f"partition, the core's default), {engines} x {dma.busy_ns:.0f} = "
             f"{engines * dma.busy_ns:.0f} engine-ns; NKI cannot ask for the measured single engine")]


def c16_rows(pub):
    rep = _run(dma_load_then_copy, "trn2", np.zeros((128, 128), nl.bfloat16), numerics=True)
    load = rep.instruction_times(op="dma_copy")[0]
    (copy,) = rep.instruction_times(op="tensor_copy")
    res = pub["C16"]["result"]
    return [calibrate.Row("C16", "per_engine_ns", "trn2", res["per_engine_ns"], load.busy_ns,
                          note="data phase of each of the 16 engines"),
            calibrate.Row("C16", "trigger_to_done_us", "trn2", res["trigger_to_done_us_approx"],
                          (copy.start_ns - load.start_ns) / 1e3,
                          note="trigger until the waiting VectorE copy starts")]


def c17_rows(pub):
    rep = _run(activation_chain, "trn1", np.ones((128, 1), np.float32), numerics=True)
    starts = [t.start_ns for t in rep.instruction_times(op="activation")]
    return [calibrate.Row("C17", "ii_ns", "trn1", pub["C17"]["result"]["ii_ns"],
                          float(np.diff(starts).mean()),
                          note="start-to-start of dependent 1-element activations")]


def c18_rows(pub):
    rep = _run(hwdge_loads, "trn2", np.zeros((64, 128, 64), nl.bfloat16))
    per_queue = {}
    for t in rep.instruction_times(op="dma_copy"):
        per_queue.setdefault(t.stream, []).append(t.start_ns)
    ii = float(np.mean([d for s in per_queue.values() for d in np.diff(s)]))
    return [calibrate.Row("C18", "ns", "trn2", pub["C18"]["result"]["ns"], ii,
                          note=f"start-to-start on one queue ({len(per_queue)} DGE queues); the "
                               "600 ns input comes back: a consistency check")]


def c19_rows(pub):
    rep = _run(matmul_burst, "trn2", np.zeros((128, 128), nl.bfloat16),
               np.zeros((128, 512), nl.bfloat16))
    mm = [t for t in rep.instruction_times(op="nc_matmul") if t.kind == "multiply_moving"]
    full = [t for t in mm if t.busy_ns <= t.ii_ns * (1 + 1e-9)]
    ramp_ns = full[0].start_ns - mm[0].start_ns if full else float("inf")
    res = pub["C19"]["result"]
    return [calibrate.Row("C19", "initial_util", "trn2", res["initial_util"],
                          mm[0].ii_ns / mm[0].busy_ns),
            calibrate.Row("C19", "ramp_us", "trn2", res["ramp_us"], ramp_ns / 1e3,
                          note="burst start until a MultiplyMoving runs at full rate")]


CASES = {"C15": c15_rows, "C16": c16_rows, "C17": c17_rows, "C18": c18_rows, "C19": c19_rows}


def rows():
    pub = calibrate.published()
    return [r for fn in CASES.values() for r in fn(pub)]


def main():
    print(calibrate.format_table(rows()))


if __name__ == "__main__":
    main()
