# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/nki/get-started/quickstart-implement-run-kernel.html
# (aws-neuron/aws-neuron-sdk nki/get-started/quickstart-implement-run-kernel.rst, step 7: add_kernel.py)
# The kernel is verbatim. The page's drivers use torch_xla or JAX (see nki_quickstart_test_program_xla.py);
# the driver below (not from the docs) calls the same kernel the TorchNeuron way, on 'neuron' tensors,
# with the page's inputs and the output the page shows.
import nki
import nki.language as nl
import nki.isa as nisa

@nki.jit(platform_target="trn1")
def nki_tensor_add_kernel(a_input, b_input):
    """
    NKI kernel to compute element-wise addition of two input tensors.
    """

    # Check both input tensor shapes are the same for element-wise operation.
    assert a_input.shape == b_input.shape

    # Check the first dimension's size to ensure it does not exceed on-chip
    # memory tile size, since this simple kernel does not tile inputs.
    assert a_input.shape[0] <= nl.tile_size.pmax

    # Allocate space for the input tensors in SBUF and copy the inputs from HBM
    # to SBUF with DMA copy. Note: 'sbuf' is a keyword in NKI.
    a_tile = sbuf.view(dtype=a_input.dtype, shape=a_input.shape)
    nisa.dma_copy(dst=a_tile, src=a_input)

    b_tile = sbuf.view(dtype=b_input.dtype, shape=b_input.shape)
    nisa.dma_copy(dst=b_tile, src=b_input)

    # Allocate space for the result and use tensor_tensor to perform
    # element-wise addition. Note: the first argument of 'tensor_tensor'
    # is the destination tensor.
    c_tile = sbuf.view(dtype=a_input.dtype, shape=a_input.shape)
    nisa.tensor_tensor(dst=c_tile, data1=a_tile, data2=b_tile, op=nl.add)

    # Create a tensor in HBM and copy the result into HBM. Note: Simlar to
    # 'sbuf', 'hbm' is a keyword in NKI.
    c_output = hbm.view(dtype=a_input.dtype, shape=a_input.shape)
    nisa.dma_copy(dst=c_output, src=c_tile)

    # Return kernel output as function output.
    return c_output


# ---- driver (not from the docs) ----
if __name__ == "__main__":
    import torch

    a = torch.ones((4, 3), dtype=torch.float16).to(device="neuron")
    b = torch.ones((4, 3), dtype=torch.float16).to(device="neuron")
    c = nki_tensor_add_kernel(a, b)
    print(c)
    assert c.device.type == "neuron"
    torch.testing.assert_close(c.cpu(), torch.full((4, 3), 2.0, dtype=torch.float16))
