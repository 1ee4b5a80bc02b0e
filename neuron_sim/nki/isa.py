"""``nki.isa``: one function per NeuronCore instruction (NKI 0.3 signatures, ``dst`` first).

Each function (1) checks the hardware rules NKI documents for the instruction, raising an
error that names the kernel line, (2) computes the result on NumPy in float32 and rounds it
to the destination dtype, unless the kernel is traced for time only, and (3) appends the
instruction to the trace, with the attributes the timing model needs.
"""

from __future__ import annotations

import enum
import math

import numpy as np

from ..isa import alu as core_alu
from ..isa.scalar import activation as core_activation
from ..isa.tensor import nc_matmul as core_matmul
from . import dtypes
from .errors import NkiValidationError
from .ops import ALU, AluOp, act, alu
from .tensor import NkiTensor
from .tracer import current, user_loc


# ---- enumerations (NKI names) -------------------------------------------------------------------
class engine(enum.Enum):
    tensor = "tensor"
    vector = "vector"
    scalar = "scalar"
    gpsimd = "gpsimd"
    dma = "dma"
    sync = "sync"
    unknown = "unknown"


class reduce_cmd(enum.Enum):
    idle = "idle"
    reset = "reset"
    reduce = "reduce"
    reset_reduce = "reset_reduce"
    load_reduce = "load_reduce"


class dge_mode(enum.Enum):
    unknown = "unknown"
    swdge = "swdge"
    hwdge = "hwdge"
    none = "none"


class oob_mode(enum.Enum):
    error = "error"
    skip = "skip"


class matmul_perf_mode(enum.Enum):
    none = "none"
    double_row = "double_row"


class nc_version(enum.Enum):
    gen2 = 2
    gen3 = 3
    gen4 = 4


class dma_engine(enum.Enum):
    dma = "dma"
    gpsimd_dma = "gpsimd_dma"


tensor_engine, vector_engine, scalar_engine, gpsimd_engine, unknown_engine = (
    engine.tensor, engine.vector, engine.scalar, engine.gpsimd, engine.unknown)

# Which memories each engine can reach [ArchV2] [ArchV3]: TensorE reads SBUF, writes PSUM;
# GpSimd has no PSUM port; DMA moves between HBM and SBUF (no DMA path into PSUM is documented).
_REACH = {
    "vector": {"sbuf", "psum"}, "scalar": {"sbuf", "psum"}, "gpsimd": {"sbuf"},
    "dma": {"sbuf", "hbm", "shared_hbm", "private_hbm"},
}


# ---- shared checks ---------------------------------------------------------------------------
class _Ctx:
    """Per-instruction context: the trace, the user's line and the instruction name."""

    __slots__ = ("trace", "loc", "op")

    def __init__(self, op):
        self.trace = current()
        self.loc = user_loc()
        self.op = op

    @property
    def target(self):
        return self.trace.target

    @property
    def numerics(self):
        return self.trace.numerics

    def fail(self, msg):
        raise NkiValidationError(msg, self.loc, f"nisa.{self.op}")

    def tensor(self, t, operand):
        if not isinstance(t, NkiTensor):
            self.fail(f"operand {operand!r} must be an NKI tensor, got {type(t).__name__}")
        return t

    def onchip(self, t, operand, allowed=("sbuf", "psum")):
        self.tensor(t, operand)
        if t.buffer not in allowed:
            self.fail(f"operand {operand!r} ({t.storage.describe()}) must be in "
                      f"{' or '.join(b.upper() for b in allowed)}, found {t.buffer.upper()}")
        self.partitions(t, operand)
        return t

    def partitions(self, t, operand):
        if not t.on_chip:
            return
        n, p0 = t.num_partitions, t.partition_start
        if n > self.target.num_partitions or p0 + n > self.target.num_partitions:
            self.fail(f"operand {operand!r} spans partitions [{p0}, {p0 + n}); the core has "
                      f"{self.target.num_partitions} partitions (tile the partition dimension to <= 128)")
        # Partition start rules [ArchV2]: >64 partitions start at 0; 33-64 at 0 or 64; 1-32 at a
        # multiple of 32. The quadrant structure of the engines' lanes imposes them.
        if n > 64:
            ok = p0 == 0
            rule = "more than 64 partitions must start at partition 0"
        elif n > 32:
            ok = p0 in (0, 64)
            rule = "33-64 partitions must start at partition 0 or 64"
        else:
            ok = p0 % 32 == 0
            rule = "1-32 partitions must start at partition 0, 32, 64 or 96"
        if not ok:
            from .errors import NkiPartitionError
            raise NkiPartitionError(
                f"operand {operand!r} accesses {n} partitions starting at partition {p0}: {rule}. "
                f"Re-tile so the access starts on an allowed boundary", self.loc, f"nisa.{self.op}")

    def free_limit(self, t, operand):
        lim = self.target.psum_free_elems_max if t.buffer == "psum" else self.target.sbuf_free_elems_max
        if t.free_size > lim:
            self.fail(f"operand {operand!r} has {t.free_size} elements per partition; the engines accept at "
                      f"most {lim} per instruction from {t.buffer.upper()} (split the free dimension)")

    def same_pf(self, a, b, an, bn):
        if a.num_partitions != b.num_partitions:
            self.fail(f"{an!r} has {a.num_partitions} partitions but {bn!r} has {b.num_partitions}; they must match")
        if a.free_size != b.free_size:
            self.fail(f"{an!r} has {a.free_size} elements per partition but {bn!r} has {b.free_size}; they must match")

    def engine(self, requested, default, allowed, operands=()):
        name = requested.value if isinstance(requested, engine) else (requested or "unknown")
        if name == "unknown":
            name = default
        if name not in allowed:
            self.fail(f"engine {name!r} cannot run this instruction; allowed: {', '.join(allowed)}")
        reach = _REACH.get(name)
        if reach:
            for opname, t in operands:
                if isinstance(t, NkiTensor) and t.buffer not in reach:
                    self.fail(f"the {name} engine cannot access {t.buffer.upper()} (operand {opname!r}, "
                              f"{t.storage.describe()}); "
                              + ("GpSimd has no PSUM port: use engine=nisa.vector_engine"
                                 if name == "gpsimd" else "move the data through SBUF first"))
        return name

    def not_both_psum(self, a, b, an, bn):
        if isinstance(a, NkiTensor) and isinstance(b, NkiTensor) and a.buffer == b.buffer == "psum":
            self.fail(f"{an!r} and {bn!r} cannot both be in PSUM; copy one of them to SBUF first")

    # numerics
    def read(self, t, operand):
        """float32 (P, F) array of an operand; checks it was written."""
        self.trace.check_initialized(t, f"nisa.{self.op}", operand, self.loc)
        if not self.numerics:
            return None
        a = t.np()
        p = t.num_partitions if t.on_chip else 1
        return np.asarray(a, dtype=np.float32).reshape(p, -1)

    def read_raw(self, t, operand):
        self.trace.check_initialized(t, f"nisa.{self.op}", operand, self.loc)
        if not self.numerics:
            return None
        return np.ascontiguousarray(t.np()).reshape(t.num_partitions, -1)

    def write(self, t, values, where=None):
        """Round ``values`` to dst dtype and store them; mark the region written."""
        if self.numerics and values is not None:
            view = t.np()
            dt = dtypes.normalize(t.dtype)
            vals = np.asarray(values).reshape(view.shape)
            if isinstance(dt, dtypes._TFloat32):
                vals = dtypes.round_tf32(vals.astype(np.float32))
            elif view.dtype.kind in "iub" and np.asarray(values).dtype.kind == "f":
                info = np.iinfo(view.dtype) if view.dtype.kind != "b" else None
                vals = np.nan_to_num(np.rint(vals))
                if info is not None:
                    vals = np.clip(vals, info.min, info.max)
            if where is not None:
                vals = np.where(np.asarray(where).reshape(view.shape), vals, view)
            view[...] = vals.astype(view.dtype, copy=False)
        t.mark_written()

    def emit(self, engine_name, reads, writes, **attrs):
        return self.trace.emit(self.op, engine_name, reads, writes, attrs, self.loc)


