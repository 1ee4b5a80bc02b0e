# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/api/generated/nki.execute.html
# Verbatim (the page's example), then a check against NumPy (not from the docs).
import nki
import nki.isa as nisa
import nki.language as nl
import numpy as np

@nki.jit
def matmul_kernel(X: nl.NkiTensor, y: nl.NkiTensor) -> nl.NkiTensor:
    X_sbuf = nl.ndarray(shape=X.shape, dtype=X.dtype, buffer=nl.sbuf)
    y_sbuf = nl.ndarray(shape=y.shape, dtype=y.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=X_sbuf, src=X)
    nisa.dma_copy(dst=y_sbuf, src=y)

    z_psum = nl.matmul(X_sbuf, y_sbuf)  # X @ y
    z_sbuf = nl.ndarray(shape=z_psum.shape, dtype=X.dtype, buffer=nl.sbuf)
    nisa.tensor_copy(z_sbuf, z_psum)

    z = nl.ndarray(shape=z_sbuf.shape, dtype=X.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=z, src=z_sbuf)
    return z

X = np.random.rand(2, 2).astype(np.float32)
y = np.random.rand(2, 1).astype(np.float32)

# Specialization and execution.
results = nki.execute(matmul_kernel, X, y)

# ---- check (not from the docs) ----
np.testing.assert_allclose(results, X @ y, rtol=1e-5)
print("nki.execute result matches X @ y:", results.ravel().tolist())
