"""The published workloads of calibration/public.json written as ISA programs.

C1-C4 follow the loop structure of the NKI matmul tutorial [MMtut-old] kernel by kernel
(nki_matmul_tiled_, _hoist_load_, _block_free_dimension_, _fully_optimized_); C8 is the same
fully blocked kernel in FP32 as the kernel-optimisation tutorial's v5 [KOpt]. Tiles declared
inside a loop come from a small pool of buffers (`bufs`), as the compiler allocates them; the
dependency tracker then lets loads of the next iteration overlap the matmuls of this one exactly
as far as the buffers allow. Each DMA loads one matmul operand (a stationary or moving tile, see
_tiles), the granularity at which the compiler orders a load after the reads of
the memory it overwrites. Loops are written with ProgramBuilder.repeat, which builds the
iterations of an affine loop in bulk: the program is the plain loop's."""

from __future__ import annotations

from ..numerics.formats import itemsize
from ..program import ProgramBuilder
from ..program.builder import paused_gc

# DMA queues by role: a queue follows the engine that triggers it [DMAov], and the compiler
# triggers the loads of each operand and the stores from their own instruction streams, so one
# operand waiting for a free buffer does not hold up the others.
Q_LHS, Q_RHS, Q_OUT = 0, 1, 2
# Spill reloads and spill stores are triggered around VectorE's accumulation, each from its own
# stream like the operand loads.
Q_SPILL_IN, Q_SPILL_OUT = 3, 4


class Pool:
    """Round-robin buffers for a tile declared inside a loop: `at(i)` is the buffer of the i-th
    use, i computed from the loop indices (ProgramBuilder.repeat bodies carry no counters)."""

    def __init__(self, b, name, shape, dtype, bufs, psum=False):
        alloc = b.psum if psum else b.sbuf
        self.tiles = [alloc(f"{name}{i}", shape, dtype) for i in range(bufs)]

    def at(self, i):
        return self.tiles[i % len(self.tiles)]


def _tiles(chip):
    """(TILE_K, TILE_M, TILE_N) as the matmul tutorial reads them from the target [MMtut-old]
    (nl.tile_size.pmax, gemm_stationary_fmax, gemm_moving_fmax): 128, 128, 512 on Trn1/Trn2.
    TILE_N is held to one PSUM bank of FP32 partial sums (Trn3's moving limit is larger)."""
    return (chip.sbuf_partitions, chip.matmul_stationary_fmax,
            min(chip.matmul_moving_fmax(), chip.psum_bank_fp32_elems))


def _start(chip, name, M, K, N, dtype):
    """A matmul kernel's builder, its (TILE_K, TILE_M, TILE_N) and its HBM operands (lhsT, rhs,
    result)."""
    b = ProgramBuilder(chip, name=name)
    return b, _tiles(b.chip), (b.hbm("lhsT", (K, M), dtype), b.hbm("rhs", (K, N), dtype),
                               b.hbm("result", (M, N), dtype))


