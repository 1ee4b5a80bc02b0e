"""simulate(program) -> Result: validate, pack the chip's timing parameters, run the numba kernel
(or the Python reference), turn a deadlock into DeadlockError naming the engines, and summarise."""

from __future__ import annotations

import numpy as np

from .. import config
from ..engines import N_COMPUTE_STREAMS, Engine, stream_name
from ..errors import DeadlockError, ProgramError
from ..hardware import Chip, get_chip
from ..trace.summary import Result
from . import reference as _ref


def timing_params(chip: Chip) -> np.ndarray:
    """The kernel's parameter vector (order: reference.PARAM_NAMES)."""
    return np.array([
        chip.cross_engine_semaphore_latency_s * 1e9,
        chip.dma_fixed_latency_s * 1e9,
        chip.tensor_didt_initial_util if chip.has_tensor_didt_throttle else 1.0,
        max(chip.tensor_didt_ramp_s * 1e9, 1e-9),
        chip.tensor_didt_reset_idle_s * 1e9,
        chip.dma_engines_per_core,
        N_COMPUTE_STREAMS + chip.dma_queues_per_engine,
    ], dtype=np.float64)


def kernel_args(program, chip: Chip, wide: bool = True):
    """The in-order kernel's arguments; the integer columns as int64 for the Python reference
    (`wide`), else in their own narrow types: no copies, less memory to stream through."""
    c = program.cols
    i = (lambda x: x.astype(np.int64)) if wide else (lambda x: x)
    return (i(c["stream"]), i(c["kind"]), c["ii_ns"], c["lat_ns"], program.dep_ptr,
            program.dep_idx, c["dma_engine_ns"], c["dma_hbm_ns"], c["dma_issue_ns"],
            i(c["dma_engines"]), i(c["dma_engine0"]), program.not_before, timing_params(chip))


# The scheduling pass's window: how many not-yet-issued instructions of a queue it looks at.
# The compiler schedules a whole unrolled loop body; what bounds the reordering in practice is
# the buffers (a later iteration's tile waits for the reuse of its buffer), not the window.
# TensorE keeps program order: whether a LoadStationary can be skipped is decided in it.
SCHEDULE_WINDOW = 8


def scheduled(program, chip: Chip, reference: bool = False, orders: bool = True):
    """The scheduling pass: (order, sptr, after, start, end, dstart, busy), each stream's issue
    order as CSR by stream, the order edges it added (after[x] >= 0: x starts no earlier than
    that DMA, which it was held back for) and the times they give; None when it finds no order
    (a dependency cycle through the windows: the program-order run then reports the deadlock).
    orders=False: the kernel may give order and after as None (copies saved)."""
    from ..kernels.schedule import list_schedule
    a = kernel_args(program, chip, wide=False)     # the in-order columns plus the order edges
    window = np.full(int(a[-1][6]), SCHEDULE_WINDOW, np.int64)   # params[6]: the stream count
    window[int(Engine.TENSOR)] = 1
    args = a[:6] + program.order_edges() + a[6:] + (window,)
    if reference:
        status, *res = _ref.list_schedule(*args)
    else:
        status, *res = list_schedule(*args, orders=orders)
    if status != 0:
        return None
    order, sptr, after, *times = res
    return (None if order is None else np.asarray(order, np.int64), np.asarray(sptr, np.int64),
            None if after is None else np.asarray(after, np.int64),
            *(np.asarray(x, np.float64) for x in times))


def run_kernel(program, chip: Chip, reference: bool = False, schedule: bool = True):
    if schedule:
        res = scheduled(program, chip, reference, orders=False)
        if res is not None:
            return res[3:]
    if reference:
        status, start, end, dstart, busy, stuck = _ref.schedule(*kernel_args(program, chip))
        start, end, dstart, busy = (np.asarray(x, np.float64) for x in (start, end, dstart, busy))
    else:
        from ..kernels.timing import schedule as in_order
        status, start, end, dstart, busy, stuck = in_order(*kernel_args(program, chip, False))
    if status != 0:
        raise _deadlock(program, list(stuck))
    return start, end, dstart, busy


