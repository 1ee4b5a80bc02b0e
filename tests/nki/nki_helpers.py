"""Kernel helpers shared by the NKI tests (a uniquely named module: several test folders have a
conftest.py, so `from conftest import ...` would be ambiguous)."""

import nki.isa as nisa
import nki.language as nl


def to_hbm(*tiles):
    """Kernel helper: each tile copied to a new HBM output, returned as a tuple."""
    outs = []
    for t in tiles:
        o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=o, src=t)
        outs.append(o)
    return tuple(outs)
