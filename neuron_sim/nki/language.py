"""``nki.language``: tensor creation, loops, SPMD ids, tile-size constants and high-level ops.

High-level operations (``nl.add``, ``nl.exp``, ``nl.sum``, ``nl.matmul``, ``nl.load`` ...) are
convenience wrappers: each allocates its result tile and emits the ``nki.isa`` instruction(s)
that compute it, so they are traced, checked and timed like hand-written ISA calls.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

from . import dtypes as _dt
from . import isa as _isa
from .dtypes import (bfloat16, bool_, float4_e2m1fn_x4, float8_e4m3, float8_e4m3fn,  # noqa: F401
                     float8_e4m3fn_x4, float8_e5m2, float8_e5m2_x4, float8_e8m0fnu, float16,
                     float32, int8, int16, int32, tfloat32, uint8, uint16, uint32)
from .errors import NkiValidationError
from .ops import ACT, ALU, ActFn, AluOp
from .target import DEFAULT_TARGET, get_target
from .tensor import IndexRange, NkiTensor, make_view
from .tracer import active, current, user_loc


# ---- memories -------------------------------------------------------------------------------
class _Buffer(str):
    """``nl.sbuf``/``nl.psum``/``nl.hbm``: compare equal to their names; ``.view()`` allocates.

    ``nl.sbuf.view(dtype=, shape=)`` is the form the NKI quickstart uses (``sbuf.view`` inside a
    kernel). ``nl.sbuf.view(..., address=(start_partition, byte_offset))`` places the tensor
    explicitly; explicitly placed tensors are checked for overlaps instead of auto-allocated.
    """

    def view(self, dtype, shape, name=None, address=None):
        return ndarray(shape, dtype, buffer=self, name=name, address=address)


sbuf, psum = _Buffer("sbuf"), _Buffer("psum")
hbm, shared_hbm, private_hbm = _Buffer("hbm"), _Buffer("shared_hbm"), _Buffer("private_hbm")


class tile_size:
    """Tile-size constants of the current target [Tile]: the sizes are the chip data's, set by
    `_sync_tile_size` when a kernel starts (and for the default target at import)."""

    bn_stats_dim = 6
    bn_aggr_dim = 2
    psum_min_align = 4
    sbuf_min_align = 1


def _sync_tile_size(target) -> None:
    """Called at kernel start so nl.tile_size reflects the launch target."""
    tile_size.pmax = target.sbuf_partitions
    tile_size.psum_fmax = target.psum_bank_fp32_elems
    tile_size.gemm_stationary_fmax = target.matmul_stationary_fmax
    tile_size.gemm_moving_fmax = target.matmul_moving_fmax_fp32_out
    tile_size.bn_stats_fmax = target.bn_stats_free_elems_max
    tile_size.psum_num_banks = target.psum_banks
    tile_size.total_available_sbuf_size = (target.sbuf_partitions
                                           * target.sbuf_usable_bytes_per_partition)


_sync_tile_size(get_target(DEFAULT_TARGET))


# ---- creation -------------------------------------------------------------------------------
def ndarray(shape, dtype, buffer=None, name=None, address=None, **_ignored):
    tr = current()
    buf = str(buffer or "sbuf")
    if buf not in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"):
        raise NkiValidationError(
            f"unknown buffer {buffer!r}: use nl.sbuf, nl.psum, nl.hbm or nl.shared_hbm",
            user_loc(), "nl.ndarray")
    shape = tuple(shape) if isinstance(shape, (tuple, list)) else (shape,)
    role = "output" if buf in ("hbm", "shared_hbm", "private_hbm") else "internal"
    s = tr.new_storage(buf, shape, dtype, name=name, role=role, address=address)
    return make_view(s, s.shape, s.row_major, 0)


def empty_like(t, dtype=None, buffer=None, name=None):
    return ndarray(t.shape, dtype or t.dtype, buffer=buffer or t.buffer, name=name)


def full(shape, fill_value, dtype, buffer=None, name=None):
    t = ndarray(shape, dtype, buffer=buffer, name=name)
    if t.on_chip:
        engine = _isa.engine.vector if t.buffer == "psum" else _isa.engine.unknown
        _isa.memset(dst=t, value=fill_value, engine=engine)
    else:
        rows = (t.shape[0] if t.ndim else 1, math.prod(t.shape[1:]) if t.ndim > 1 else 1)
        _isa.dma_copy(dst=t, src=full(rows, fill_value, dtype))
    return t


def zeros(shape, dtype, buffer=None, name=None):
    return full(shape, 0.0, dtype, buffer=buffer, name=name)


def ones(shape, dtype, buffer=None, name=None):
    return full(shape, 1.0, dtype, buffer=buffer, name=name)


def zeros_like(t, dtype=None, buffer=None, name=None):
    return zeros(t.shape, dtype or t.dtype, buffer=buffer or t.buffer, name=name)


def shared_identity_matrix(n, dtype=uint8, buffer=None):
    t = ndarray((n, n), dtype, buffer=buffer or sbuf, name=f"identity{n}")
    _isa.iota(dst=t, pattern=[[1, n]], offset=0, channel_multiplier=-1)   # value = f - p
    _isa.tensor_scalar(dst=t, data=t, op0=ALU["equal"], operand0=0.0)     # 1 where f == p
    return t


# ---- loops and SPMD -------------------------------------------------------------------------
def _range(start, stop=None, step=1):
    if stop is None:
        start, stop = 0, start
    return range(int(start), int(stop), int(step))


class _Loop:
    """An affine or sequential range: Python's range that, while a kernel is traced, tells the
    trace which loop and iteration it is in (`KernelTrace.loop`: kind, entry, iteration). The
    compiler moves invariant code out of affine loops only (nki/reuse.py); sequential_range
    "informs Neuron compiler to respect inter-loop dependency and perform much more conservative
    loop-level optimizations" (NKI API, nki.language.sequential_range)."""

    __slots__ = ("kind", "r")

    def __init__(self, kind, r):
        self.kind, self.r = kind, r

    def __len__(self):
        return len(self.r)

    def __getitem__(self, k):
        return self.r[k]

    def __reversed__(self):
        return reversed(self.r)

    def __iter__(self):
        tr = current() if active() else None
        return iter(self.r) if tr is None else self._traced(tr)

    def _traced(self, tr):
        outer, entry = tr.loop, next(_loop_entries)
        try:
            for k, v in enumerate(self.r):
                tr.loop = (self.kind, entry, k)
                yield v
        finally:
            tr.loop = outer


