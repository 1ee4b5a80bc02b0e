"""The program shape of the semantics tests: inputs loaded from HBM into SBUF tiles, a few
instructions, outputs stored to HBM (a uniquely named module, as tests/shared/device_time.py:
several test folders have a conftest.py)."""

import neuron_sim as ns


def tile_program(build, inputs, outputs, chip="trn2"):
    """(program, what build returned): each input {name: (shape, dtype)} is DMA'd from HBM tensor
    `name` into an SBUF tile of its shape and dtype, build(builder, input tiles, output tiles) adds
    the instructions under test, and each output tile {name: (shape, dtype)} is DMA'd to HBM
    tensor `name`."""
    b = ns.ProgramBuilder(chip)
    hbm = {k: b.hbm(k, shape, dtype) for k, (shape, dtype) in inputs.items()}
    tiles = {k: b.sbuf(k + "_s", shape, dtype) for k, (shape, dtype) in inputs.items()}
    for k in inputs:
        b.dma_copy(tiles[k], hbm[k])
    outs = {k: b.sbuf(k + "_s", shape, dtype) for k, (shape, dtype) in outputs.items()}
    ret = build(b, tiles, outs)
    for k, (shape, dtype) in outputs.items():
        b.dma_copy(b.hbm(k, shape, dtype), outs[k])
    return b.build(), ret
