"""Constructed programs with known verdicts for the Explorer summary tests (torch-free)."""

from neuron_sim.program import ProgramBuilder


def dma_bound(chip="trn2"):
    """Stream 8 MiB through SBUF with one cheap VectorE op per tile: DMA sets the time."""
    b = ProgramBuilder(chip)
    src = b.hbm("src", (128, 16 * 4096), "bfloat16")
    dst = b.hbm("dst", (128, 16 * 4096), "bfloat16")
    for j in range(16):
        t = b.sbuf(f"t{j % 3}_{j}", (128, 4096), "bfloat16")
        b.dma_copy(t, src[0:128, j * 4096:(j + 1) * 4096])
        b.tensor_scalar(t, t, "multiply", 2.0)
        b.dma_copy(dst[0:128, j * 4096:(j + 1) * 4096], t)
        b.free(t)
    return b


def compute_bound(chip="trn2"):
    """Load two 128x512 tiles once, then 64 full-size matmuls on them: TensorE sets the time."""
    b = ProgramBuilder(chip)
    A = b.hbm("A", (128, 128), "bfloat16")
    X = b.hbm("X", (128, 512), "bfloat16")
    C = b.hbm("C", (128, 512), "float32")
    a = b.sbuf("a", (128, 128), "bfloat16")
    x = b.sbuf("x", (128, 512), "bfloat16")
    acc = b.psum("acc", (128, 512), "float32")
    o = b.sbuf("o", (128, 512), "float32")
    b.dma_copy(a, A)
    b.dma_copy(x, X)
    for k in range(64):
        b.nc_matmul(acc, stationary=a, moving=x, accumulate=k > 0)
    b.tensor_copy(o, acc)
    b.dma_copy(C, o)
    return b


def spilling(chip="trn2"):
    """Each tile is saved to an HBM scratch tensor and reloaded before use: spill traffic."""
    b = ProgramBuilder(chip)
    src = b.hbm("src", (128, 8 * 2048), "bfloat16")
    scratch = b.hbm("scratch", (128, 8 * 2048), "bfloat16")
    dst = b.hbm("dst", (128, 8 * 2048), "bfloat16")
    for j in range(8):
        sl = slice(j * 2048, (j + 1) * 2048)
        t = b.sbuf(f"t{j}", (128, 2048), "bfloat16")
        b.dma_copy(t, src[0:128, sl])
        b.dma_copy(scratch[0:128, sl], t)           # spill save
        b.dma_copy(t, scratch[0:128, sl])           # spill reload
        b.dma_copy(t, scratch[0:128, sl])           # reloaded twice
        b.tensor_scalar(t, t, "add", 1.0)
        b.dma_copy(dst[0:128, sl], t)
        b.free(t)
    return b