_loop_entries = itertools.count()


def affine_range(start, stop=None, step=1):
    return _Loop("affine", _range(start, stop, step))


def sequential_range(start, stop=None, step=1):
    return _Loop("sequential", _range(start, stop, step))


# dynamic_range's hardware loops are unrolled by the simulator (same instructions, same timing
# per iteration)
static_range = dynamic_range = _range


def program_id(axis=0):
    tr = current()
    return tr.program_id[axis] if axis < len(tr.program_id) else 0


def num_programs(axis=None):
    tr = current()
    if axis is None:
        return math.prod(tr.grid)
    return tr.grid[axis] if axis < len(tr.grid) else 1


def program_ndim():
    return len(current().grid)


# ---- indexing helpers (legacy NKI index expressions) -------------------------------------------
def arange(start, stop=None, step=1):
    r = _range(start, stop, step)
    return IndexRange(r.start, len(r), r.step)


def ds(start, size):
    return slice(int(start), int(start) + int(size))


class _MGrid:
    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        return tuple(arange(k.start or 0, k.stop, k.step or 1) for k in key)


mgrid = _MGrid()


def par_dim(n):
    return n


# ---- ALU ops and activation functions -------------------------------------------------------
for _n, _op in ALU.items():
    globals()[_n] = _op
for _n, _f in ACT.items():       # (nl.abs among them: NKI takes the builtin's name)
    if _n not in globals():
        globals()[_n] = _f