def _scalar_or_vector(ctx, v, data, operand, allow_scalar=True):
    """A compile-time scalar or a (P, 1) tensor; returns (value-for-numpy, tensor-or-None)."""
    if isinstance(v, NkiTensor):
        ctx.onchip(v, operand)
        if v.num_partitions != data.num_partitions or v.free_size != 1:
            ctx.fail(f"{operand!r} must be a scalar or a tensor of shape ({data.num_partitions}, 1), "
                     f"got shape {v.shape}")
        return ctx.read(v, operand), v
    if v is None:
        return None, None
    if not allow_scalar:
        ctx.fail(f"{operand!r} must be a ({data.num_partitions}, 1) tensor on this target")
    return np.float32(v), None


def _alu(ctx, op, operand="op"):
    try:
        return alu(op)
    except KeyError:
        ctx.fail(f"{operand}={op!r} is not an ALU operator (nl.add, nl.multiply, nl.maximum, ...)")


def _act(ctx, op):
    try:
        return act(op)
    except KeyError:
        ctx.fail(f"op={op!r} is not an activation function (nl.exp, nl.relu, nl.copy, ...)")


_CORE_ALU_OK: dict = {}


def _core_alu_knows(name):
    ok = _CORE_ALU_OK.get(name)
    if ok is None:
        try:
            core_alu.binary(name)
            ok = True
        except Exception:
            ok = False
        _CORE_ALU_OK[name] = ok
    return ok


def _apply(op: AluOp, a, b, reverse=False):
    """The ALU operator's semantics: the simulator core's definition (neuron_sim/isa/alu.py)
    when it has the operator, else the front end's NumPy one (ops.py)."""
    if reverse:
        a, b = b, a
    with np.errstate(all="ignore"):
        if op.kind != "bitvec" and _core_alu_knows(op.name):
            return core_alu.apply(op.name, a, np.asarray(b, dtype=np.float32) if b is not None else b)
        return op.fn(a, b)


def _dtype_str(t):
    return dtypes.name_of(t.dtype)


# ---- instructions ----------------------------------------------------------------------------
def get_nc_version():
    return nc_version(current().target.nc_version)


