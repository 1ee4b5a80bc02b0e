"""Partition broadcasts as the instructions the hardware needs for them.

`t.broadcast_to((128, F))` of a one-partition SBUF tile is a view with partition stride 0. No
engine reads one partition into all lanes: a partition-dimension broadcast "requires a separate
instruction on TensorE" [Mamba], a matmul of a ones row by the tile (TensorE's partition
broadcast, [ArchV2] "TensorE alternative use"). When a VectorE or ScalarE instruction takes
such a view as an operand, the trace records, just before it:

- F <= one PSUM bank (512 FP32): `nc_matmul(psum[P, F], stationary=ones[1, P], moving=tile)`,
  and the instruction reads the PSUM tile instead (VectorE then takes one SBUF and one PSUM
  input, the single-pass case of the cost table [ISAcost]);
- larger F: that matmul per bank-sized column block, each drained to an SBUF tile by a ScalarE
  copy (`activation(copy)`), and the instruction reads the SBUF tile.

The broadcast values are exactly the tile's (a product with 1.0, FP32 accumulation), so the
numerics, already computed from the view, are unchanged. GpSimd consumers (no PSUM port) and
TensorE/DMA operands keep the view (DMA reads broadcast natively)."""

from __future__ import annotations

from .tensor import NkiTensor

CONSUMERS = ("vector", "scalar")      # the engines whose operands are lowered here


def is_partition_broadcast(v) -> bool:
    return (isinstance(v, NkiTensor) and v.on_chip and v.shape[0] > 1 and v.strides[0] == 0)


def lower(trace, reads, attrs):
    """(reads, attrs) of an instruction on one of the CONSUMERS with every partition-broadcast
    operand replaced by the tile a broadcast instruction wrote (recorded on `trace` first)."""
    # (the instructions _broadcast records read no partition broadcast: no recursion)
    repl = {}
    for v in reads:
        if is_partition_broadcast(v) and id(v) not in repl:
            repl[id(v)] = _broadcast(trace, v)
    if not repl:
        return reads, attrs
    reads = [repl.get(id(v), v) for v in reads]
    attrs = {k: repl.get(id(x), x) if isinstance(x, NkiTensor) else x
             for k, x in attrs.items()}
    return reads, attrs


def _ones(trace, P, dtype):
    """A ones row of the tile's dtype (1.0 is exact in every float format), one per kernel."""
    cache = trace.__dict__.setdefault("_bcast_ones", {})
    key = (P, str(dtype))
    t = cache.get(key)
    if t is None:
        from . import isa as nisa
        from . import language as nl
        t = nl.ndarray((1, P), dtype=dtype, buffer=nl.sbuf, name="partition_bcast_ones")
        nisa.memset(dst=t, value=1.0)
        cache[key] = t
    return t


def _broadcast(trace, v):
    from . import isa as nisa
    from . import language as nl
    P = v.shape[0]
    shape = tuple(v.shape)
    try:
        src = NkiTensor(v.storage, (1,) + shape[1:],
                        (v.storage.free_elems,) + tuple(v.strides[1:]), v.offset)
        src = src.reshape((1, v.free_size))
    except Exception:       # a free-dimension pattern a 2-D view cannot express: left as is
        return v
    F = v.free_size
    ones = _ones(trace, P, v.dtype)
    bank = trace.target.psum_bank_fp32_elems
    if F <= bank:
        out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.psum, name="partition_bcast")
        nisa.nc_matmul(dst=out, stationary=ones, moving=src)
        return out.reshape(shape)
    out = nl.ndarray((P, F), dtype=v.dtype, buffer=nl.sbuf, name="partition_bcast")
    for c0 in range(0, F, bank):
        w = min(bank, F - c0)
        ps = nl.ndarray((P, w), dtype=nl.float32, buffer=nl.psum, name="partition_bcast_bank")
        nisa.nc_matmul(dst=ps, stationary=ones, moving=src[:, c0:c0 + w])
        nisa.activation(dst=out[:, c0:c0 + w], op=nl.copy, data=ps)
    return out.reshape(shape)
