"""Fused single-head attention: ``O = softmax(Q K^T / sqrt(d)) V`` without leaving the chip.

Inputs are given in the layouts TensorE wants: ``qT`` [d, S] and ``kT`` [d, S] (the head
dimension d <= 128 on partitions, as the contraction of Q K^T), ``v`` [S, d]. For each block of
128 queries:

1. TensorE: scores[128, S] = qT_blk.T @ kT into one PSUM bank (S <= 512).
2. VectorE: negated row max, scaled; ScalarE: exp(scale * s - scale * max) with the row sums.
3. TensorE: transpose each 128x128 block of probabilities (PSUM), VectorE copies it to SBUF.
4. TensorE: O[128, d] = sum over key blocks of P_blk @ V_blk, accumulated in PSUM.
5. VectorE: O * (1 / rowsum) on the way out of PSUM; DMA to HBM.
"""

import math

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def attention_kernel(qT, kT, v, causal=False):
    d, S = qT.shape
    P = nl.tile_size.pmax
    assert kT.shape == (d, S) and v.shape == (S, d) and d <= P and S % P == 0 and S <= 512
    scale = 1.0 / math.sqrt(d)
    out = nl.ndarray((S, d), dtype=v.dtype, buffer=nl.shared_hbm)

    k_sb = nl.ndarray((d, S), dtype=kT.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=k_sb, src=kT)
    v_sb = nl.ndarray((P, S // P, d), dtype=v.dtype, buffer=nl.sbuf)      # key block on the free axis
    for kb in nl.affine_range(S // P):
        nisa.dma_copy(dst=v_sb[:, kb, :], src=v[kb * P:(kb + 1) * P, :])

    for qb in nl.affine_range(S // P):
        q_sb = nl.ndarray((d, P), dtype=qT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=q_sb, src=qT[:, qb * P:(qb + 1) * P])
        scores = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.psum)
        nisa.nc_matmul(dst=scores, stationary=q_sb, moving=k_sb)
        s_sb = scores
        if causal:   # keep key j <= query i: (qb*128 + p) - j >= 0
            s_sb = nl.ndarray((P, S), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_copy(dst=s_sb, src=scores)
            nisa.affine_select(dst=s_sb, pattern=[[-1, S]], channel_multiplier=1, on_true_tile=s_sb,
                               on_false_value=-1e30, cmp_op=nl.greater_equal, offset=qb * P)
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=s_sb, axis=1, negate=True)
        bias = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=bias, data=neg_max, op0=nl.multiply, operand0=scale)
        probs = nl.ndarray((P, S), dtype=v.dtype, buffer=nl.sbuf)
        rowsum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=probs, op=nl.exp, data=s_sb, scale=scale, bias=bias, reduce_op=nl.add,
                        reduce_res=rowsum, reduce_cmd=nisa.reduce_cmd.reset_reduce)
        o_ps = nl.ndarray((P, d), dtype=nl.float32, buffer=nl.psum)
        for kb in nl.affine_range(S // P):
            pT_ps = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.psum)
            nisa.nc_transpose(dst=pT_ps, data=probs[:, kb * P:(kb + 1) * P], engine=nisa.tensor_engine)
            pT = nl.ndarray((P, P), dtype=v.dtype, buffer=nl.sbuf)
            nisa.tensor_copy(dst=pT, src=pT_ps)
            nisa.nc_matmul(dst=o_ps, stationary=pT, moving=v_sb[:, kb, :])
        rinv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=rinv, data=rowsum)
        o_sb = nl.ndarray((P, d), dtype=v.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o_sb, data=o_ps, op0=nl.multiply, operand0=rinv)
        nisa.dma_copy(dst=out[qb * P:(qb + 1) * P, :], src=o_sb)
    return out


def reference(qT, kT, v, causal=False):
    q, k, vv = qT.astype(np.float32).T, kT.astype(np.float32).T, v.astype(np.float32)
    s = q @ k.T / math.sqrt(q.shape[1])
    if causal:
        s = np.where(np.tril(np.ones_like(s, dtype=bool)), s, -1e30)
    p = np.exp(s - s.max(axis=-1, keepdims=True))
    return (p / p.sum(axis=-1, keepdims=True)) @ vv


def main(S=512, d=128, dtype=nl.bfloat16, target="trn2", causal=True):
    rng = np.random.default_rng(0)
    qT = rng.standard_normal((d, S)).astype(dtype)
    kT = rng.standard_normal((d, S)).astype(dtype)
    v = rng.standard_normal((S, d)).astype(dtype)
    sim = nki.simulate(attention_kernel, platform_target=target)
    o = sim(qT, kT, v, causal=causal)
    np.testing.assert_allclose(o.astype(np.float32), reference(qT, kT, v, causal), rtol=5e-2, atol=5e-2)
    print("attention: matches NumPy")
    print(sim.report)
    return sim.report


if __name__ == "__main__":
    main()