def _contiguous_runs(t: NkiTensor) -> int:
    """Number of contiguous memory runs (DMA descriptors) needed to move this view."""
    dims = list(zip(t.shape, t.strides))
    start = 1 if t.on_chip else 0
    inner, expect = 1, 1
    for n, st in reversed(dims[start:]):
        if n == 1:
            continue
        if st != expect:
            break
        inner *= n
        expect *= n
    return max(1, t.size // max(inner, 1))


def dma_copy(dst, src, priority=None, oob_mode=oob_mode.error, dge_mode=dge_mode.unknown,
             engine=engine.unknown, name=None):
    ctx = _Ctx("dma_copy")
    ctx.tensor(dst, "dst")
    ctx.tensor(src, "src")
    for opname, t in (("dst", dst), ("src", src)):
        if t.buffer == "psum":
            ctx.fail(f"DMA cannot access PSUM ({opname}={t.storage.describe()}); copy PSUM to SBUF "
                     "with nisa.tensor_copy first")
        ctx.partitions(t, opname)
    if dst.size != src.size:
        ctx.fail(f"src has {src.size} elements but dst has {dst.size}; they must match")
    vals = None
    ctx.trace.check_initialized(src, "nisa.dma_copy", "src", ctx.loc)
    if ctx.numerics:
        raw = np.ascontiguousarray(src.np()).reshape(-1)
        if dtypes.normalize(src.dtype) != dtypes.normalize(dst.dtype):
            raw = raw.astype(np.float32)     # DMA casts through float32 [ISA]
        vals = raw
    ctx.write(dst, vals)
    nbytes = dst.size * dtypes.itemsize(dst.dtype)
    n_desc = max(_contiguous_runs(src), _contiguous_runs(dst))
    ctx.emit("dma", [src], [dst], bytes=nbytes, descriptors=n_desc, src_buffer=src.buffer,
             dst_buffer=dst.buffer, dge_mode=getattr(dge_mode, "value", str(dge_mode)),
             partitions=max(dst.num_partitions, src.num_partitions))


def tensor_copy(dst, src, engine=engine.unknown, name=None):
    ctx = _Ctx("tensor_copy")
    ctx.onchip(dst, "dst")
    ctx.onchip(src, "src")
    ctx.same_pf(dst, src, "dst", "src")
    ctx.free_limit(src, "src")
    eng = ctx.engine(engine, "vector", ("vector", "scalar", "gpsimd"), (("dst", dst), ("src", src)))
    if eng == "scalar" and ctx.target.nc_version < 3:
        ctx.fail("tensor_copy is not supported on the Scalar Engine of NeuronCore-v2; "
                 "use nisa.activation(op=nl.copy) instead")
    same = dtypes.normalize(dst.dtype) == dtypes.normalize(src.dtype)
    vals = ctx.read_raw(src, "src") if same else ctx.read(src, "src")
    ctx.write(dst, vals)
    ctx.emit(eng, [src], [dst], N=src.free_size, P=src.num_partitions, in_dtype=_dtype_str(src),
             out_dtype=_dtype_str(dst), src_buffer=src.buffer, dst_buffer=dst.buffer)


def memset(dst, value, engine=engine.unknown, name=None):
    ctx = _Ctx("memset")
    ctx.onchip(dst, "dst")
    eng = ctx.engine(engine, "vector", ("vector", "gpsimd"), (("dst", dst),))
    ctx.write(dst, np.full(dst.shape, value, dtype=np.float32) if ctx.numerics else None)
    ctx.emit(eng, [], [dst], N=dst.free_size, P=dst.num_partitions, out_dtype=_dtype_str(dst),
             value=float(value), dst_buffer=dst.buffer)


def _mm_checks(ctx, dst, stationary, moving):
    ctx.onchip(stationary, "stationary", ("sbuf",))
    ctx.onchip(moving, "moving", ("sbuf",))
    ctx.onchip(dst, "dst", ("psum",))
    t = ctx.target
    K, M = stationary.num_partitions, stationary.free_size
    K2, N = moving.num_partitions, moving.free_size
    if K != K2:
        ctx.fail(f"stationary and moving must have the same partition (contraction) size: {K} vs {K2}")
    if M > t.gemm_stationary_fmax:
        ctx.fail(f"stationary free size {M} exceeds the {t.gemm_stationary_fmax} columns of the PE array "
                 "(nl.tile_size.gemm_stationary_fmax); tile M")
    out_bf16 = dtypes.normalize(dst.dtype) == dtypes.bfloat16
    nmax = t.gemm_moving_fmax_bf16 if out_bf16 else t.gemm_moving_fmax
    if N > nmax:
        ctx.fail(f"moving free size {N} exceeds {nmax} (nl.tile_size.gemm_moving_fmax: one PSUM bank of "
                 f"{t.psum_bank_bytes // 4} float32 per partition); tile N")
    if dst.num_partitions != M or dst.free_size != N:
        ctx.fail(f"dst must be [{M}, {N}] (stationary free x moving free), got {list(dst.shape)}")
    fp32 = [dtypes.normalize(x.dtype) in (dtypes.float32, dtypes.tfloat32) for x in (stationary, moving)]
    if fp32[0] != fp32[1]:
        ctx.fail("if one matmul input is float32/tfloat32 the other must be too "
                 f"(stationary {_dtype_str(stationary)}, moving {_dtype_str(moving)})")
    okdst = (dtypes.float32, dtypes.bfloat16) if t.nc_version >= 4 else (dtypes.float32,)
    if dtypes.normalize(dst.dtype) not in okdst:
        ctx.fail(f"the PSUM output of a matmul must be {' or '.join(dtypes.name_of(d) for d in okdst)} "
                 f"on this target, got {_dtype_str(dst)}")
    return K, M, N


def nc_matmul(dst, stationary, moving, is_stationary_onezero=False, is_moving_onezero=False,
              is_transpose=False, accumulate=None, tile_position=(), tile_size=(),
              perf_mode=matmul_perf_mode.none, name=None):
    ctx = _Ctx("nc_matmul")
    K, M, N = _mm_checks(ctx, dst, stationary, moving)
    if perf_mode == matmul_perf_mode.double_row and ctx.target.nc_version < 3:
        ctx.fail("perf_mode=double_row needs NeuronCore-v3 or newer")
    s = ctx.read(stationary, "stationary")
    m = ctx.read(moving, "moving")
    if dst.nothing_written():
        mask = np.zeros((M, N), bool)
    elif dst.fully_written():
        mask = np.ones((M, N), bool)
    else:
        mask = np.array(dst.written_mask()).reshape(M, N)
    if accumulate is None:
        acc = mask                       # first write to a PSUM location overwrites [ISA]
    else:
        acc = np.full((M, N), bool(accumulate))
        if accumulate:
            ctx.trace.check_initialized(dst, "nisa.nc_matmul", "dst (accumulate=True)", ctx.loc)
    vals = None
    if ctx.numerics:
        prod = core_matmul.reference(s, m)      # the core's semantics: FP32 accumulation
        old = np.asarray(dst.np(), dtype=np.float32).reshape(M, N)
        vals = np.where(acc, old + prod, prod)
    ctx.write(dst, vals)
    ctx.emit("tensor", [stationary, moving], [dst], K=K, M=M, N=N,
             stationary_dtype=_dtype_str(stationary), moving_dtype=_dtype_str(moving),
             out_dtype=_dtype_str(dst), is_transpose=bool(is_transpose),
             accumulate=bool(acc.any()), perf_mode=getattr(perf_mode, "value", str(perf_mode)),
             onezero=bool(is_stationary_onezero or is_moving_onezero))


def nc_transpose(dst, data, engine=engine.unknown, name=None):
    ctx = _Ctx("nc_transpose")
    ctx.tensor(data, "data")
    P, F = data.num_partitions, data.free_size
    eng = engine.value if hasattr(engine, "value") else engine
    if eng in (None, "unknown"):
        eng = "vector" if P <= 32 and F <= 32 else "tensor"
    if eng == "tensor":
        ctx.onchip(data, "data", ("sbuf",))
        ctx.onchip(dst, "dst", ("psum",))
        if P > 128 or F > 128:
            ctx.fail(f"Tensor Engine transpose takes at most [128, 128], got [{P}, {F}]")
    elif eng == "vector":
        ctx.onchip(data, "data")
        ctx.onchip(dst, "dst")
        if P > 32 or F > 32:
            ctx.fail(f"Vector Engine transpose takes at most [32, 32], got [{P}, {F}]; use engine=nisa.tensor_engine")
    else:
        ctx.fail(f"engine {eng!r} cannot transpose; use nisa.tensor_engine or nisa.vector_engine")
    if dst.num_partitions != F or dst.free_size != P:
        ctx.fail(f"dst must be [{F}, {P}] (the transpose of data [{P}, {F}]), got {list(dst.shape)}")
    if dtypes.normalize(dst.dtype) != dtypes.normalize(data.dtype):
        ctx.fail(f"dst dtype {_dtype_str(dst)} must equal data dtype {_dtype_str(data)}")
    x = ctx.read_raw(data, "data")
    ctx.write(dst, x.T if x is not None else None)
    if eng == "tensor":
        ctx.emit("tensor", [data], [dst], K=P, M=F, N=P, stationary_dtype=_dtype_str(data),
                 moving_dtype=_dtype_str(data), out_dtype=_dtype_str(dst), is_transpose=True,
                 accumulate=False, perf_mode="none", onezero=True, transpose=True)
    else:
        ctx.emit("vector", [data], [dst], N=F, P=P, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst),
                 src_buffer=data.buffer, dst_buffer=dst.buffer, transpose=True)


