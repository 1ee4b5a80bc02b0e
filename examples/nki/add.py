"""Element-wise add of two [R, C] tensors, tiled over rows (128 partitions per tile).

``python examples/nki/add.py`` checks the result against NumPy and prints the simulated time
and per-engine activity."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


@nki.jit
def add_kernel(a, b):
    R, C = a.shape
    assert a.shape == b.shape and R % nl.tile_size.pmax == 0
    out = nl.ndarray(a.shape, dtype=a.dtype, buffer=nl.shared_hbm)
    P = nl.tile_size.pmax
    for i in nl.affine_range(R // P):
        x = nl.ndarray((P, C), dtype=a.dtype, buffer=nl.sbuf)
        y = nl.ndarray((P, C), dtype=b.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=x, src=a[i * P:(i + 1) * P, :])
        nisa.dma_copy(dst=y, src=b[i * P:(i + 1) * P, :])
        z = nl.ndarray((P, C), dtype=a.dtype, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=z, data1=x, data2=y, op=nl.add)
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=z)
    return out


def reference(a, b):
    return (a.astype(np.float32) + b.astype(np.float32)).astype(a.dtype)


def main(shape=(1024, 2048), dtype=nl.bfloat16, target="trn2"):
    rng = np.random.default_rng(0)
    a = rng.standard_normal(shape).astype(dtype)
    b = rng.standard_normal(shape).astype(dtype)
    sim = nki.simulate(add_kernel, platform_target=target)
    out = sim(a, b)
    np.testing.assert_allclose(out.astype(np.float32), reference(a, b).astype(np.float32), rtol=1e-2, atol=1e-2)
    print("add: matches NumPy")
    print(sim.report)
    return sim.report


if __name__ == "__main__":
    main()