def _deadlock(program, stuck) -> DeadlockError:
    engines, parts = [], []
    for s, i in enumerate(stuck):
        if i < 0:
            continue
        engines.append(stream_name(s))
        waits = [int(d) for d in program.deps_of(i)]
        waited = ", ".join(f"{d} ({program.opname(d)} on {stream_name(program.stream[d])})"
                           for d in waits)
        parts.append(f"{stream_name(s)} at instruction {i} ({program.opname(i)}) waits for "
                     f"{waited}")
    return DeadlockError(engines, "; ".join(parts) +
                         ". Each waits for an instruction queued behind another waiter: reorder "
                         "the instructions or fix the semaphore counts")


def simulate(program, chip: Chip | str | None = None, *, reference: bool | None = None,
             model_flops: float | None = None, schedule: bool = True) -> Result:
    """Time `program` on one NeuronCore of its chip. `chip`, if given, must be the chip the
    program was built for (costs are chip-specific). `reference=True` runs the pure-Python model
    (default: setting NEURON_SIM_REFERENCE). `model_flops` feeds MFU (default: the FLOPs of the
    matmul instructions). `schedule=False` times program order (no scheduling pass)."""
    pchip = program.chip
    if chip is not None:
        c = get_chip(chip)
        if c.name != pchip.name:
            raise ProgramError(f"program was built for {pchip.name}, asked to time it on {c.name}; "
                               f"rebuild it with ProgramBuilder({c.name!r})")
    program.validate()
    if reference is None:
        reference = config.get("NEURON_SIM_REFERENCE")
    start, end, dstart, busy = run_kernel(program, pchip, reference, schedule)
    return Result(program, pchip, start, end, dstart, busy, model_flops)


def simulate_cores(programs, meetings, *, reference: bool | None = None) -> list[Result]:
    """Time the programs of the physical cores of one launch (an LNC=2 pair), each on its own
    core's model, where they meet: meetings[c] = (signals, waits), row numbers of program c in
    program order; the k-th meeting of every program is one rendezvous (nisa.core_barrier,
    nisa.sendrecv). Wait row k of a core starts no earlier than the latest signal row k of the
    other cores ends plus the latency of that remote semaphore write (chip
    core_pair_semaphore_latency_s, an assumption), so the core that arrives first idles until
    the other does. Found in rounds: each times every program with the waits the last round's
    signal times give. Meeting k's signals depend only on the meetings before it, so round k
    settles meeting k: one round per meeting at most, after the first (no waits)."""
    counts = {len(s) for s, _ in meetings}
    if len(counts) > 1:
        raise ProgramError(f"the programs meet {sorted(len(s) for s, _ in meetings)} times: "
                           "each core_barrier/sendrecv needs its counterpart on every core")
    sem_lat = programs[0].chip.core_pair_semaphore_latency_s * 1e9
    for p in programs:
        p.not_before = None
    results = [simulate(p, reference=reference) for p in programs]
    for _ in range(counts.pop() if counts else 0):
        arrive = np.array([r.end_ns[np.asarray(s, np.int64)] for r, (s, _) in
                           zip(results, meetings)]).reshape(len(programs), -1)
        changed = False
        for c, (p, (_, waits)) in enumerate(zip(programs, meetings)):
            release = np.delete(arrive, c, axis=0).max(axis=0) + sem_lat
            nb = np.zeros(len(p)) if p.not_before is None else p.not_before.copy()
            nb[np.asarray(waits, np.int64)] = release
            if p.not_before is None or not np.array_equal(nb, p.not_before):
                p.not_before, changed = nb, True
        if not changed:
            break
        results = [simulate(p, reference=reference) for p in programs]
    return results