def _int_path(*ts):
    return all(isinstance(t, NkiTensor) and dtypes.normalize(t.dtype) in (dtypes.int32, dtypes.uint32) for t in ts)


def tensor_tensor(dst, data1, data2, op, engine=engine.unknown, name=None):
    ctx = _Ctx("tensor_tensor")
    for n, t in (("dst", dst), ("data1", data1), ("data2", data2)):
        ctx.onchip(t, n)
    ctx.same_pf(data1, data2, "data1", "data2")
    ctx.same_pf(dst, data1, "dst", "data1")
    ctx.not_both_psum(data1, data2, "data1", "data2")
    ctx.free_limit(data1, "data1")
    o = _alu(ctx, op)
    any_psum = "psum" in (dst.buffer, data1.buffer, data2.buffer)
    default = "gpsimd" if (o.name == "power" or _int_path(dst, data1, data2)) and not any_psum else "vector"
    eng = ctx.engine(engine, default, ("vector", "gpsimd"), (("dst", dst), ("data1", data1), ("data2", data2)))
    if o.kind == "bitvec":
        a, b = ctx.read_raw(data1, "data1"), ctx.read_raw(data2, "data2")
    else:
        a, b = ctx.read(data1, "data1"), ctx.read(data2, "data2")
    ctx.write(dst, _apply(o, a, b) if ctx.numerics else None)
    ctx.emit(eng, [data1, data2], [dst], N=data1.free_size, P=data1.num_partitions, alu=o.name,
             in_dtype=_dtype_str(data1), out_dtype=_dtype_str(dst),
             psum_inputs=sum(t.buffer == "psum" for t in (data1, data2)),
             src_buffer=data1.buffer, dst_buffer=dst.buffer)


