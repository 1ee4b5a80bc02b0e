"""tensor_copy_predicated: dst = src where predicate != 0 (inverted by reverse_pred), dst kept
elsewhere, on VectorE; src is a tile or a scalar [ISA].

Cost (VectorE cycles) [ISAcost] `tensor_copy_predicated`: max(64, N) when one of src/predicate
is in PSUM and the other in SBUF; max(64, 2N) when both are in SBUF."""

from __future__ import annotations

import numpy as np

from ...engines import Engine
from ...program.ap import Memory
from ..common import (READ, WRITE, access_latency, check_not_both_psum, check_operands,
                      check_same_shape, make, stride_factor)

NAME = "tensor_copy_predicated"
OPERANDS = {"dst": WRITE, "src": READ, "predicate": READ}


def build(chip, dst, src, predicate, reverse_pred=False):
    check_operands(NAME, chip, Engine.VECTOR, dst=dst, predicate=predicate, src=src)
    check_same_shape(NAME, "dst", dst, "predicate", predicate, chip)
    tile_src = not isinstance(src, (int, float))
    if tile_src:
        check_same_shape(NAME, "dst", dst, "src", src, chip)
        check_not_both_psum(NAME, "src", src, "predicate", predicate, chip)
    reads = ((src,) if tile_src else ()) + (predicate,)
    per_elem = 1 if any(ap.memory == Memory.PSUM for ap in reads) else 2
    c = max(chip.min_ii_cycles, per_elem * dst.free_size) * stride_factor(chip, dst, predicate)
    return make(NAME, Engine.VECTOR, c, access_latency(chip, 1 + len(reads)), reads, (dst,),
                {"src": src if not tile_src else None, "reverse_pred": bool(reverse_pred)})


def reference(old, src, predicate, reverse_pred=False):
    copied = (np.asarray(predicate) != 0) != bool(reverse_pred)
    return np.where(copied, src, old)


def semantics(state, emit):
    (dst,) = emit.writes
    src = emit.params["src"]
    if src is None:
        src = state.read(emit.reads[0]).reshape(dst.shape)
    pred = state.read(emit.reads[-1]).reshape(dst.shape)
    state.write(dst, reference(state.read(dst), src, pred, emit.params["reverse_pred"]))
