"""`Program`: an ISA program as columns (struct of arrays), cheap to build and to hand to the numba
timing kernel at >= 1M instructions. One row per instruction, in program order.

Columns (all NumPy arrays of length n):
  op         int16   index into `opnames`
  engine     int8    Engine (TENSOR..SYNC, DMA)
  stream     int16   in-order queue: engine for 0..4, 5 + q for DMA queue q
  kind       int8    Kind (GENERIC, LOAD_STATIONARY, MULTIPLY_MOVING, DMA)
  ii_ns      float64 occupancy of the engine (unthrottled)
  lat_ns     float64 extra latency until dependents may start
  flops      float64 TensorE FLOPs (for HFU)
  dma_bytes, dma_engine_ns, dma_hbm_ns, dma_issue_ns   float64
  dma_engines, dma_engine0                             int16
  dma_dir    int8    DmaDir or -1
  dep_ptr    int64 (n+1), dep_idx int64: CSR list of instructions each row waits for
  ord_ptr, ord_idx (optional): same-stream WAR/WAW pairs, for the scheduling pass
  not_before (optional): float64 per row, the earliest start (a wait for another core)
`emits` keeps each instruction's operands for the semantics (None for bulk-made programs)."""

from __future__ import annotations

from dataclasses import dataclass
from operator import is_

import numpy as np

from ..engines import ENGINE_NAMES, N_COMPUTE_STREAMS, Engine, Kind
from ..errors import ProgramError

COLUMNS = {
    "op": np.int16, "engine": np.int8, "stream": np.int16, "kind": np.int8,
    "ii_ns": np.float64, "lat_ns": np.float64, "flops": np.float64,
    "dma_bytes": np.float64, "dma_engine_ns": np.float64, "dma_hbm_ns": np.float64,
    "dma_issue_ns": np.float64, "dma_engines": np.int16, "dma_engine0": np.int16,
    "dma_dir": np.int8,
}

_HOMED = (Kind.LOAD_STATIONARY, Kind.MULTIPLY_MOVING, Kind.DMA)   # kinds bound to one engine
_HOME = np.full(256, -1, np.int8)       # by a kind's byte: the engine it must run on, -1: any
_HOME[[int(k) for k in _HOMED]] = [int(Engine.TENSOR), int(Engine.TENSOR), int(Engine.DMA)]
_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
_MAX = np.maximum.reduce