def tensor_scalar(dst, data, op0, operand0, reverse0=False, op1=None, operand1=None, reverse1=False,
                  engine=engine.unknown, name=None):
    ctx = _Ctx("tensor_scalar")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.same_pf(dst, data, "dst", "data")
    ctx.free_limit(data, "data")
    o0 = _alu(ctx, op0, "op0")
    o1 = _alu(ctx, op1, "op1") if op1 is not None else None
    if o1 is not None and (o0.kind == "bitvec") != (o1.kind == "bitvec"):
        ctx.fail("op0 and op1 must both be bit-vector or both arithmetic operators")
    eng = ctx.engine(engine, "vector", ("vector", "scalar", "gpsimd"),
                     (("dst", dst), ("data", data), ("operand0", operand0), ("operand1", operand1)))
    if eng == "scalar" and ctx.target.nc_version == 3:
        combo = (o0.name, o1.name if o1 else None)
        if combo not in (("multiply", "add"), ("multiply", None), ("add", None)):
            ctx.fail(f"the Scalar Engine of NeuronCore-v3 supports only multiply+add, multiply or add, got {combo}")
    v0, t0 = _scalar_or_vector(ctx, operand0, data, "operand0")
    v1, t1 = _scalar_or_vector(ctx, operand1, data, "operand1")
    x = ctx.read_raw(data, "data") if o0.kind == "bitvec" else ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        vals = _apply(o0, x, v0, reverse0)
        if o1 is not None:
            vals = _apply(o1, vals, v1, reverse1)
    ctx.write(dst, vals)
    ctx.emit(eng, [data] + [t for t in (t0, t1) if t is not None], [dst], N=data.free_size,
             P=data.num_partitions, alu=o0.name, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst),
             src_buffer=data.buffer, dst_buffer=dst.buffer, op1=o1.name if o1 else None,
             operand0=operand0, operand1=operand1)


def _reduce_axes(ctx, data, axis):
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % data.ndim for a in axes)
    if 0 in axes:
        ctx.fail("the partition axis (0) cannot be reduced by tensor_reduce; transpose first or use nc_matmul "
                 "with a ones vector")
    if sorted(axes) != list(range(data.ndim - len(axes), data.ndim)):
        ctx.fail(f"axis={axis} must be the last contiguous free dimension(s) of the {data.ndim}-D input")
    return axes


def tensor_reduce(dst, op, data, axis, negate=False, keepdims=False, name=None):
    ctx = _Ctx("tensor_reduce")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.free_limit(data, "data")
    axes = _reduce_axes(ctx, data, axis)
    o = _alu(ctx, op)
    if o.reduce is None:
        ctx.fail(f"{o!r} is not a reduction operator (nl.add, nl.maximum, nl.minimum, nl.multiply, bitwise and/or)")
    kept = math.prod(n for d, n in enumerate(data.shape[1:], 1) if d not in axes)
    if dst.num_partitions != data.num_partitions or dst.free_size != kept:
        ctx.fail(f"dst must have {data.num_partitions} partitions and {kept} elements per partition "
                 f"for axis={axis} of data {list(data.shape)}, got {list(dst.shape)}")
    vals = None
    x = ctx.read(data, "data")
    if ctx.numerics:
        xs = x.reshape(data.shape[0], kept, -1)
        vals = o.reduce(xs, axis=2)
        if negate:
            vals = -vals
    ctx.write(dst, vals)
    ctx.emit("vector", [data], [dst], N=data.free_size, P=data.num_partitions, alu=o.name,
             in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst), src_buffer=data.buffer,
             dst_buffer=dst.buffer, reduce=True, negate=bool(negate))


def tensor_partition_reduce(dst, op, data, name=None):
    ctx = _Ctx("tensor_partition_reduce")
    ctx.onchip(dst, "dst", ("sbuf",))
    ctx.onchip(data, "data", ("sbuf",))
    o = _alu(ctx, op)
    if dst.num_partitions != 1 or dst.free_size != data.free_size:
        ctx.fail(f"dst must be [1, {data.free_size}], got {list(dst.shape)}")
    x = ctx.read(data, "data")
    ctx.write(dst, o.reduce(x, axis=0) if ctx.numerics else None)
    ctx.emit("gpsimd", [data], [dst], N=data.free_size, P=data.num_partitions, alu=o.name,
             in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst))


def _regs_update(regs, P, part, cmd, op="add", init=None):
    """Accumulator registers shared by reduce-capable instructions (one float per lane)."""
    cmd = getattr(cmd, "value", cmd)
    ident = {"add": 0.0, "multiply": 1.0, "maximum": -np.inf, "minimum": np.inf}.get(op, 0.0)
    if cmd in ("reset", "reset_reduce"):
        regs[:P] = ident
    if cmd == "load_reduce":
        regs[:P] = init if init is not None else 0.0
    if cmd in ("reduce", "reset_reduce", "load_reduce") and part is not None:
        fn = {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum}[op]
        regs[:P] = fn(regs[:P], part)
    return regs[:P].copy()


def activation(dst, op, data, bias=None, scale=1.0, reduce_op=None, reduce_res=None,
               reduce_cmd=reduce_cmd.idle, name=None):
    ctx = _Ctx("activation")
    _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd)


def activation_reduce(dst, op, data, reduce_op, reduce_res, bias=None, scale=1.0, name=None):
    ctx = _Ctx("activation_reduce")
    _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, reduce_cmd.reset_reduce)


def _activation(ctx, dst, op, data, bias, scale, reduce_op, reduce_res, cmd):
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.same_pf(dst, data, "dst", "data")
    ctx.free_limit(data, "data")
    f = _act(ctx, op)
    P = data.num_partitions
    sv, st = _scalar_or_vector(ctx, scale, data, "scale")
    bv, bt = _scalar_or_vector(ctx, bias, data, "bias", allow_scalar=ctx.target.nc_version >= 3)
    rop = None
    if reduce_op is not None:
        rop = _alu(ctx, reduce_op, "reduce_op")
        if ctx.target.nc_version < 3 and rop.name != "add":
            ctx.fail("on NeuronCore-v2 the activation reduction must be nl.add")
    if reduce_res is not None:
        ctx.onchip(reduce_res, "reduce_res")
        if reduce_res.num_partitions != P or reduce_res.free_size != 1:
            ctx.fail(f"reduce_res must be [{P}, 1], got {list(reduce_res.shape)}")
    x = ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        sc = sv if sv is not None else np.float32(1.0)
        bi = bv if bv is not None else np.float32(0.0)
        if f.name in core_activation.FUNCTIONS:      # the core's semantics for ScalarE functions
            vals = core_activation.reference(x, f.name, sc, bi)
        else:
            with np.errstate(all="ignore"):
                vals = f.fn(x * sc + bi).astype(np.float32)
        part = None
        if rop is not None:
            part = rop.reduce(vals, axis=1)
        regs = _regs_update(ctx.trace.act_regs, P, part, cmd, rop.name if rop else "add")
    ctx.write(dst, vals)
    writes = [dst]
    if reduce_res is not None:
        ctx.write(reduce_res, regs if ctx.numerics else None)
        writes.append(reduce_res)
    ctx.emit("scalar", [data] + [t for t in (st, bt) if t is not None], writes, N=data.free_size, P=P,
             func=f.name, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst), src_buffer=data.buffer,
             dst_buffer=dst.buffer, reduce_readout=reduce_res is not None, bias=bias, scale=scale,
             reduce_op=rop.name if rop else None)


