"""Fused Mamba (selective-scan) kernels of the NKI tutorial [Mamba], written from its algorithm
(C9-C13 of public.json). Shapes: delta, u [batch, channels, seq]; A [channels, state];
B, C [batch, state, seq]; out [batch, channels, seq]; FP32.

Per (channel tile of nl.tile_size.pmax partitions, state) the tutorial's six steps:
  1+2. deltaA = exp(delta * A_i)          one ScalarE activation (A_i as the per-partition scale)
  3.   deltaBu = (delta * u) * B_i        two VectorE tensor_tensor, B_i broadcast over partitions
  4.   scan = deltaA[t] * scan[t-1] + deltaBu[t]   one VectorE tensor_tensor_scan
  5.   scanC = scan * C_i                 one VectorE tensor_tensor, C_i broadcast
  6.   accum += scanC                     one VectorE tensor_tensor (loop-carried over states)

v1 loops state-outer / channel-tile-inner and reloads delta and u per state; v2 reorders the
loops (channel tiles outer, delta/u loaded once per tile, accumulator per tile); v3 also tiles
the sequence (512 columns) inside the state loop, the scan carried across sequence tiles, and
writes scanC to PSUM ("to reduce accumulation latency"). Instructions and loads come in the order
of the tutorial's kernels (aws-neuron/nki-samples tutorials/fused_mamba/mamba_nki_kernels.py):
what is live at once, and so what spills, follows from it.

v2 computes deltaU = delta * u inside the state loop although neither changes there; on Trn1 it
runs once per channel tile (nki/reuse.py, the assumption `reuse_loop_invariant`), which keeps one
[128, seq] tile fewer live per state: without it v2 spilled 3 tile transfers per tile and state
(+34% and +42% at seq 7168 and 8192), with it VectorE takes 8.1N cycles per element and state
(published 8.4N). v3's deltaU depends on the sequence tile and stays in the loop except at seq
512, a single tile. Other choices were measured against the published v2 times and fit worse:
VectorE at the PSUM rate for the broadcast operands, step 6 on GpSimd, spill victims by fewest
DMA bytes, reloads placed where a first plan leaves room, delta and u spilled first."""

from __future__ import annotations

from ..nki import isa as nisa
from ..nki import language as nl
from ..nki.launch import jit

SEQ_TILE = 512     # the v3 kernel's own sequence tile [Mamba], not a hardware size


def _state_step(delta_t, u_t, A_i, load_B, load_C, accum, scan_init, P, F, scanC_buffer=nl.sbuf):
    """Steps 1-6 on [P, F] tiles in the tutorial's order (B_i loaded after step 2, C_i after
    step 4, as its kernels do); returns the scan tile (its last column carries on)."""
    deltaA = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=deltaA, op=nl.exp, data=delta_t, scale=A_i)
    B_i = load_B()
    deltaU = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=deltaU, data1=delta_t, data2=u_t, op=nl.multiply)
    deltaBu = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=deltaBu, data1=deltaU, data2=B_i.broadcast_to((P, F)), op=nl.multiply)
    scan = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=scan, data0=deltaA, data1=deltaBu, initial=scan_init,
                            op0=nl.multiply, op1=nl.add)
    C_i = load_C()
    scanC = nl.ndarray((P, F), dtype=nl.float32, buffer=scanC_buffer)
    nisa.tensor_tensor(dst=scanC, data1=scan, data2=C_i.broadcast_to((P, F)), op=nl.multiply)
    nisa.tensor_tensor(dst=accum, data1=accum, data2=scanC, op=nl.add)
    return scan


def _load(src, shape):
    t = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=src)
    return t


@jit
def mamba_v1(delta, u, A, B, C):
    batch, channels, seq = delta.shape
    state = A.shape[1]
    P = nl.tile_size.pmax
    n_ct = channels // P
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        accum = nl.ndarray((P, n_ct, seq), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=accum, value=0.0)
        for s in nl.affine_range(state):
            for c in nl.affine_range(n_ct):
                ch = slice(c * P, (c + 1) * P)
                delta_t = _load(delta[b, ch, :], (P, seq))
                A_i = _load(A[ch, s:s + 1], (P, 1))
                u_t = _load(u[b, ch, :], (P, seq))
                _state_step(delta_t, u_t, A_i, lambda: _load(B[b, s:s + 1, :], (1, seq)),
                            lambda: _load(C[b, s:s + 1, :], (1, seq)), accum[:, c, :], 0.0, P, seq)
        for c in nl.affine_range(n_ct):
            nisa.dma_copy(dst=out[b, c * P:(c + 1) * P, :], src=accum[:, c, :])
    return out


def _channel_tiles(delta, u, A, state_step):
    """v2/v3: channel tiles outer, each with its accumulator and its delta and u loaded once,
    the states inside: state_step(b, s, delta_t, u_t, A_i, accum) for each."""
    batch, channels, seq = delta.shape
    P = nl.tile_size.pmax
    out = nl.ndarray(delta.shape, dtype=delta.dtype, buffer=nl.shared_hbm)
    for b in nl.affine_range(batch):
        for c in nl.affine_range(channels // P):
            ch = slice(c * P, (c + 1) * P)
            accum = nl.ndarray((P, seq), dtype=nl.float32, buffer=nl.sbuf)
            nisa.memset(dst=accum, value=0.0)
            delta_t, u_t = _load(delta[b, ch, :], (P, seq)), _load(u[b, ch, :], (P, seq))
            for s in nl.affine_range(A.shape[1]):
                A_i = _load(A[ch, s:s + 1], (P, 1))
                state_step(b, s, delta_t, u_t, A_i, accum)
            nisa.dma_copy(dst=out[b, ch, :], src=accum)
    return out


@jit
def mamba_v2(delta, u, A, B, C):
    P, seq = nl.tile_size.pmax, delta.shape[2]

    def state_step(b, s, delta_t, u_t, A_i, accum):
        _state_step(delta_t, u_t, A_i, lambda: _load(B[b, s:s + 1, :], (1, seq)),
                    lambda: _load(C[b, s:s + 1, :], (1, seq)), accum, 0.0, P, seq)
    return _channel_tiles(delta, u, A, state_step)


@jit
def mamba_v3(delta, u, A, B, C):
    P, seq = nl.tile_size.pmax, delta.shape[2]
    F = min(SEQ_TILE, seq)

    def state_step(b, s, delta_t, u_t, A_i, accum):
        carry = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=carry, value=0.0)
        for t in nl.sequential_range(seq // F):
            cols = slice(t * F, (t + 1) * F)
            scan = _state_step(delta_t[:, cols], u_t[:, cols], A_i,
                               lambda: _load(B[b, s:s + 1, cols], (1, F)),
                               lambda: _load(C[b, s:s + 1, cols], (1, F)),
                               accum[:, cols], carry, P, F, scanC_buffer=nl.psum)
            nisa.tensor_copy(dst=carry, src=scan[:, F - 1:F])
    return _channel_tiles(delta, u, A, state_step)


KERNELS = {"v1": mamba_v1, "v2": mamba_v2, "v3": mamba_v3}


def inputs(channels, seq, batch=1, state=16):
    """Zero-filled inputs of the published shapes (timing only: numerics=False)."""
    import numpy as np
    f = np.float32
    return (np.zeros((batch, channels, seq), f), np.zeros((batch, channels, seq), f),
            np.zeros((channels, state), f), np.zeros((batch, state, seq), f),
            np.zeros((batch, state, seq), f))
