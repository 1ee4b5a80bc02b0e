"""The NKI matrix-multiplication tutorial's four stages as NKI kernels, plus the final kernel of
the kernel-optimisation tutorial. They compute ``result[M, N] = lhsT[K, M].T @ rhs[K, N]``.

Published latencies (../shared/calibration/public.json) for [4096, 8192] @ [8192, 8192]:
C1-C4 (BF16, Trn1, one NeuronCore) 51.80 / 42.96 / 22.07 / 6.97 ms; C8 (FP32, Trn2, the
K-blocked version with VectorE accumulation) TensorE active 28.16 ms.

Run ``python examples/nki/matmul_tutorial.py [--full]`` to print simulated times; without
``--full`` it uses a shape 1/8 of the published one in N (see ``bench/nki_matmul_calibration.py``
for the full-size calibration run).
"""

from __future__ import annotations

import nki
import nki.isa as nisa
import nki.language as nl

TILE_K = 128    # nl.tile_size.pmax: contraction rows per matmul
TILE_M = 128    # nl.tile_size.gemm_stationary_fmax
TILE_N = 512    # nl.tile_size.gemm_moving_fmax (one PSUM bank of float32)


def _dims(lhsT, rhs):
    K, M = lhsT.shape
    K2, N = rhs.shape
    assert K == K2, f"contraction dims differ: lhsT has K={K}, rhs has K={K2}"
    assert K % TILE_K == 0 and M % TILE_M == 0 and N % TILE_N == 0, (K, M, N)
    return K, M, N


