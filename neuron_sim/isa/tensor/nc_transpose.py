"""nc_transpose: dst[F, P] = src[P, F].

TensorE: a matmul against the identity, written to PSUM; cost max(P, min(64, F)) TensorE cycles
back to back [ISAcost]. Bit-exact (is_transpose mode, NC-v3+) [ArchV3].
VectorE: 32x32 blocks through the reshape banks; cost max(64, N) VectorE cycles, P and F <= 32
[ISAcost][ArchV2]."""

from __future__ import annotations

from math import ceil

from ...engines import Engine, Kind
from ...errors import FreeSizeError, PartitionError, ProgramError
from ..common import READ, WRITE, access_latency, check_operands, make

NAME = "nc_transpose"
PURE = True
ENGINES = (Engine.TENSOR, Engine.VECTOR)
OPERANDS = {"dst": WRITE, "data": READ}


def default_engine(chip, data, **_):
    """The compiler's choice: VectorE for a tile within one reshape bank, else TensorE."""
    small = max(data.p_size, data.free_size) <= chip.vector_transpose_block_max
    return Engine.VECTOR if small else Engine.TENSOR


def check_views(dst, data, **_):
    """NKI's rule: no conversion on the way (the lowering may transpose into FP32 PSUM)."""
    if dst.storage.dtype_name != data.storage.dtype_name:
        raise ProgramError(f"dst dtype {dst.storage.dtype_name} must equal data dtype "
                           f"{data.storage.dtype_name}")


def build(chip, dst, data, engine=Engine.TENSOR):
    p, f = data.p_size, data.free_size
    if dst.p_size != f or dst.free_size != p:
        raise PartitionError(NAME, "dst", f"shape [{f}, {p}]", list(dst.shape), chip.name)
    check_operands(NAME, chip, engine, data=data, dst=dst)
    if engine == Engine.TENSOR:
        ls = make("load_stationary", Engine.TENSOR, ceil(f / chip.fast_load_stationary_speedup), 0,
                  (data,), (), {}, kind=Kind.LOAD_STATIONARY)
        mm = make(NAME, Engine.TENSOR, max(p, min(chip.mm_init_latency_cycles, f)),
                  chip.tensor_mm_latency_extra_cycles, (data,), (dst,), {},
                  kind=Kind.MULTIPLY_MOVING, flops=2.0 * p * f * p)
        return [ls, mm]
    block = chip.vector_transpose_block_max     # one reshape bank
    if p > block or f > block:
        raise FreeSizeError(NAME, "src", f"P <= {block} and F <= {block} on VectorE (one reshape "
                            "bank)", [p, f], chip.name, "use engine='tensor' for larger tiles")
    return [make(NAME, engine, max(chip.min_ii_cycles, f), access_latency(chip, 2), (data,),
                 (dst,), {})]


def reference(x):
    return x.T.copy()


def semantics(state, emit):
    if emit.name != NAME:
        return
    (src,), (dst,) = emit.reads, emit.writes
    if src.dtype == dst.dtype:   # bit-exact, NaN/Inf included [ArchV3]
        state.write_raw(dst, reference(state.read_raw(src).reshape(src.p_size, -1)))
    else:
        state.write(dst, reference(state.read(src).reshape(src.p_size, -1)).reshape(dst.shape))
