"""RMSNorm: ``y = x / sqrt(mean(x^2) + eps) * w`` over the last axis of x [N, D].

Per 128-row tile: ScalarE squares and sums each row in one instruction (activation with a
reduction); VectorE turns the sum into mean + eps; ScalarE takes its rsqrt; one VectorE
instruction scales the row by it and multiplies by the weight row, which a single DMA with a
stride-0 (broadcast) source put on every partition."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def rmsnorm_kernel(x, w, eps=1e-6):
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0 and w.shape == (D,)
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    # the weight row on every partition: a stride-0 (broadcast) read of HBM
    w_t = nl.ndarray((P, D), dtype=w.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=w_t, src=w.reshape((1, D)).broadcast(0, P))
    for i in nl.affine_range(N // P):
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[i * P:(i + 1) * P, :])
        sq = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        ssum = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=sq, op=nl.square, data=xt, reduce_op=nl.add, reduce_res=ssum,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        ms = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=ms, data=ssum, op0=nl.multiply, operand0=1.0 / D, op1=nl.add, operand1=eps)
        rinv = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=rinv, op=nl.rsqrt, data=ms)
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.scalar_tensor_tensor(dst=y, data=xt, op0=nl.multiply, operand0=rinv, op1=nl.multiply, operand1=w_t)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=y)
    return out


def reference(x, w, eps=1e-6):
    x32 = x.astype(np.float32)
    return (x32 / np.sqrt(np.mean(x32 * x32, axis=-1, keepdims=True) + eps) * w.astype(np.float32))


def main(N=512, D=1024, dtype=nl.float32, target="trn2"):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(dtype)
    w = rng.standard_normal((D,)).astype(dtype)
    sim = nki.simulate(rmsnorm_kernel, platform_target=target)
    y = sim(x, w)
    np.testing.assert_allclose(y.astype(np.float32), reference(x, w), rtol=2e-2, atol=2e-2)
    print("rmsnorm: matches NumPy")
    print(sim.report)
    return sim.report


if __name__ == "__main__":
    main()