def _load_k_tiles(src, col0, width):
    """src[:, col0:col0 + width] into SBUF as a list of [TILE_K, width] tiles, one per K tile."""
    tiles = []
    for k in nl.affine_range(src.shape[0] // TILE_K):
        t = nl.ndarray((TILE_K, width), dtype=src.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=src[k * TILE_K:(k + 1) * TILE_K, col0:col0 + width])
        tiles.append(t)
    return tiles


def _store_tile(result, acc, m0, n0):
    """A [TILE_M, TILE_N] PSUM result to SBUF (in result's dtype), then to result[m0:, n0:]."""
    out = nl.ndarray((TILE_M, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(dst=out, src=acc)
    nisa.dma_copy(dst=result[m0:m0 + TILE_M, n0:n0 + TILE_N], src=out)


@nki.jit
def matmul_tiled(lhsT, rhs):
    """Stage 1 (C1): every matmul loads its own two tiles."""
    K, M, N = _dims(lhsT, rhs)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        for n in nl.affine_range(N // TILE_N):
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                a = nl.ndarray((TILE_K, TILE_M), dtype=lhsT.dtype, buffer=nl.sbuf)
                b = nl.ndarray((TILE_K, TILE_N), dtype=rhs.dtype, buffer=nl.sbuf)
                nisa.dma_copy(dst=a, src=lhsT[k * TILE_K:(k + 1) * TILE_K, m * TILE_M:(m + 1) * TILE_M])
                nisa.dma_copy(dst=b, src=rhs[k * TILE_K:(k + 1) * TILE_K, n * TILE_N:(n + 1) * TILE_N])
                nisa.nc_matmul(dst=acc, stationary=a, moving=b)     # first write overwrites, then adds
            _store_tile(result, acc, m * TILE_M, n * TILE_N)
    return result


@nki.jit
def matmul_hoist_load(lhsT, rhs):
    """Stage 2 (C2): a column of lhsT tiles is loaded once per m, a column of rhs once per (m, n)."""
    K, M, N = _dims(lhsT, rhs)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // TILE_M):
        a_col = _load_k_tiles(lhsT, m * TILE_M, TILE_M)
        for n in nl.affine_range(N // TILE_N):
            b_col = _load_k_tiles(rhs, n * TILE_N, TILE_N)
            acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
            for k in nl.affine_range(K // TILE_K):
                nisa.nc_matmul(dst=acc, stationary=a_col[k], moving=b_col[k])
            _store_tile(result, acc, m * TILE_M, n * TILE_N)
    return result


@nki.jit
def matmul_block_free(lhsT, rhs, TILES_IN_BLOCK_M=2, TILES_IN_BLOCK_N=2):
    """Stage 3 (C3): block M and N so each loaded tile is reused across a block."""
    K, M, N = _dims(lhsT, rhs)
    BM, BN = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N
    assert M % BM == 0 and N % BN == 0
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for m in nl.affine_range(M // BM):
        a_blk = [_load_k_tiles(lhsT, (m * TILES_IN_BLOCK_M + bm) * TILE_M, TILE_M)
                 for bm in nl.affine_range(TILES_IN_BLOCK_M)]
        for n in nl.affine_range(N // BN):
            b_blk = [_load_k_tiles(rhs, (n * TILES_IN_BLOCK_N + bn) * TILE_N, TILE_N)
                     for bn in nl.affine_range(TILES_IN_BLOCK_N)]
            for bm in nl.affine_range(TILES_IN_BLOCK_M):
                for bn in nl.affine_range(TILES_IN_BLOCK_N):
                    acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                    for k in nl.affine_range(K // TILE_K):
                        nisa.nc_matmul(dst=acc, stationary=a_blk[bm][k], moving=b_blk[bn][k])
                    _store_tile(result, acc, (m * TILES_IN_BLOCK_M + bm) * TILE_M,
                                (n * TILES_IN_BLOCK_N + bn) * TILE_N)
    return result


@nki.jit
def matmul_fully_optimized(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Stage 4 (C4): block M, N and K; partial sums of each K block are added into SBUF result
    tiles on VectorE; loads and stores move whole blocks for DMA efficiency."""
    K, M, N = _dims(lhsT, rhs)
    BM, BN, BK = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    assert M % BM == 0 and N % BN == 0 and K % BK == 0, (M, N, K, BM, BN, BK)
    result = nl.ndarray((M, N), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    for n in nl.affine_range(N // BN):
        n0 = n * BN
        # one SBUF accumulator per 128-row tile of the N block, laid out (128, tiles_n, 512)
        res = []
        for _ in nl.affine_range(M // TILE_M):
            r = nl.ndarray((TILE_M, TILES_IN_BLOCK_N, TILE_N), dtype=result.dtype, buffer=nl.sbuf)
            nisa.memset(dst=r, value=0.0)
            res.append(r)
        for kb in nl.sequential_range(K // BK):
            b_blk = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BN), dtype=rhs.dtype, buffer=nl.sbuf)
            for kt in range(TILES_IN_BLOCK_K):
                k0 = (kb * TILES_IN_BLOCK_K + kt) * TILE_K
                nisa.dma_copy(dst=b_blk[0:TILE_K, kt, 0:BN], src=rhs[k0:k0 + TILE_K, n0:n0 + BN])
            for mb in nl.affine_range(M // BM):
                m0 = mb * BM
                a_blk = nl.ndarray((TILE_K, TILES_IN_BLOCK_K, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                for kt in nl.affine_range(TILES_IN_BLOCK_K):
                    k0 = (kb * TILES_IN_BLOCK_K + kt) * TILE_K
                    nisa.dma_copy(dst=a_blk[0:TILE_K, kt, 0:BM], src=lhsT[k0:k0 + TILE_K, m0:m0 + BM])
                for nt in nl.affine_range(TILES_IN_BLOCK_N):
                    for mt in nl.affine_range(TILES_IN_BLOCK_M):
                        acc = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=acc,
                                           stationary=a_blk[0:TILE_K, kt, mt * TILE_M:(mt + 1) * TILE_M],
                                           moving=b_blk[0:TILE_K, kt, nt * TILE_N:(nt + 1) * TILE_N])
                        r = res[mb * TILES_IN_BLOCK_M + mt]
                        nisa.tensor_tensor(dst=r[0:TILE_M, nt, 0:TILE_N], data1=r[0:TILE_M, nt, 0:TILE_N],
                                           data2=acc, op=nl.add)
        for i, r in enumerate(res):
            nisa.dma_copy(dst=result[i * TILE_M:(i + 1) * TILE_M, n0:n0 + BN], src=r.reshape((TILE_M, BN)))
    return result


@nki.jit
def matmul_kopt_v5(lhsT, rhs, TILES_IN_BLOCK_M=16, TILES_IN_BLOCK_N=2, TILES_IN_BLOCK_K=8):
    """Kernel-optimisation tutorial, final version (C8): blocked in M, N and K with FP32 partial
    sums accumulated into per-tile SBUF results on VectorE, packed per 128 rows for the store."""
    K, M, N = _dims(lhsT, rhs)
    BM, BN, BK = TILE_M * TILES_IN_BLOCK_M, TILE_N * TILES_IN_BLOCK_N, TILE_K * TILES_IN_BLOCK_K
    assert M % BM == 0 and N % BN == 0 and K % BK == 0
    result = nl.ndarray((M, N), dtype=nl.float32, buffer=nl.hbm)
    for n in nl.affine_range(N // BN):
        acc_tiles = [[[None] * TILES_IN_BLOCK_N for _ in range(TILES_IN_BLOCK_M)] for _ in range(M // BM)]
        for mb in range(M // BM):
            for mt in range(TILES_IN_BLOCK_M):
                for nt in range(TILES_IN_BLOCK_N):
                    t = nl.ndarray((TILE_M, TILE_N), dtype=lhsT.dtype, buffer=nl.sbuf)
                    nisa.memset(dst=t, value=0.0)
                    acc_tiles[mb][mt][nt] = t
        for kb in nl.sequential_range(K // BK):
            b_tiles = []
            for kt in range(TILES_IN_BLOCK_K):
                b = nl.ndarray((TILE_K, BN), dtype=rhs.dtype, buffer=nl.sbuf)
                k0 = (kb * TILES_IN_BLOCK_K + kt) * TILE_K
                nisa.dma_copy(dst=b, src=rhs[k0:k0 + TILE_K, n * BN:(n + 1) * BN])
                b_tiles.append(b)
            for mb in nl.affine_range(M // BM):
                a_tiles = []
                for kt in nl.affine_range(TILES_IN_BLOCK_K):
                    a = nl.ndarray((TILE_K, BM), dtype=lhsT.dtype, buffer=nl.sbuf)
                    k0 = (kb * TILES_IN_BLOCK_K + kt) * TILE_K
                    nisa.dma_copy(dst=a, src=lhsT[k0:k0 + TILE_K, mb * BM:(mb + 1) * BM])
                    a_tiles.append(a)
                for nt in nl.affine_range(TILES_IN_BLOCK_N):
                    for mt in nl.affine_range(TILES_IN_BLOCK_M):
                        ps = nl.ndarray((TILE_M, TILE_N), dtype=nl.float32, buffer=nl.psum)
                        for kt in nl.affine_range(TILES_IN_BLOCK_K):
                            nisa.nc_matmul(dst=ps, stationary=a_tiles[kt][0:TILE_K, mt * TILE_M:(mt + 1) * TILE_M],
                                           moving=b_tiles[kt][0:TILE_K, nt * TILE_N:(nt + 1) * TILE_N])
                        t = acc_tiles[mb][mt][nt]
                        nisa.tensor_tensor(dst=t, data1=t, data2=ps, op=nl.add)
        for mb in nl.affine_range(M // BM):
            for mt in nl.affine_range(TILES_IN_BLOCK_M):
                packed = nl.ndarray((TILE_M, BN), dtype=nl.float32, buffer=nl.sbuf)
                for nt in nl.affine_range(TILES_IN_BLOCK_N):
                    nisa.tensor_copy(dst=packed[0:TILE_M, nt * TILE_N:(nt + 1) * TILE_N],
                                     src=acc_tiles[mb][mt][nt])
                row = (mb * TILES_IN_BLOCK_M + mt) * TILE_M
                nisa.dma_copy(dst=result[row:row + TILE_M, n * BN:(n + 1) * BN], src=packed)
    return result


STAGES = {"tiled": matmul_tiled, "hoist_load": matmul_hoist_load, "block_free": matmul_block_free,
          "fully_optimized": matmul_fully_optimized}


def main(argv=None):
    import argparse
    import numpy as np
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="the published shape (slow: timing only)")
    args = ap.parse_args(argv)
    K, M, N = (8192, 4096, 8192) if args.full else (1024, 4096, 1024)
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((K, M)).astype(nl.bfloat16)
    rhs = rng.standard_normal((K, N)).astype(nl.bfloat16)
    for name, k in STAGES.items():
        nki.simulate(k, platform_target="trn1", numerics=False)(lhsT, rhs)
        print(nki.last_report())


if __name__ == "__main__":
    main()