class _Reduction(AluOp):
    """nl.max / nl.min: a reduction when called (``nl.max(x, axis=1)``), an operator when passed."""

    def __call__(self, x, axis, dtype=None, keepdims=False, **kw):
        return _reduce_call(self, x, axis, dtype, keepdims)


max = _Reduction("maximum", ALU["maximum"].fn, reduce=ALU["maximum"].reduce)   # noqa: A001
min = _Reduction("minimum", ALU["minimum"].fn, reduce=ALU["minimum"].reduce)   # noqa: A001


def _result_dtype(*xs, dtype=None):
    if dtype is not None:
        return _dt.normalize(dtype)
    dts = [x.dtype for x in xs if isinstance(x, NkiTensor)]
    return max_precision(dts) if dts else float32


def max_precision(dts):
    order = [bool_, uint8, int8, float8_e5m2, float8_e4m3, float8_e4m3fn, uint16, int16, bfloat16,
             float16, uint32, int32, tfloat32, float32]
    best = dts[0]
    for d in dts[1:]:
        dn, bn = _dt.normalize(d), _dt.normalize(best)
        if dn in order and bn in order and order.index(dn) > order.index(bn):
            best = d
    return _dt.normalize(best)


def _is_vec(t, like):
    return (isinstance(t, NkiTensor) and isinstance(like, NkiTensor)
            and t.num_partitions == like.num_partitions and t.free_size == 1
            and like.free_size != 1)


def _on_sbuf(x):
    if isinstance(x, NkiTensor) and not x.on_chip:
        return load(x)
    return x


def _alu_call(op: AluOp, x, y=None, dtype=None, axis=None, keepdims=False, **kwargs):
    """nl.add(x, y) and friends; nl.max/nl.min/nl.sum-like calls with axis= reduce."""
    if axis is not None or (y is None and op.reduce is not None and isinstance(x, NkiTensor)):
        axes = axis if axis is not None else tuple(range(1, x.ndim))
        return _reduce_call(op, x, axes, dtype, keepdims)
    x, y = _on_sbuf(x), _on_sbuf(y)
    if not isinstance(x, NkiTensor) and not isinstance(y, NkiTensor):
        return op.fn(np.float32(x), np.float32(y))
    if not isinstance(x, NkiTensor) or _is_vec(x, y):
        # scalar/vector on the left: tensor_scalar with reversed operands
        out = ndarray(y.shape, _result_dtype(x, y, dtype=dtype), buffer=sbuf)
        _isa.tensor_scalar(dst=out, data=y, op0=op, operand0=x, reverse0=True)
        return out
    out = ndarray(x.shape, _result_dtype(x, y, dtype=dtype), buffer=sbuf)
    if not isinstance(y, NkiTensor) or _is_vec(y, x):
        _isa.tensor_scalar(dst=out, data=x, op0=op, operand0=y)
    else:
        if y.shape != x.shape and len(y.shape) == len(x.shape):
            y = y.broadcast_to(x.shape)
        _isa.tensor_tensor(dst=out, data1=x, data2=y, op=op)
    return out


def _act_call(f: ActFn, x, dtype=None, **kwargs):
    x = _on_sbuf(x)
    out = ndarray(x.shape, _result_dtype(x, dtype=dtype), buffer=sbuf)
    _isa.activation(dst=out, op=f, data=x)
    return out