def iota(dst, pattern, offset=0, channel_multiplier=0, name=None):
    ctx = _Ctx("iota")
    ctx.onchip(dst, "dst", ("sbuf",))
    vals = _affine(ctx, dst, pattern, offset, channel_multiplier)
    ctx.write(dst, vals)
    ctx.emit("gpsimd", [], [dst], N=dst.free_size, P=dst.num_partitions, out_dtype=_dtype_str(dst),
             pattern=[tuple(int(v) for v in x) for x in pattern], offset=int(offset),
             channel_multiplier=int(channel_multiplier))


def _affine(ctx, dst, pattern, offset, channel_multiplier):
    pat = [(int(s), int(n)) for s, n in pattern]
    count = math.prod(n for _, n in pat)
    if count != dst.free_size:
        ctx.fail(f"the pattern describes {count} elements per partition but dst has {dst.free_size}")
    if not ctx.numerics:
        return None
    v = np.zeros((1,), np.int64)
    for step, n in pat:
        v = (v[:, None] + step * np.arange(n)[None, :]).reshape(-1)
    ch = np.arange(dst.num_partitions, dtype=np.int64)[:, None] * int(channel_multiplier)
    return (int(offset) + ch + v[None, :]).astype(np.float64)


def affine_select(dst, pattern, channel_multiplier, on_true_tile, on_false_value, cmp_op=None,
                  offset=0, name=None):
    ctx = _Ctx("affine_select")
    ctx.onchip(dst, "dst", ("sbuf",))
    ctx.onchip(on_true_tile, "on_true_tile", ("sbuf",))
    ctx.same_pf(dst, on_true_tile, "dst", "on_true_tile")
    cmp = _alu(ctx, cmp_op if cmp_op is not None else ALU["equal"], "cmp_op")
    aff = _affine(ctx, dst, pattern, offset, channel_multiplier)
    x = ctx.read(on_true_tile, "on_true_tile")
    vals = None
    if ctx.numerics:
        pred = cmp.fn(aff, np.zeros_like(aff)) != 0
        vals = np.where(pred, x, np.float32(on_false_value))
    ctx.write(dst, vals)
    ctx.emit("gpsimd", [on_true_tile], [dst], N=dst.free_size, P=dst.num_partitions,
             in_dtype=_dtype_str(on_true_tile), out_dtype=_dtype_str(dst),
             pattern=[tuple(int(v) for v in x) for x in pattern], offset=int(offset),
             channel_multiplier=int(channel_multiplier), on_false_value=float(on_false_value), cmp=cmp.name)


def tensor_copy_predicated(dst, src, predicate, reverse_pred=False, name=None):
    ctx = _Ctx("tensor_copy_predicated")
    ctx.onchip(dst, "dst")
    ctx.onchip(predicate, "predicate")
    ctx.same_pf(dst, predicate, "dst", "predicate")
    if isinstance(src, NkiTensor):
        ctx.onchip(src, "src")
        ctx.same_pf(dst, src, "dst", "src")
        ctx.not_both_psum(src, predicate, "src", "predicate")
    pred = ctx.read(predicate, "predicate")
    x = ctx.read(src, "src") if isinstance(src, NkiTensor) else np.float32(src)
    where = None
    if ctx.numerics:
        where = (pred != 0) != bool(reverse_pred)
        x = np.broadcast_to(x, where.shape)
    ctx.write(dst, x if ctx.numerics else None, where=where)
    ctx.emit("vector", [t for t in (src, predicate) if isinstance(t, NkiTensor)], [dst], N=dst.free_size,
             P=dst.num_partitions, in_dtype=_dtype_str(dst), out_dtype=_dtype_str(dst),
             psum_inputs=sum(isinstance(t, NkiTensor) and t.buffer == "psum" for t in (src, predicate)),
             src_buffer=predicate.buffer, dst_buffer=dst.buffer)


def select(dst, predicate, on_true, on_false, name=None):
    """``dst = predicate ? on_true : on_false`` element-wise on VectorE (the core's ``select``;
    ``nl.where`` lowers to it)."""
    ctx = _Ctx("select")
    for n, t in (("dst", dst), ("predicate", predicate), ("on_true", on_true), ("on_false", on_false)):
        ctx.onchip(t, n)
    for n, t in (("predicate", predicate), ("on_true", on_true), ("on_false", on_false)):
        ctx.same_pf(dst, t, "dst", n)
    pr, a, b = ctx.read(predicate, "predicate"), ctx.read(on_true, "on_true"), ctx.read(on_false, "on_false")
    from ..isa.vector import select as core_select
    ctx.write(dst, core_select.reference(pr, a, b) if ctx.numerics else None)
    ctx.emit("vector", [predicate, on_true, on_false], [dst], N=dst.free_size, P=dst.num_partitions,
             in_dtype=_dtype_str(on_true), out_dtype=_dtype_str(dst), src_buffer=on_true.buffer,
             dst_buffer=dst.buffer)


