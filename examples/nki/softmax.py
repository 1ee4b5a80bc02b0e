"""Row softmax of x [N, D]: VectorE row max (negated), ScalarE exp(x - max) with the row sum in
the same instruction, VectorE reciprocal, VectorE scale."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def softmax_kernel(x):
    N, D = x.shape
    P = nl.tile_size.pmax
    assert N % P == 0
    out = nl.ndarray((N, D), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(N // P):
        xt = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x[i * P:(i + 1) * P, :])
        neg_max = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_reduce(dst=neg_max, op=nl.maximum, data=xt, axis=1, negate=True)
        e = nl.ndarray((P, D), dtype=nl.float32, buffer=nl.sbuf)
        s = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.activation(dst=e, op=nl.exp, data=xt, bias=neg_max, reduce_op=nl.add, reduce_res=s,
                        reduce_cmd=nisa.reduce_cmd.reset_reduce)
        r = nl.ndarray((P, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.reciprocal(dst=r, data=s)
        y = nl.ndarray((P, D), dtype=x.dtype, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=y, data=e, op0=nl.multiply, operand0=r)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=y)
    return out


def reference(x):
    x32 = x.astype(np.float32)
    e = np.exp(x32 - x32.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def main(N=512, D=2048, dtype=nl.float32, target="trn2"):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((N, D)).astype(dtype)
    sim = nki.simulate(softmax_kernel, platform_target=target)
    y = sim(x)
    np.testing.assert_allclose(y.astype(np.float32), reference(x), rtol=2e-2, atol=1e-5)
    print("softmax: matches NumPy")
    print(sim.report)
    return sim.report


if __name__ == "__main__":
    main()