@paused_gc()   # the big programs are built with the collector paused
def matmul_tiled(chip="trn1", M=4096, K=8192, N=8192, dtype="bfloat16", bufs=4):
    """C1: nki_matmul_tiled_: two loads per matmul, no reuse."""
    b, (TILE_K, TILE_M, TILE_N), (lhsT, rhs, result) = _start(chip, "C1 tiled", M, K, N, dtype)
    lp = Pool(b, "lhsT_tile", (TILE_K, TILE_M), dtype, bufs)
    rp = Pool(b, "rhs_tile", (TILE_K, TILE_N), dtype, bufs)
    pp = Pool(b, "res_psum", (TILE_M, TILE_N), "float32", b.chip.psum_banks, psum=True)
    sp = Pool(b, "res_sb", (TILE_M, TILE_N), dtype, bufs)
    NN, KT = N // TILE_N, K // TILE_K

    def mn(m, n):
        acc = pp.at(m * NN + n)

        def k_step(k):
            lt, rt = lp.at((m * NN + n) * KT + k), rp.at((m * NN + n) * KT + k)
            b.dma_copy(lt, lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M],
                       queue=Q_LHS)
            b.dma_copy(rt, rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N],
                       queue=Q_RHS)
            b.nc_matmul(acc, lt, rt, accumulate=k > 0)
        b.repeat(KT, k_step)
        _store(b, sp.at(m * NN + n), acc, result, m * TILE_M, n * TILE_N)
    b.repeat(M // TILE_M, lambda m: b.repeat(NN, lambda n: mn(m, n)))
    return b.build()


def _store(b, sb, acc, result, r0, c0):
    """A result tile at (r0, c0): PSUM -> SBUF on VectorE, then one DMA to HBM."""
    b.tensor_copy(sb, acc)
    b.dma_copy(result[r0:r0 + sb.shape[0], c0:c0 + sb.shape[1]], sb, queue=Q_OUT)


def _k_tiles(b, KT, TILE_K, tile, src, col, width, queue):
    """The KT operand tiles of C2 and C3: rows [k TILE_K, (k + 1) TILE_K) of src's columns
    [col, col + width) into tile(k), one DMA each on `queue`."""
    b.repeat(KT, lambda k: b.dma_copy(tile(k), src[k * TILE_K:(k + 1) * TILE_K, col:col + width],
                                      queue=queue))


@paused_gc()
def matmul_hoist_load(chip="trn1", M=4096, K=8192, N=8192, dtype="bfloat16", bufs=2):
    """C2: nki_matmul_hoist_load_: a column of lhsT tiles per m, of rhs tiles per n."""
    b, (TILE_K, TILE_M, TILE_N), (lhsT, rhs, result) = _start(
        chip, "C2 hoist loads", M, K, N, dtype)
    KT = K // TILE_K
    lp = Pool(b, "lhsT_tiles", (TILE_K, KT, TILE_M), dtype, bufs)
    rp = Pool(b, "rhs_tiles", (TILE_K, KT, TILE_N), dtype, bufs)
    pp = Pool(b, "res_psum", (TILE_M, TILE_N), "float32", b.chip.psum_banks, psum=True)
    sp = Pool(b, "res_sb", (TILE_M, TILE_N), dtype, 4)
    NN = N // TILE_N

    def m_step(m):
        lt = lp.at(m)
        _k_tiles(b, KT, TILE_K, lambda k: lt[:, k, :], lhsT, m * TILE_M, TILE_M, Q_LHS)

        def n_step(n):
            rt = rp.at(m * NN + n)
            _k_tiles(b, KT, TILE_K, lambda k: rt[:, k, :], rhs, n * TILE_N, TILE_N, Q_RHS)
            acc = pp.at(m * NN + n)
            b.repeat(KT, lambda k: b.nc_matmul(acc, lt[:, k, :], rt[:, k, :], accumulate=k > 0))
            _store(b, sp.at(m * NN + n), acc, result, m * TILE_M, n * TILE_N)
        b.repeat(NN, n_step)
    b.repeat(M // TILE_M, m_step)
    return b.build()


@paused_gc()
def matmul_block_free(chip="trn1", M=4096, K=8192, N=8192, dtype="bfloat16", bm_tiles=2,
                      bn_tiles=2):
    """C3: nki_matmul_block_free_dimension_: 2 x 2 tiles per block of the free dimensions. The
    rhs block (128 KiB per partition) leaves room for one buffer of each operand on Trn1."""
    b, (TILE_K, TILE_M, TILE_N), (lhsT, rhs, result) = _start(
        chip, "C3 block free dims", M, K, N, dtype)
    KT = K // TILE_K
    lt = b.sbuf("lhsT_tiles", (TILE_K, bm_tiles, KT, TILE_M), dtype)
    rt = b.sbuf("rhs_tiles", (TILE_K, bn_tiles, KT, TILE_N), dtype)
    pp = Pool(b, "res_psum", (TILE_M, TILE_N), "float32", b.chip.psum_banks, psum=True)
    sp = Pool(b, "res_sb", (TILE_M, TILE_N), dtype, 4)
    NN = N // (TILE_N * bn_tiles)

    def m_step(m):
        for bm in range(bm_tiles):
            _k_tiles(b, KT, TILE_K, lambda k, bm=bm: lt[:, bm, k, :], lhsT,
                     (m * bm_tiles + bm) * TILE_M, TILE_M, Q_LHS)

        def n_step(n):
            for bn in range(bn_tiles):
                _k_tiles(b, KT, TILE_K, lambda k, bn=bn: rt[:, bn, k, :], rhs,
                         (n * bn_tiles + bn) * TILE_N, TILE_N, Q_RHS)
            for bm in range(bm_tiles):
                for bn in range(bn_tiles):
                    use = ((m * NN + n) * bm_tiles + bm) * bn_tiles + bn
                    acc = pp.at(use)
                    b.repeat(KT, lambda k, bm=bm, bn=bn, acc=acc: b.nc_matmul(
                        acc, lt[:, bm, k, :], rt[:, bn, k, :], accumulate=k > 0))
                    _store(b, sp.at(use), acc, result, (m * bm_tiles + bm) * TILE_M,
                           (n * bn_tiles + bn) * TILE_N)
        b.repeat(NN, n_step)
    b.repeat(M // (TILE_M * bm_tiles), m_step)
    return b.build()


class Accumulators:
    """The SBUF partial sums of the fully blocked kernel: one [TILE_M, TILE_N] slice per key, in the
    order the K loop updates them. When they do not all fit, the compiler spills as its allocator
    does (neuron_sim/nki/memory.py, [MMtut]): when the working set first overflows (at the first
    lhsT block load, the partial sums already live) it sends to HBM the live slices whose next use
    is furthest away, i.e. the last ones in update order. A spilled slice lives in an HBM slot,
    is reloaded into one of `staging_bufs` buffers before each use and stored after it; `use`
    numbers the staging buffer's uses (the loops compute it, see matmul_fully_blocked)."""

    def __init__(self, b, order, shape, dtype, resident, staging_bufs):
        self.b, self.home, self.slot = b, {}, {}
        self.resident = resident = min(resident, len(order))
        spilled = order[resident:]
        if resident:
            res = b.sbuf("result_tiles", (shape[0], resident, shape[1]), dtype)
            self.home = {key: res[:, j, :] for j, key in enumerate(order[:resident])}
        if spilled:
            slots = b.spill_slot("result_tiles", (shape[0], len(spilled), shape[1]), dtype)
            self.slot = {key: slots[:, j, :] for j, key in enumerate(spilled)}
            self.stage = Pool(b, "result_stage", shape, dtype, staging_bufs)

    def zero(self, key, use):
        if key in self.home:
            self.b.memset(self.home[key], 0.0)
        else:
            t = self.stage.at(use)
            self.b.memset(t, 0.0)
            self.b.spill_store(self.slot[key], t, queue=Q_SPILL_OUT)

    def load(self, key, use):
        """The SBUF tile holding `key` for one use (reloaded when spilled)."""
        if key in self.home:
            return self.home[key]
        t = self.stage.at(use)
        self.b.spill_reload(t, self.slot[key], queue=Q_SPILL_IN)
        return t

    def store(self, key, t):
        """After a use that updated `key`: a spilled slice goes back to its slot."""
        if key not in self.home:
            self.b.spill_store(self.slot[key], t, queue=Q_SPILL_OUT)


def _load_by_operand(b, block, src, k_tile0, col0, width, queue):
    """Fill a [TILE_K, tiles_k, cols] block from `src` rows k_tile0*TILE_K.. and columns col0..
    with one DMA per matmul operand (a [TILE_K, width] piece), column piece by column piece.
    TILE_K is the block's partition count.
    The compiler orders a DMA after the instructions that read the memory it overwrites; one DMA
    per operand lets a single-buffered block be refilled piece by piece as its last readers
    finish, instead of after the block's last matmul."""
    tile_k, tiles_k, cols = block.shape

    def piece(c):
        c *= width
        for bk in range(tiles_k):
            r0 = (k_tile0 + bk) * tile_k
            b.dma_copy(block[:, bk, c:c + width], src[r0:r0 + tile_k, col0 + c:col0 + c + width],
                       queue=queue)
    b.repeat(cols // width, piece)


def _repeat_between(b, count, splits, body):
    """b.repeat over 0..count-1 in pieces cut at `splits`, where body(i) changes form (e.g. at
    the first partial sum that is spilled): each piece is affine on its own."""
    cuts = sorted({0, count} | {c for c in splits if 0 < c < count})
    for lo, hi in zip(cuts, cuts[1:]):
        b.repeat(hi - lo, body, start=lo)


def _fit_blocked(free, acc_bytes, n_acc, block_bytes, packed_bytes, bufs):
    """(buffers per operand block and packed tile, resident accumulator slices, staging buffers)
    for `free` bytes per partition, as the compiler's allocator chooses: all partial sums in SBUF
    if any buffer count allows it, giving up multi-buffering before spilling (a spill moves bytes,
    a lost buffer only overlap); otherwise one buffer each, `bufs` staging buffers for the spilled
    slices and as many resident slices as fit beside them."""
    for nb in range(bufs, 0, -1):
        if nb * (block_bytes + packed_bytes) + n_acc * acc_bytes <= free:
            return nb, n_acc, 0
    return 1, (free - block_bytes - packed_bytes) // acc_bytes - bufs, bufs


@paused_gc()
def matmul_fully_blocked(chip="trn1", M=4096, K=8192, N=8192, dtype="bfloat16", tiles_m=16,
                         tiles_n=2, tiles_k=8, bufs=2, name="C4 fully blocked"):
    """C4 (BF16, Trn1) and C8 (FP32, Trn2): nki_matmul_fully_optimized_ / kernel-optimisation
    v5: all three dimensions blocked, partial sums accumulated in SBUF by VectorE, results packed
    into [TILE_K, BN] rows before the store. Buffer counts and spills follow from the chip's
    usable SBUF (_fit_blocked, Accumulators); blocks are loaded operand by operand
    (_load_by_operand)."""
    b, (TILE_K, TILE_M, TILE_N), (lhsT, rhs, result) = _start(chip, name, M, K, N, dtype)
    BM, BN, BK = TILE_M * tiles_m, TILE_N * tiles_n, TILE_K * tiles_k
    NBM, NBN, NBK = M // BM, N // BN, K // BK
    isz = int(itemsize(dtype))
    order = [(m, bm, bn) for m in range(NBM) for bn in range(tiles_n) for bm in range(tiles_m)]
    nb, resident, staging = _fit_blocked(b.sbuf_free_bytes_per_partition, TILE_N * isz,
                                         len(order), tiles_k * (BN + BM) * isz, BN * isz, bufs)
    rp = Pool(b, "rhs_tiles", (TILE_K, tiles_k, BN), dtype, nb)
    lp = Pool(b, "lhsT_tiles", (TILE_K, tiles_k, BM), dtype, nb)
    pp = Pool(b, "res_tile", (TILE_M, TILE_N), "float32", b.chip.psum_banks, psum=True)
    kp = Pool(b, "result_packed", (TILE_K, BN), dtype, nb)
    acc = Accumulators(b, order, (TILE_M, TILE_N), dtype, resident, staging)
    # Buffer uses as functions of the loop indices (repeat() bodies carry no counters): per n,
    # the staging buffer serves the spilled slices once when zeroed (in m, bm, bn order), once
    # per K step (in `order`) and once when packed (m, bm, bn order again).
    index = {key: j for j, key in enumerate(order)}
    spilled = [key for key in sorted(order) if index[key] >= acc.resident]
    rank = {key: r for r, key in enumerate(spilled)}      # (m, bm, bn) order
    S = len(spilled)
    # where a bm loop changes between resident and spilled slices
    cuts = lambda m: [acc.resident - (m * tiles_n + bn) * tiles_m for bn in range(tiles_n)]

    def n_step(n):
        uses = n * S * (NBK + 2)
        for m in range(NBM):
            _repeat_between(b, tiles_m, cuts(m), lambda bm, m=m: [
                acc.zero((m, bm, bn), uses + rank.get((m, bm, bn), 0)) for bn in range(tiles_n)])

        def k_step(k):
            rt = rp.at(n * NBK + k)
            _load_by_operand(b, rt, rhs, tiles_k * k, BN * n, TILE_N, Q_RHS)
            for m in range(NBM):
                lt = lp.at((n * NBK + k) * NBM + m)
                _load_by_operand(b, lt, lhsT, tiles_k * k, BM * m, TILE_M, Q_LHS)
                for bn in range(tiles_n):
                    def bm_step(bm, m=m, bn=bn, lt=lt):
                        ps = pp.at(((n * NBK + k) * NBM + m) * tiles_n * tiles_m
                                   + bn * tiles_m + bm)
                        for bk in range(tiles_k):
                            b.nc_matmul(ps, lt[:, bk, bm * TILE_M:(bm + 1) * TILE_M],
                                        rt[:, bk, bn * TILE_N:(bn + 1) * TILE_N],
                                        accumulate=bk > 0)
                        key = (m, bm, bn)
                        dst = acc.load(key, uses + S + k * S + index[key] - acc.resident)
                        b.tensor_tensor(dst, dst, ps, "add")
                        acc.store(key, dst)
                    _repeat_between(b, tiles_m, [cuts(m)[bn]], bm_step)
        b.repeat(NBK, k_step)

        for m in range(NBM):
            def pack(bm, m=m):
                packed = kp.at((n * NBM + m) * tiles_m + bm)
                for bn in range(tiles_n):
                    key = (m, bm, bn)
                    b.tensor_copy(packed[:, bn * TILE_N:(bn + 1) * TILE_N],
                                  acc.load(key, uses + S + NBK * S + rank.get(key, 0)))
                r0 = (tiles_m * m + bm) * TILE_K
                b.dma_copy(result[r0:r0 + TILE_K, BN * n:BN * (n + 1)], packed, queue=Q_OUT)
            _repeat_between(b, tiles_m, cuts(m), pack)
    b.repeat(NBN, n_step)
    return b.build()


def kernel_opt_v5(chip="trn2"):
    """C8: the v5 kernel in FP32. Its own SBUF use (result tiles 128 KiB + one rhs block 32 KiB
    + one lhsT block 64 KiB per partition, before any double buffering) exceeds Trn2's usable
    208 KiB per partition, so the program keeps one buffer per block and spills the partial sums
    that do not fit (matmul_fully_blocked)."""
    return matmul_fully_blocked(chip, dtype="float32", name="C8 kernel-optimisation v5 (FP32)")


def dma_one_engine(chip="trn2"):
    """C15: 32 KiB HBM->SBUF as 4 partitions x 8 KiB on one DMA engine [DMAov]."""
    b = ProgramBuilder(chip, name="C15 DMA one engine")
    src = b.hbm("src", (4, 4096), "bfloat16")
    dst = b.sbuf("dst", (4, 4096), "bfloat16")
    b.dma_copy(dst, src, engines=1)
    return b.build()


def dma_sixteen_engines(chip="trn2"):
    """C16: [128, 128] BF16 HBM->SBUF spread over the 16 engines, then a VectorE instruction that
    waits for it (trigger-to-completion as the profile shows it) [DMAov]."""
    b = ProgramBuilder(chip, name="C16 DMA 16 engines")
    # the published workload's shape (public.json), not a hardware size
    src = b.hbm("src", (128, 128), "bfloat16")
    dst = b.sbuf("dst", (128, 128), "bfloat16")
    out = b.sbuf("out", (128, 128), "bfloat16")
    b.dma_copy(dst, src)
    b.tensor_copy(out, dst)
    return b.build()


def scalar_dependent_chain(chip="trn1", n=64):
    """C17: back-to-back dependent 1-element-per-partition activations on ScalarE [Perf]."""
    b = ProgramBuilder(chip, name="C17 ScalarE chain")
    t = [b.sbuf(f"t{i}", (b.chip.sbuf_partitions, 1), "float32") for i in range(2)]
    b.memset(t[0], 1.0)
    for i in range(n):
        b.activation(t[(i + 1) % 2], t[i % 2], "exp" if i % 2 else "copy")
    return b.build()


def hwdge_stream(chip="trn2", n=64):
    """C18: back-to-back hardware-DGE DMA instructions from one queue [DGE]."""
    b = ProgramBuilder(chip, name="C18 HW DGE")
    P = b.chip.sbuf_partitions                 # any shape [DGE]: 64 elements on every partition
    src = b.hbm("src", (n, P, 64), "bfloat16")
    dst = b.sbuf("dst", (P, n, 64), "bfloat16")
    for i in range(n):
        b.dma_copy(dst[:, i, :], src[i], queue=0, dge="hwdge")
    return b.build()


def tensor_burst_after_idle(chip="trn2", n=64):
    """C19: a burst of back-to-back BF16 matmuls after TensorE idled [Explorer]."""
    b = ProgramBuilder(chip, name="C19 TensorE burst")
    K, M, N = _tiles(b.chip)                   # any shape [Explorer]: full-size matmuls
    st = b.sbuf("st", (K, M), "bfloat16")
    mv = b.sbuf("mv", (K, N), "bfloat16")
    acc = [b.psum(f"acc{i}", (M, N)) for i in range(b.chip.psum_banks)]
    for i in range(n):
        b.nc_matmul(acc[i % len(acc)], st, mv, accumulate=False)
    return b.build()