def bn_stats(dst, data, name=None):
    ctx = _Ctx("bn_stats")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    F = data.free_size
    if F > ctx.target.bn_stats_fmax:
        ctx.fail(f"bn_stats takes at most {ctx.target.bn_stats_fmax} elements per partition "
                 f"(nl.tile_size.bn_stats_fmax), got {F}; call it per 512-element chunk and bn_aggr the results")
    if dst.num_partitions != data.num_partitions or dst.free_size != 6:
        ctx.fail(f"dst must be [{data.num_partitions}, 6], got {list(dst.shape)}")
    x = ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        cols = []
        for half in (x[:, 0::2], x[:, 1::2]):
            n = half.shape[1]
            mean = half.mean(axis=1) if n else np.zeros(x.shape[0], np.float32)
            m2 = ((half - mean[:, None]) ** 2).sum(axis=1) if n else np.zeros(x.shape[0], np.float32)
            cols += [np.full(x.shape[0], n, np.float32), mean, m2]
        vals = np.stack(cols, axis=1)
    ctx.write(dst, vals)
    ctx.emit("vector", [data], [dst], N=F, P=data.num_partitions, in_dtype=_dtype_str(data),
             out_dtype=_dtype_str(dst), src_buffer=data.buffer, dst_buffer=dst.buffer)


def bn_aggr(dst, data, name=None):
    ctx = _Ctx("bn_aggr")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    if data.free_size % 3:
        ctx.fail(f"bn_aggr input must hold (count, mean, var*count) triples; {data.free_size} elements "
                 "per partition is not a multiple of 3")
    if dst.num_partitions != data.num_partitions or dst.free_size != 2:
        ctx.fail(f"dst must be [{data.num_partitions}, 2], got {list(dst.shape)}")
    x = ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        t = x.reshape(x.shape[0], -1, 3).astype(np.float64)
        cnt, mean, m2 = t[..., 0], t[..., 1], t[..., 2]
        total = cnt.sum(axis=1)
        gmean = (cnt * mean).sum(axis=1) / np.maximum(total, 1)
        gm2 = (m2 + cnt * (mean - gmean[:, None]) ** 2).sum(axis=1)
        vals = np.stack([gmean, gm2 / np.maximum(total, 1)], axis=1).astype(np.float32)
    ctx.write(dst, vals)
    ctx.emit("vector", [data], [dst], N=data.free_size, P=data.num_partitions, in_dtype=_dtype_str(data),
             out_dtype=_dtype_str(dst), src_buffer=data.buffer, dst_buffer=dst.buffer, aggr=True)


def reciprocal(dst, data, name=None):
    ctx = _Ctx("reciprocal")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.same_pf(dst, data, "dst", "data")
    x = ctx.read(data, "data")
    with np.errstate(all="ignore"):
        ctx.write(dst, (np.float32(1.0) / x) if ctx.numerics else None)
    ctx.emit("vector", [data], [dst], N=data.free_size, P=data.num_partitions, in_dtype=_dtype_str(data),
             out_dtype=_dtype_str(dst), src_buffer=data.buffer, dst_buffer=dst.buffer, reciprocal=True)


def exponential(dst, src, max_value=0.0, reduce_res=None, reduce_cmd=reduce_cmd.idle, reduce_init=0.0, name=None):
    ctx = _Ctx("exponential")
    if ctx.target.nc_version < 4:
        ctx.fail("nisa.exponential is available only on NeuronCore-v4 (trn3); use nisa.activation(op=nl.exp) "
                 "with bias=-max on this target")
    ctx.onchip(dst, "dst")
    ctx.onchip(src, "src")
    ctx.same_pf(dst, src, "dst", "src")
    mv, mt = _scalar_or_vector(ctx, max_value, src, "max_value")
    x = ctx.read(src, "src")
    vals = None
    if ctx.numerics:
        with np.errstate(all="ignore"):
            vals = np.exp(x - mv).astype(np.float32)
        regs = _regs_update(ctx.trace.vec_regs, src.num_partitions, vals.sum(axis=1), reduce_cmd, "add", reduce_init)
    ctx.write(dst, vals)
    writes = [dst]
    if reduce_res is not None:
        ctx.onchip(reduce_res, "reduce_res")
        ctx.write(reduce_res, regs if ctx.numerics else None)
        writes.append(reduce_res)
    ctx.emit("vector", [src] + ([mt] if mt is not None else []), writes, N=src.free_size, P=src.num_partitions,
             in_dtype=_dtype_str(src), out_dtype=_dtype_str(dst), src_buffer=src.buffer,
             dst_buffer=dst.buffer, exp=True, max_value=max_value)