@dataclass
class Program:
    chip: object
    cols: dict
    dep_ptr: np.ndarray
    dep_idx: np.ndarray
    opnames: list
    emits: list | None = None
    tensors: list | None = None
    name: str = "program"
    # Same-stream write-after-read/write pairs (CSR like deps): program order keeps them on an
    # in-order queue; the scheduling pass must keep them when it reorders a queue.
    ord_ptr: np.ndarray | None = None
    ord_idx: np.ndarray | None = None
    # Per row, the earliest start the timing model may give it (ns; None: 0): where a row waits
    # for another core (timing.simulate.simulate_cores sets it).
    not_before: np.ndarray | None = None

    def order_edges(self) -> tuple[np.ndarray, np.ndarray]:
        if self.ord_ptr is None:
            return np.zeros(len(self) + 1, np.int64), np.zeros(0, np.int64)
        return self.ord_ptr, self.ord_idx

    def __len__(self) -> int:
        return int(self.cols["op"].shape[0])

    def __getattr__(self, item):
        cols = self.__dict__.get("cols")
        if cols is not None and item in cols:
            return cols[item]
        raise AttributeError(item)

    def deps_of(self, i: int) -> np.ndarray:
        return self.dep_idx[self.dep_ptr[i]:self.dep_ptr[i + 1]]

    def opname(self, i: int) -> str:
        return self.opnames[int(self.cols["op"][i])]

    def counts(self) -> dict:
        """Instruction count per op name."""
        ops, n = np.unique(self.cols["op"], return_counts=True)
        return {self.opnames[int(o)]: int(c) for o, c in zip(ops, n)}

    def validate(self) -> None:
        """Check the columns, the dependency CSR and each row's kind against its engine. A
        program passes once: its arrays are kept (`_checked`) and a later call (simulate()
        after the builder's own) returns at once while the same arrays are there; a column or
        dependency array set anew is checked again. What keeps the timing kernels inside their
        arrays (dependency indexes, streams; they compile without bounds checks) is checked on
        every call, as an array may have been edited in place since."""
        cols, ptr, idx = self.cols, self.dep_ptr, self.dep_idx
        arrays = (ptr, idx, *[cols.get(k) for k in COLUMNS])
        checked = self.__dict__.get("_checked")
        if checked is not None and all(map(is_, arrays, checked)):
            self._check_indexes(ptr, idx, cols["stream"])
            return
        n = len(self)
        want = (n,)
        for k, c in zip(COLUMNS, arrays[2:]):
            if c is None or c.shape != want:
                raise ProgramError(f"column {k!r} missing or not of length {n}")
        self._check_indexes(ptr, idx, cols["stream"])
        self._check_kinds(cols["engine"], cols["kind"])
        self.__dict__["_checked"] = arrays

    @staticmethod
    def _check_kinds(engine, kind) -> None:
        # The timing kernels keep the stationary buffer and the dI/dt throttle for TensorE only
        # and move data only for DMA rows: any other pairing would be timed as something else.
        # One table look-up per row (each kind's home engine, -1: any) finds a wrong pairing;
        # a kind column of another width (not made by the builder) takes the pass per kind.
        if kind.dtype.itemsize == 1:
            home = _HOME[kind.view(np.uint8)]
            suspect = kind.size and np.count_nonzero((home != engine) & (home >= 0))
        else:
            suspect = True
        if suspect:
            for k in _HOMED:
                h = int(_HOME[int(k)])
                wrong = np.flatnonzero((kind == int(k)) & (engine != h))
                if wrong.size:
                    i = int(wrong[0])
                    raise ProgramError(
                        f"instruction {i} is a {k.name} on "
                        f"{ENGINE_NAMES[Engine(engine[i])]}, but {k.name} runs on "
                        f"{ENGINE_NAMES[Engine(h)]} only ({wrong.size} such rows); put it on "
                        f"{ENGINE_NAMES[Engine(h)]} or give it kind=Kind.GENERIC")

    def _check_indexes(self, ptr, idx, stream) -> None:
        """The dependency CSR and the streams: what the timing kernels index arrays with."""
        n = stream.shape[0]
        if ptr.shape != (n + 1,) or ptr[0] != 0 or ptr[-1] != idx.shape[0] or \
                (n > 1 and (ptr[1:] < ptr[:-1]).any()):
            raise ProgramError("dep_ptr is not a CSR index over dep_idx (it must start at 0, "
                               "never decrease and end at len(dep_idx))")
        # one pass each: a negative number read as unsigned is past every limit
        if idx.size and _MAX(idx.view(_UNSIGNED[idx.dtype.itemsize])) >= n:
            raise ProgramError("a dependency index points outside the program")
        streams = N_COMPUTE_STREAMS + self.chip.dma_queues_per_engine
        if n and _MAX(stream.view(_UNSIGNED[stream.dtype.itemsize])) >= streams:
            i = int(np.flatnonzero((stream < 0) | (stream >= streams))[0])
            raise ProgramError(
                f"instruction {i} is on stream {int(stream[i])}; {self.chip.name} has streams "
                f"0..{streams - 1} (engines 0..{N_COMPUTE_STREAMS - 1}, then one per DMA queue): "
                f"give DMA rows a dma_queue in 0..{self.chip.dma_queues_per_engine - 1}")

    @classmethod
    def from_columns(cls, chip, *, engine, ii_ns, lat_ns=None, kind=None, deps=None,
                     dma_queue=None, opnames=None, op=None, **extra) -> "Program":
        """Build a program directly from arrays (benchmarks, lowering of huge programs).
        `deps` is (dep_ptr, dep_idx) or None. DMA rows need dma_engine_ns etc. in `extra`."""
        engine = np.asarray(engine, np.int8)
        n = engine.shape[0]
        cols = {k: np.zeros(n, dt) for k, dt in COLUMNS.items()}
        cols["engine"][:] = engine
        cols["ii_ns"][:] = ii_ns
        if lat_ns is not None:
            cols["lat_ns"][:] = lat_ns
        if kind is not None:
            cols["kind"][:] = kind
        else:
            cols["kind"][:] = np.where(engine == Engine.DMA, Kind.DMA, Kind.GENERIC)
        q = np.zeros(n, np.int16) if dma_queue is None else np.asarray(dma_queue, np.int16)
        queues = chip.dma_queues_per_engine
        bad = np.flatnonzero((engine == Engine.DMA) & ((q < 0) | (q >= queues)))
        if bad.size:
            raise ProgramError(f"dma_queue {int(q[bad[0]])} of instruction {int(bad[0])} is not "
                               f"one of {chip.name}'s DMA queues: give 0..{queues - 1}")
        cols["stream"][:] = np.where(engine == Engine.DMA, N_COMPUTE_STREAMS + q, engine)
        cols["dma_dir"][:] = -1
        if op is not None:
            cols["op"][:] = op
        for k, v in extra.items():
            if k not in cols:
                raise ProgramError(f"unknown column {k!r}")
            cols[k][:] = v
        if deps is None:
            dep_ptr, dep_idx = np.zeros(n + 1, np.int64), np.zeros(0, np.int64)
        else:
            dep_ptr, dep_idx = (np.asarray(deps[0], np.int64), np.asarray(deps[1], np.int64))
        p = cls(chip, cols, dep_ptr, dep_idx, list(opnames or ["instr"]))
        p.validate()
        return p