def _reduce_call(op: AluOp, x, axis, dtype=None, keepdims=False, negate=False):
    x = _on_sbuf(x)
    axes = (axis,) if isinstance(axis, int) else tuple(axis)
    axes = tuple(a % x.ndim for a in axes)
    kept = [n for d, n in enumerate(x.shape) if d not in axes]
    shape = [n if d not in axes else 1 for d, n in enumerate(x.shape)] if keepdims else kept
    if len(shape) < 2:
        shape = list(shape) + [1]
    out = ndarray(tuple(shape), _result_dtype(x, dtype=dtype), buffer=sbuf)
    _isa.tensor_reduce(dst=out, op=op, data=x, axis=axes, negate=negate, keepdims=keepdims)
    return out


def sum(x, axis, dtype=None, keepdims=False, **kw):          # noqa: A001
    return _reduce_call(ALU["add"], x, axis, dtype, keepdims)


def prod(x, axis, dtype=None, keepdims=False, **kw):
    return _reduce_call(ALU["multiply"], x, axis, dtype, keepdims)


def mean(x, axis, dtype=None, keepdims=False, **kw):
    s = sum(x, axis, dtype=float32, keepdims=keepdims)
    n = math.prod(x.shape[a % x.ndim] for a in ((axis,) if isinstance(axis, int) else axis))
    out = ndarray(s.shape, _result_dtype(x, dtype=dtype), buffer=sbuf)
    _isa.tensor_scalar(dst=out, data=s, op0=ALU["multiply"], operand0=1.0 / n)
    return out


def var(x, axis, dtype=None, **kw):
    m = mean(x, axis, dtype=float32, keepdims=True)
    d = subtract(x, m)
    return mean(multiply(d, d), axis, dtype=dtype)


def negative(x, dtype=None):
    return multiply(x, -1.0, dtype=dtype)


def where(condition, x, y, dtype=None):
    """Element-wise ``condition ? x : y`` (VectorE select); scalars become filled tiles."""
    def tile(v):
        if isinstance(v, NkiTensor):
            return _on_sbuf(v)
        return full(condition.shape, v, float32)
    out = ndarray(condition.shape, _result_dtype(x, y, dtype=dtype), buffer=sbuf)
    _isa.select(dst=out, predicate=_on_sbuf(condition), on_true=tile(x), on_false=tile(y))
    return out


def _act_row_sum(fn, x, bias=None):
    """ScalarE ``fn(x + bias)`` and its row sums ([P, 1]), both float32, in one activation."""
    out = ndarray(x.shape, float32, buffer=sbuf)
    sums = ndarray((x.num_partitions, 1), float32, buffer=sbuf)
    _isa.activation(dst=out, op=ACT[fn], data=x, bias=bias, reduce_op=ALU["add"],
                    reduce_res=sums, reduce_cmd=_isa.reduce_cmd.reset_reduce)
    return out, sums


def softmax(x, axis=-1, dtype=None, **kw):
    """exp(x - max) / sum(exp(x - max)) along the free axis: VectorE max, ScalarE exp+sum,
    VectorE scale."""
    x = _on_sbuf(x)
    mx = _reduce_call(ALU["maximum"], x, tuple(range(1, x.ndim)), float32, False, negate=True)
    e, s = _act_row_sum("exp", x, bias=mx)
    r = ndarray(s.shape, float32, buffer=sbuf)
    _isa.reciprocal(dst=r, data=s)
    out = ndarray(x.shape, _result_dtype(x, dtype=dtype), buffer=sbuf)
    _isa.tensor_scalar(dst=out, data=e, op0=ALU["multiply"], operand0=r)
    return out


def rms_norm(x, w, axis=-1, n=None, epsilon=1e-6, dtype=None, **kw):
    x = _on_sbuf(x)
    _, ss = _act_row_sum("square", x)
    rinv = ndarray(ss.shape, float32, buffer=sbuf)
    _isa.tensor_scalar(dst=rinv, data=ss, op0=ALU["multiply"], operand0=1.0 / (n or x.free_size),
                       op1=ALU["add"], operand1=float(epsilon))
    _isa.activation(dst=rinv, op=ACT["rsqrt"], data=rinv)
    out = ndarray(x.shape, _result_dtype(x, dtype=dtype), buffer=sbuf)
    if isinstance(w, NkiTensor):
        w = _on_sbuf(w).broadcast_to(x.shape)
    _isa.scalar_tensor_tensor(dst=out, data=x, op0=ALU["multiply"], operand0=rinv,
                              op1=ALU["multiply"], operand1=w)
    return out