def tensor_tensor_scan(dst, data0, data1, initial, op0, op1, reverse0=False, reverse1=False, name=None):
    ctx = _Ctx("tensor_tensor_scan")
    for n, t in (("dst", dst), ("data0", data0), ("data1", data1)):
        ctx.onchip(t, n)
    ctx.same_pf(data0, data1, "data0", "data1")
    ctx.same_pf(dst, data0, "dst", "data0")
    ctx.not_both_psum(data0, data1, "data0", "data1")
    o0, o1 = _alu(ctx, op0, "op0"), _alu(ctx, op1, "op1")
    iv, it = _scalar_or_vector(ctx, initial, data0, "initial")
    a, b = ctx.read(data0, "data0"), ctx.read(data1, "data1")
    vals = None
    if ctx.numerics:
        vals = np.empty_like(a)
        prev = np.broadcast_to(iv, (a.shape[0], 1))[:, 0] if iv is not None else np.zeros(a.shape[0], np.float32)
        with np.errstate(all="ignore"):
            for i in range(a.shape[1]):
                prev = _apply(o1, _apply(o0, a[:, i], prev, reverse0), b[:, i], reverse1).astype(np.float32)
                vals[:, i] = prev
    ctx.write(dst, vals)
    ctx.emit("vector", [data0, data1] + ([it] if it is not None else []), [dst], N=data0.free_size,
             P=data0.num_partitions, alu=o1.name, in_dtype=_dtype_str(data0), out_dtype=_dtype_str(dst),
             psum_inputs=sum(t.buffer == "psum" for t in (data0, data1)), src_buffer=data0.buffer,
             dst_buffer=dst.buffer, scan=True, op0=o0.name, initial=initial)


def scalar_tensor_tensor(dst, data, op0, operand0, op1, operand1, reverse0=False, reverse1=False, name=None):
    ctx = _Ctx("scalar_tensor_tensor")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.onchip(operand1, "operand1")
    ctx.same_pf(dst, data, "dst", "data")
    ctx.same_pf(data, operand1, "data", "operand1")
    ctx.not_both_psum(data, operand1, "data", "operand1")
    o0, o1 = _alu(ctx, op0, "op0"), _alu(ctx, op1, "op1")
    v0, t0 = _scalar_or_vector(ctx, operand0, data, "operand0")
    x, y = ctx.read(data, "data"), ctx.read(operand1, "operand1")
    ctx.write(dst, _apply(o1, _apply(o0, x, v0, reverse0), y, reverse1) if ctx.numerics else None)
    ctx.emit("vector", [data, operand1] + ([t0] if t0 is not None else []), [dst], N=data.free_size,
             P=data.num_partitions, alu=o1.name, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst),
             psum_inputs=sum(t.buffer == "psum" for t in (data, operand1)), src_buffer=data.buffer,
             dst_buffer=dst.buffer)


def tensor_scalar_reduce(dst, data, op0, operand0, reduce_op, reduce_res, reverse0=False,
                         reduce_cmd=reduce_cmd.reset_reduce, reduce_init=None, name=None):
    ctx = _Ctx("tensor_scalar_reduce")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.onchip(reduce_res, "reduce_res")
    ctx.same_pf(dst, data, "dst", "data")
    o0, ro = _alu(ctx, op0, "op0"), _alu(ctx, reduce_op, "reduce_op")
    v0, t0 = _scalar_or_vector(ctx, operand0, data, "operand0")
    x = ctx.read(data, "data")
    vals = regs = None
    if ctx.numerics:
        vals = _apply(o0, x, v0, reverse0).astype(np.float32)
        regs = _regs_update(ctx.trace.vec_regs, data.num_partitions, ro.reduce(vals, axis=1), reduce_cmd,
                            ro.name, reduce_init)
    ctx.write(dst, vals)
    ctx.write(reduce_res, regs)
    ctx.emit("vector", [data] + ([t0] if t0 is not None else []), [dst, reduce_res], N=data.free_size,
             P=data.num_partitions, alu=o0.name, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst),
             src_buffer=data.buffer, dst_buffer=dst.buffer, reduce_readout=True)


def max8(dst, src, name=None):
    ctx = _Ctx("max8")
    ctx.onchip(dst, "dst")
    ctx.onchip(src, "src")
    if not 8 <= src.free_size <= 16384:
        ctx.fail(f"max8 reads 8 to 16384 elements per partition, got {src.free_size}")
    if dst.num_partitions != src.num_partitions or dst.free_size != 8:
        ctx.fail(f"dst must be [{src.num_partitions}, 8], got {list(dst.shape)}")
    x = ctx.read(src, "src")
    ctx.write(dst, -np.sort(-x, axis=1)[:, :8] if ctx.numerics else None)
    ctx.emit("vector", [src], [dst], N=src.free_size, P=src.num_partitions, in_dtype=_dtype_str(src),
             out_dtype=_dtype_str(dst), src_buffer=src.buffer, dst_buffer=dst.buffer, reduce=True)


def dropout(dst, data, prob, name=None):
    ctx = _Ctx("dropout")
    ctx.onchip(dst, "dst")
    ctx.onchip(data, "data")
    ctx.same_pf(dst, data, "dst", "data")
    pv, pt = _scalar_or_vector(ctx, prob, data, "prob")
    x = ctx.read(data, "data")
    vals = None
    if ctx.numerics:
        rng = np.random.default_rng(len(ctx.trace.instrs))   # deterministic per instruction
        keep = rng.random(x.shape, dtype=np.float32) >= pv
        vals = np.where(keep, x, np.float32(0))
    ctx.write(dst, vals)
    ctx.emit("vector", [data] + ([pt] if pt is not None else []), [dst], N=data.free_size,
             P=data.num_partitions, in_dtype=_dtype_str(data), out_dtype=_dtype_str(dst),
             src_buffer=data.buffer, dst_buffer=dst.buffer)


def core_barrier(*args, **kwargs):
    ctx = _Ctx("core_barrier")
    ctx.fail("core_barrier between the two cores of an LNC=2 launch is not simulated yet: the simulator "
             "traces the two programs one after the other")


def sendrecv(*args, **kwargs):
    ctx = _Ctx("sendrecv")
    ctx.fail("sendrecv between the two cores of an LNC=2 launch is not simulated yet")


__all__ = [n for n in dir() if not n.startswith("_") and n not in ("annotations", "enum", "math", "np")]
