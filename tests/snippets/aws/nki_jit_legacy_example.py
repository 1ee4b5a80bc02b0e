# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/v2.26.1/nki/api/generated/nki.jit.html
# ("Listing 13 An Example", the legacy `neuronxcc` import). The kernel is verbatim; the driver
# below (not from the docs) runs it on one 128x512 tile with NumPy.
from neuronxcc import nki
import neuronxcc.nki.language as nl

@nki.jit
def nki_tensor_tensor_add(a_tensor, b_tensor):
  c_tensor = nl.ndarray(a_tensor.shape, dtype=a_tensor.dtype, buffer=nl.shared_hbm)

  a = nl.load(a_tensor)
  b = nl.load(b_tensor)

  c = a + b

  nl.store(c_tensor, c)

  return c_tensor


# ---- driver (not from the docs) ----
if __name__ == "__main__":
    import numpy as np

    a = np.random.rand(128, 512).astype(np.float32)
    b = np.random.rand(128, 512).astype(np.float32)
    np.testing.assert_allclose(nki.simulate_kernel(nki_tensor_tensor_add, a, b), a + b, rtol=1e-6)
    print("legacy nki.jit example matches NumPy")