# ---- data movement ---------------------------------------------------------------------------
def load(src, dtype=None, **kw):
    if len(src.shape) >= 2:
        out = ndarray(src.shape, dtype or src.dtype, buffer=sbuf)
    else:       # a vector goes to one partition
        out = ndarray((1,) + tuple(src.shape), dtype or src.dtype, buffer=sbuf)
        src = src.reshape(out.shape)
    _isa.dma_copy(dst=out, src=src)
    return out


def store(dst, value, **kw):
    value = value if isinstance(value, NkiTensor) else full(dst.shape, value, dst.dtype)
    if value.buffer == "psum":
        value = copy(value, dtype=dst.dtype)
    _isa.dma_copy(dst=dst, src=value)
    return dst


def load_transpose2d(src, dtype=None):
    return transpose(load(src, dtype=dtype))


def copy(x, dtype=None, **kw):
    out = ndarray(x.shape, dtype or x.dtype, buffer=sbuf)
    _assign(out, x)
    return out


def transpose(x, dtype=None, **kw):
    x = _on_sbuf(x)
    P, F = x.num_partitions, x.free_size
    block = current().target.vector_transpose_block_max      # one reshape bank (nl.max is NKI's)
    if P <= block and F <= block:
        out = ndarray((F, P), x.dtype, buffer=sbuf)
        _isa.nc_transpose(dst=out, data=x, engine=_isa.engine.vector)
        return out
    ps = ndarray((F, P), x.dtype, buffer=psum)
    _isa.nc_transpose(dst=ps, data=x, engine=_isa.engine.tensor)
    return copy(ps, dtype=dtype or x.dtype)


def matmul(x, y, transpose_x=False, **kw):
    """x @ y. With transpose_x=True, ``x`` is already [K, M] (the stationary layout)."""
    x, y = _on_sbuf(x), _on_sbuf(y)
    stat = x if transpose_x else transpose(x)
    out = ndarray((stat.free_size, y.free_size), float32, buffer=psum)
    _isa.nc_matmul(dst=out, stationary=stat, moving=y)
    return out


def broadcast_to(x, shape):
    return x.broadcast_to(tuple(shape))


def expand_dims(x, axis):
    return x.expand_dim(axis)


def device_print(prefix, x):
    if current().numerics and isinstance(x, NkiTensor):
        print(prefix, np.asarray(x.np(), dtype=np.float32))
    else:
        print(prefix, x)


# ---- assignment sugar: t[...] = value, t += value ---------------------------------------------
def _assign(dst: NkiTensor, value):
    if isinstance(value, NkiTensor):
        if dst.on_chip and value.on_chip:
            _isa.tensor_copy(dst=dst, src=value)
        else:
            _isa.dma_copy(dst=dst, src=value)
    else:
        if not dst.on_chip:
            raise NkiValidationError(
                "assigning a constant to an HBM tensor: build it in SBUF and nl.store it",
                user_loc(), "setitem")
        _isa.memset(dst=dst, value=value)


def _inplace(dst: NkiTensor, value, opname):
    op = ALU[opname]
    if isinstance(value, NkiTensor) and not _is_vec(value, dst):
        if value.buffer == "psum" and dst.buffer == "psum":
            value = copy(value, dtype=float32)
        _isa.tensor_tensor(dst=dst, data1=dst, data2=value, op=op)
    else:
        _isa.tensor_scalar(dst=dst, data=dst, op0=op, operand0=value)
    return dst
