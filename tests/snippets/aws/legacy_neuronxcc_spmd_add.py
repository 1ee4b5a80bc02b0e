# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/general/nki/framework_custom_op.html
# ("NKI Kernel as a Framework Custom Operator", the SPMD tensor-add kernel with the legacy
# `neuronxcc.nki` imports). The kernel is verbatim. The page's callers use torch_xla and JAX;
# the driver below (not from the docs) launches it on a [2, 2] grid with NumPy, as the page's
# caller does with grid (M // 128, N // 512).
import neuronxcc.nki as nki
import neuronxcc.nki.language as nl


@nki.jit
def nki_tensor_add_kernel_(a_input, b_input):
  """NKI kernel to compute element-wise addition of two input tensors

  This kernel assumes strict input/output sizes can be uniformly tiled to [128,512]

  Args:
      a_input: a first input tensor
      b_input: a second input tensor

  Returns:
      c_output: an output tensor
  """
  # Create output tensor shared between all SPMD instances as result tensor
  c_output = nl.ndarray(a_input.shape, dtype=a_input.dtype, buffer=nl.shared_hbm)

  # Calculate tile offsets based on current 'program'
  offset_i_x = nl.program_id(0) * 128
  offset_i_y = nl.program_id(1) * 512

  # Generate tensor indices to index tensors a and b
  ix = offset_i_x + nl.arange(128)[:, None]
  iy = offset_i_y + nl.arange(512)[None, :]

  # Load input data from device memory (HBM) to on-chip memory (SBUF)
  # We refer to an indexed portion of a tensor as an intermediate tensor
  a_tile = nl.load(a_input[ix, iy])
  b_tile = nl.load(b_input[ix, iy])

  # compute a + b
  c_tile = a_tile + b_tile

  # store the addition results back to device memory (c_output)
  nl.store(c_output[ix, iy], value=c_tile)

  # Transfer the ownership of `c_output` to the caller
  return c_output


# ---- driver (not from the docs) ----
if __name__ == "__main__":
    import numpy as np

    a = np.random.rand(256, 1024).astype(np.float32)
    b = np.random.rand(256, 1024).astype(np.float32)
    c = nki.simulate_kernel(nki_tensor_add_kernel_[2, 2], a, b)
    np.testing.assert_allclose(c, a + b, rtol=1e-6)
    print("legacy SPMD add on a [2, 2] grid matches NumPy")
