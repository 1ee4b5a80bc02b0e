"""DMA instructions: dma_copy, dma_transpose, sendrecv."""
