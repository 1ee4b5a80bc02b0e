"""LowerCtx: what a rule writes its program through.

It wraps a ProgramBuilder and adds what every op family needs:
- operands: a TensorSpec lives in HBM, or (inside a fused sequence) stays resident in SBUF after
  the op that produced it; `load` skips the DMA for a resident tensor, `store` skips the HBM write
  for an output nobody outside the sequence reads (`live_outputs`);
- the canonical element-wise layout: a tensor of N elements viewed as [p = min(P, N), N / p]
  (P: the chip's partitions, `ctx.P`)
  and streamed in chunks of [p, F] (F chosen so each DMA moves 2-16 KiB per partition, the range
  where the DMA engines approach their sustained rate [DMAbw]: chip.stream_chunk_*) through
  triple-buffered tiles;
- the row layout for row-wise ops (softmax, norms): rows spread over the P partitions, several
  rows per partition side by side on the free axis;
- `repeat(R)`: the representative-repeat rule (see README) and the LNC split: each physical core of
  a logical core takes ceil(R / lnc) of the R identical blocks.

Everything here is timing-only: instructions carry the right operand sizes, engines and
dependencies; the values they would compute are irrelevant (numerics come from the CPU kernels)."""

from __future__ import annotations

from math import ceil

from ..errors import CapacityError
from ..numerics.formats import itemsize
from ..program import ProgramBuilder
from ..program.ap import AccessPattern, Memory, Tensor, as_ap
from .assumptions import REPEAT_CAP
from .spec import TensorSpec

BUFS = 3  # tiles per role in flight: load / compute / store overlap
RULE_CAPS = True  # honour a rule's lower repeat cap (tests turn it off to build ops in full)


def chunk_elems(chip, cols: int, dtype: str, streams: int = 3) -> int:
    """Free elements per chunk: chip.stream_chunk_min..max_bytes_per_partition and at least ~4
    chunks when big, and small enough that `streams` triple-buffered tiles plus two FP32
    temporaries fit chip.stream_sbuf_bytes_per_partition."""
    isz = max(itemsize(dtype), 1)
    lo = int(chip.stream_chunk_min_bytes_per_partition // isz)
    hi = int(chip.stream_chunk_max_bytes_per_partition // isz)
    return max(1, min(cols, chunk_fit(chip, dtype, streams), max(lo, min(hi, ceil(cols / 4)))))


def chunk_fit(chip, dtype: str, streams: int = 3) -> int:
    """The most free elements per chunk for which `streams` triple-buffered tiles plus two FP32
    temporaries fit chip.stream_sbuf_bytes_per_partition."""
    isz = max(itemsize(dtype), 1)
    return int(chip.stream_sbuf_bytes_per_partition // (BUFS * streams * isz + 2 * 2 * 4))


def flat_shape(numel: int, P: int) -> tuple:
    """The flat plan of `numel` elements over P partitions: [p = min(P, numel), ceil(numel / p)]."""
    p = max(1, min(P, int(numel)))
    return p, ceil(int(numel) / p)


def row_shape(t: TensorSpec, P: int) -> tuple:
    """The row plan's [p, cols] of t: ceil(rows / p) rows of its last dim per partition."""
    c = max(t.shape[-1], 1) if t.ndim else 1
    p, per_part = flat_shape(t.numel // c, P)
    return p, per_part * c


def hbm_elems(t: TensorSpec, P: int) -> int:
    """The elements of t's HBM tensor: its span, padded to the flat plan [p, ceil(numel / p)]
    and the row plan (ceil(rows / p) rows of its last dim per partition): a numel (rows) that
    is no multiple of p is rounded up, and the last chunk's (block's) DMAs move the rounding
    (timing-equivalent to the partial tail a kernel issues); padded, they stay inside the
    tensor. A strided tensor's plans take twice the room (LowerCtx.hbm_pieces: runs with
    one-element gaps)."""
    span = 1 + sum((n - 1) * abs(s) for n, s in zip(t.shape, t.strides) if n > 0)
    p, cols = flat_shape(t.numel, P)
    pr, row_cols = row_shape(t, P)
    plan = max(p * cols, pr * row_cols)
    return max(span, plan if t.is_contiguous or t.numel <= 1 else 2 * plan, 1)


def cores_of_work(blocks, lnc) -> float:
    """How many times this core's work the logical core does in all, from the (blocks in all,
    blocks of this core) of each repeat()/split() (`LowerCtx._blocks`): `lnc` when every
    physical core gets as many blocks as this one, less when the blocks do not divide (one
    block on LNC=2: the second core idles). Taken from the largest repeat()."""
    if not blocks:
        return float(lnc)
    total, per_core = max(blocks, key=lambda b: b[1])
    return min(float(lnc), total / per_core)


class LowerCtx:
    def __init__(self, chip, lnc: int = 1, cap: int = REPEAT_CAP, *, live=None,
                 consumed_later=frozenset(), last_read=None, read_plans=None, name="op",
                 keep_operands=False, full=False):
        self.b = ProgramBuilder(chip, name=name, keep_operands=keep_operands)
        self.chip = self.b.chip
        self.P = self.chip.sbuf_partitions    # partitions: the rows of every tile
        self.lnc = max(1, int(lnc))
        self.cap = cap
        self.full = full                      # every block emitted (semantics.py runs the op)
        self.placed: dict = {}                # full: key -> [(HBM offset, rows, cols, first
        #   element, row stride)] of output blocks stored away from their row-major place
        self.live = live                      # None: every output is stored to HBM
        self.consumed_later = consumed_later  # keys of outputs a later op of the sequence reads
        self.last_read = last_read or {}      # key -> index of the last op that reads it
        self.read_plans = read_plans or {}    # key -> [p, cols] its readers read other than flat
        self.repeats: list = []               # (R per core, emitted) of each repeat() call
        self._blocks: list = []               # (R in total, R per core) of each repeat() call
        self._hbm: dict = {}
        self._resident: dict = {}             # key -> SBUF Tensor [P, cols]
        self._resident_bytes = 0
        self._pool: dict = {}
        self._outgrown: list = []             # pool tiles replaced by a larger one this op
        self._stored_now: set = set()         # resident copies in_hbm stored this op
        self._seq = 0
        self.ops_done = 0                     # ops lowered so far: a stable per-op tag
        self.result = None                    # the simulated program, once api._measure ran
        self._replayed: list = []             # rows of replayed ops not appended yet (replay.py)
        self._replayed_rows = 0
        self._headroom: list | None = None    # replay._record: _make_resident's questions

    # ---- identity and placement ----------------------------------------------------------------
    @staticmethod
    def key(t: TensorSpec):
        return ("id", t.id) if t.id is not None else ("layout",) + t.layout_key

    def hbm(self, t: TensorSpec) -> Tensor:
        k = self.key(t)
        h = self._hbm.get(k)
        if h is None:
            h = self._hbm[k] = self.b.hbm(f"hbm{len(self._hbm)}", (hbm_elems(t, self.P),),
                                          t.dtype)
        return h

    def in_hbm(self, t: TensorSpec) -> Tensor:
        """t's HBM tensor for a read that does not use t's resident copy in place (another plan,
        or a rule reading HBM directly): a resident t whose store needs_store skipped is stored
        first, its flat plan's part (once per op; the dependency tracker orders the read after
        it), so the program never reads an HBM tensor nothing wrote."""
        r = self._resident.get(self.key(t)) if self._resident else None
        if r is not None and self.key(t) not in self._stored_now and not self.needs_store(t):
            self._stored_now.add(self.key(t))
            p, cols = self.flat_shape(t)
            self.b.dma_copy(AccessPattern(self.hbm(t), 0, p, 0, ((cols, 1),), cols),
                            r[0:p, 0:cols])
        return self.hbm(t)

    def flat_shape(self, t_or_numel) -> tuple:
        return flat_shape(t_or_numel.numel if isinstance(t_or_numel, TensorSpec) else t_or_numel,
                          self.P)

    # ---- representative repeats ---------------------------------------------------------------
    def repeat(self, total: int, cap: int | None = None) -> int:
        """How many of `total` identical blocks this core emits (see README). `cap` lowers the
        limit for rules whose blocks hold many instructions; the second (half-size) build of an
        extrapolation halves it too."""
        per_core = self.split(total)
        limit = REPEAT_CAP if cap is None or not RULE_CAPS else max(2, min(int(cap), REPEAT_CAP))
        if self.cap < REPEAT_CAP:
            limit = max(1, limit // 2)
        n = per_core if self.full else min(per_core, limit)
        self.repeats.append((per_core, n))
        return n

    def split(self, total: int) -> int:
        """How many of `total` pieces this physical core takes when a logical core's pair shares
        them (ceil(total / lnc)), all emitted (no representative cap: for work that is already a
        few big instructions, such as HBM -> HBM copies). Counted by cores_of_work like repeat()."""
        total = max(int(total), 1)
        per_core = ceil(total / self.lnc)
        self._blocks.append((total, per_core))
        return per_core

    # ---- tiles ------------------------------------------------------------------------------
    def tile(self, role: str, shape, dtype, slot: int = 0, memory=Memory.SBUF,
             bufs: int = BUFS) -> Tensor:
        """A rotating buffer: the same allocation for (role, dtype, slot % bufs), so reuse
        orders itself through the builder's WAR/WAW dependencies like a multi-buffered kernel.
        A smaller shape (a remainder tile: the last chunk, N panel or M tile) is a view of that
        buffer, as in a kernel, not bytes of its own: keyed by shape, a full panel plus its
        remainder needed both in SBUF at once (issue 19: a 2048 -> 6144 projection over 100
        tokens ran out of SBUF). A larger shape gets a new buffer."""
        shape = tuple(shape)
        k = (role, dtype, slot % bufs, memory)
        t = self._pool.get(k)
        if t is not None and t.shape == shape:      # the buffer itself (made for this dtype)
            return t
        if t is None or not t.fits(shape, dtype):
            if t is not None:                    # still released by end_op
                self._outgrown.append(t)
            mk = self.b.sbuf if memory == Memory.SBUF else self.b.psum
            t = self._pool[k] = mk(f"{role}{len(self._pool) + len(self._outgrown)}", shape, dtype)
        return t.view(shape)

    def tmp(self, role: str, shape, dtype, slot: int = 0) -> Tensor:
        """A double-buffered temporary between engines (loads/stores get BUFS buffers)."""
        return self.tile(role, shape, dtype, slot, bufs=2)

    def end_op(self):
        """Release the op's streaming tiles (resident intermediates stay)."""
        for t in (*self._pool.values(), *self._outgrown):
            self.b.free(t)
        self._pool.clear()
        self._outgrown.clear()
        self._stored_now.clear()
        self.ops_done += 1

    def free_dead(self, index: int):
        """After op `index` of a sequence: release the resident intermediates no later op reads
        (`last_read`), so their SBUF goes to the next ones, as a compiler's memory planner
        reuses it; the builder orders the reuse after their last readers."""
        for k in [k for k in self._resident if self.last_read.get(k, -1) <= index]:
            self._release(k)

    def _release(self, k):
        r = self._resident.pop(k)
        self._resident_bytes -= r.shape[1] * itemsize(r.dtype)
        self.b.free(r)

    def to_hbm(self, t: TensorSpec) -> Tensor:
        """t's HBM tensor for DMA writes after compute wrote t (a scatter into a zeroed output):
        a resident copy is stored first and released, so later readers read HBM after those
        writes, not a copy they never reach."""
        h = self.in_hbm(t)
        if self.key(t) in self._resident:
            self._release(self.key(t))
        return h

    def tiles_named(self, prefix: str) -> int:
        """How many pool tiles of this op have a role starting with `prefix` (for distinct,
        deterministic roles; never object ids, whose values change from run to run)."""
        return sum(1 for k in self._pool if k[0].startswith(prefix))

    # ---- loads and stores in the flat chunk layout ----------------------------------------
    def hbm_pieces(self, t: TensorSpec, p: int, off: int, f: int):
        """HBM access of chunk [p, f] at free offset `off` of t's flat [p, cols] view, as
        [(access pattern, first free element, elements)]: one piece, or two when the chunk is
        not a whole number of a strided tensor's contiguous runs (the whole runs, then the
        partial one: the same descriptors, and each DMA moves exactly its SBUF slice).

        Addressed as the chunk-major order [chunk, p, f] (each chunk one contiguous range):
        the same descriptors and bytes as the row-major view, but chunk footprints do not
        overlap, so the builder orders only truly dependent accesses. A strided tensor is
        addressed as runs of its innermost contiguous extent (single elements when transposed)
        with one-element gaps: one descriptor per run (DMA cost grows accordingly), each
        partition's row in 2f elements, chunk-major in the twice-padded tensor (`hbm`), so
        the footprints stay disjoint and inside it (its real strides would reach strides[-1]
        times past its end)."""
        h = self.hbm(t)
        if t.is_contiguous or t.numel <= 1:
            return [(AccessPattern(h, 0, p, off * p, ((f, 1),), f), 0, f)]
        base, pstride = 2 * off * p, 2 * f
        run = min(t.shape[-1], f) if t.strides[-1] == 1 else 1
        whole, part = divmod(f, run)
        runs = AccessPattern(h, 0, p, base, ((whole, run + 1), (run, 1)), pstride)
        if not part:
            return [(runs, 0, f)]
        return [(runs, 0, whole * run), (AccessPattern(h, 0, p, base + whole * (run + 1),
                                                       ((part, 1),), pstride), whole * run, part)]

    def _chunk_dma(self, t: TensorSpec, tile, p: int, off: int, f: int, store: bool,
                   pieces=None):
        """The DMA(s) between chunk [p, f] of t in HBM and an SBUF tile (or access pattern);
        `pieces`: its HBM access when not hbm_pieces' (broadcast.LongRows)."""
        pieces = pieces or self.hbm_pieces(t, p, off, f)
        sb = as_ap(tile)
        last = None
        for hap, lo, n in pieces:
            s = sb if len(pieces) == 1 else self.cols(sb, p, lo, n)
            last = self.b.dma_copy(hap, s) if store else self.b.dma_copy(s, hap)
        return last

    @staticmethod
    def cols(t, p: int, off: int, n: int) -> AccessPattern:
        """Free-axis slice [p, off:off+n] of a Tensor or an AccessPattern."""
        a = as_ap(t)
        return AccessPattern(a.tensor, a.p_start, p, a.offset + off, ((n, 1),))

    def resident_ap(self, t: TensorSpec, p: int, off: int, f: int):
        """[p, f] of t's resident SBUF copy at free offset off; None when t is not resident or
        its resident layout cannot serve that shape: the caller then reads HBM, where `in_hbm`
        stores it first."""
        r = self._resident.get(self.key(t))
        if r is None:
            return None
        if not self._serves(r, p, f):
            self.in_hbm(t)
            return None
        off = min(off, r.shape[1] - f)
        return r[0:p, off:off + f]

    @staticmethod
    def _serves(r: Tensor, p: int, f: int) -> bool:
        """Whether resident copy r holds blocks of [p, f]."""
        return p <= r.shape[0] and f <= r.shape[1]

    def load(self, t: TensorSpec, p: int, cols: int, j: int, f: int, role="in", off=None):
        """Chunk j ([p, f] at free offset `off`, default j*f: pass it for a short last chunk)
        of input t into SBUF; a resident tensor is read in place. A broadcast input (fewer
        elements than the chunk plan) is loaded once, whole."""
        off = j * f if off is None else off
        ap = self.resident_ap(t, p, off, f)
        if ap is not None:
            return ap
        # a broadcast operand (fewer elements than the plan, not just a numel that is no multiple
        # of p): one small load, reused by every chunk
        if t.numel < p * cols and self.flat_shape(t) != (p, cols):
            fb = min(self.flat_shape(t)[1], f)
            tile = self.load_once(t, p, fb)
            return tile[0:p, 0:f] if fb >= f else tile.ap()
        tile = self.tile(role, (p, f), t.dtype, j)
        self._chunk_dma(t, tile, p, off, f, store=False)
        return tile

    def load_once(self, t: TensorSpec, p: int, n: int, at: int = 0):
        """t's n elements from element `at` on each of p partitions (one DMA, partition stride
        0), loaded at the op's first request and reused by its later chunks."""
        k = ("bcast", at) + self.key(t)
        tile = self._pool.get(k)
        if tile is None:
            tile = self._pool[k] = self.b.sbuf(f"b{len(self._pool)}", (p, n), t.dtype)
            self.b.dma_copy(tile, AccessPattern(self.in_hbm(t), 0, p, at, ((n, 1),), 0))
        return tile

    def load_chunk(self, t: TensorSpec, p: int, j: int, f: int, role="in", off=None,
                   pieces=None):
        """Chunk j ([p, f] at free offset `off`, default j*f) of t into SBUF, whatever t's size
        (`load` takes fewer elements for a broadcast); a resident tensor is read in place.
        `pieces`: as _chunk_dma's."""
        off = j * f if off is None else off
        ap = self.resident_ap(t, p, off, f)
        if ap is not None:
            return ap
        tile = self.tile(role, (p, f), t.dtype, j)
        self._chunk_dma(t, tile, p, off, f, store=False, pieces=pieces)
        return tile

    def out_tile(self, t: TensorSpec, p: int, cols: int, j: int, f: int, role="out", off=None):
        """Where the compute of chunk j of output t writes: straight into SBUF residency when a
        later op of the sequence reads t (and it fits), else a streaming tile. An in-place
        writer whose plan t's resident copy cannot serve stores and releases the copy first
        (to_hbm), so its chunks are stored and later readers read them from HBM."""
        k = self.key(t)
        if j == 0 and k in self.consumed_later:
            r = self._resident.get(k)
            if r is None:
                self._make_resident(t, p, cols)
            elif not self._serves(r, p, cols):
                self.to_hbm(t)
        ap = self.resident_ap(t, p, j * f if off is None else off, f)
        if ap is not None:
            return ap
        return self.tile(role, (p, f), t.dtype, j)

    def _make_resident(self, t, p, cols):
        """t's resident copy, [p, cols] from its writer's plan, made large enough for the flat
        plan (in_hbm stores that part) and the plans its readers read it in (`read_plans`:
        [128, 48] and [64, 96] for 64 rows of 96 read by a layer_norm): element-wise ops are
        indifferent to the layout, so a compiler writes the intermediate in its readers', and
        they read it in place (add -> layer_norm over 64 rows, or back). A [1, 4096] read by
        element-wise ops and matmuls only is [128, 32], not its row [1, 4096]."""
        p, cols = (max(a, b) for a, b in zip((p, cols), self.flat_shape(t)))
        read = self.read_plans.get(self.key(t))
        if read is not None:
            p, cols = max(p, read[0]), max(cols, read[1])
        nbytes = cols * itemsize(t.dtype)
        budget = min(self.chip.resident_sbuf_bytes_per_partition,
                     self.chip.sbuf_usable_bytes_per_partition
                     - self.chip.stream_sbuf_bytes_per_partition
                     - self.chip.resident_reserve_bytes_per_partition)
        fits = not self._resident_bytes + nbytes > budget
        if self._headroom is not None:
            self._headroom.append((nbytes, budget, fits))
        if not fits:
            return
        try:
            r = self.b.sbuf(f"res{len(self._resident)}", (p, cols), t.dtype)
        except CapacityError:
            return
        self._resident[self.key(t)] = r
        self._resident_bytes += nbytes

    def needs_store(self, t: TensorSpec) -> bool:
        """An output goes to HBM unless the caller said it is dead outside the sequence
        (`live_outputs`) AND no later op needs it from HBM (it is resident, or unread)."""
        if self.live is None or t.id is None:
            return True
        k = self.key(t)
        if k in self.live:
            return True
        return k in self.consumed_later and k not in self._resident

    def store(self, t: TensorSpec, tile, p: int, j: int, f: int, off=None, pieces=None):
        """Chunk j ([p, f] at free offset `off`, default j*f) of output t to HBM if needed;
        `pieces`: as _chunk_dma's."""
        if not self.needs_store(t):
            return None
        return self._chunk_dma(t, as_ap(tile), p, j * f if off is None else off, f, store=True,
                               pieces=pieces)

    def chunks(self, t: TensorSpec, streams: int = 3):
        """The flat chunk plan of t: (p, cols, f, n_chunks_total)."""
        p, cols = self.flat_shape(t)
        f = chunk_elems(self.chip, cols, t.dtype, streams)
        n = ceil(cols / f)
        f = ceil(cols / n)          # balanced chunks: extrapolation sees equal blocks
        return p, cols, f, ceil(cols / f)

    def chunked(self, t: TensorSpec, streams: int = 3):
        """chunks(t) with the representative repeat applied: (p, cols, f, [(j, fj)] of the
        chunks this core emits); chunk j starts at column j * f and has fj columns, fewer
        for the last one only when every chunk is emitted (representative ones are full)."""
        p, cols, f, total = self.chunks(t, streams)
        return p, cols, f, self.emitted(cols, f, total)

    def emitted(self, cols: int, f: int, total: int) -> list:
        """[(j, fj)] of the chunks of f columns (of cols, `total` chunks) this core emits: the
        last is shorter only when every chunk is emitted (representative ones are full)."""
        n = self.repeat(total)
        return [(j, min(f, cols - j * f) if n == total else f) for j in range(n)]

    def stream(self, out: TensorSpec, ins, body, outs=None, store=True, plan=None):
        """The element-wise skeleton: for each chunk, load every input, `body(ins_aps, out_aps,
        p, f, j)` emits the compute, store every output. `ins`: TensorSpecs streamed in the out
        layout (broadcasts handled), `outs`: outputs (default [out]). `plan`: a
        broadcast.Plan, whose chunks keep rows whole and which reads each broadcast operand
        at its elements' positions."""
        outs = outs or [out]
        if plan is None:
            p, cols, f, chunks = self.chunked(out, max(1, len(ins) + len(outs)))
        else:
            p, cols, f, chunks = plan.chunked(self)
        for j, fj in chunks:
            srcs, seen = [], {}
            off = j * f if plan is None else plan.off(j)
            for i, t in enumerate(ins):          # the same tensor twice (x * x) loads once
                k = self.key(t)
                if k not in seen:
                    seen[k] = self.load(t, p, cols, j, fj, role=f"in{i}", off=off) \
                        if plan is None else plan.load(self, i, t, j, fj)
                srcs.append(seen[k])
            dsts = [self.out_tile(o, p, cols, j, fj, role=f"out{i}", off=off)
                    for i, o in enumerate(outs)]
            body(srcs, dsts, p, fj, j)
            for o, d in zip(outs, dsts) if store else ():
                self.store(o, d, p, j, fj, off=off,
                           pieces=None if plan is None else plan.pieces(self, o, j, fj))
        self.end_op()

    # ---- row layout (softmax, norms, row reductions) ------------------------------------------
    def row_plan(self, rows: int, cols: int, dtype: str):
        """Rows over partitions, `r` rows per partition per block: (p, r, blocks). Each partition
        takes ceil(rows / p) rows (rounded up, as the flat plan rounds numel up to p * cols); the
        last block holds the rest when that is no multiple of r."""
        p = max(1, min(self.P, rows))
        per_part = ceil(rows / p)
        r = max(1, min(per_part, self.chip.row_piece_elems // max(cols, 1)))
        return p, r, ceil(per_part / r)

    def load_rows(self, t: TensorSpec, p: int, r: int, cols: int, j: int, role="in", rj=None):
        """Block j of rows: [p, rj * cols] at free offset j * r * cols (rows are contiguous runs
        of `cols`; rj, default r: the rows of a short last block)."""
        rj = r if rj is None else rj
        ap = self.resident_ap(t, p, j * r * cols, rj * cols)
        if ap is not None:
            return ap
        tile = self.tile(role, (p, rj * cols), t.dtype, j)
        self._chunk_dma(t, tile, p, j * r * cols, rj * cols, store=False)
        return tile
