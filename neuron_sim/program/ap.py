"""Tensors and access patterns: the operands of every instruction.

A `Tensor` is a named buffer in HBM, SBUF or PSUM. For SBUF/PSUM the first dimension is the
partition dimension (at most 128) and the allocation has a byte offset inside each partition. An
`AccessPattern` (AP) selects a contiguous partition range (start, size) and a free-dimension
pattern: an element offset plus up to four (size, stride) pairs, in elements [ArchV2]. HBM tensors
use the same form with the first dimension as the "partition" axis and its row stride.
Slicing a tensor (`t[0:128, 0:512]`, `t[:, k, :]`) builds an AP; one built by hand is refused
(ProgramError) when it reaches outside its tensor (check_inside)."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from math import prod

from ..errors import ProgramError
from ..numerics.formats import itemsize, normalize


class Memory(enum.IntEnum):
    HBM = 0
    SBUF = 1
    PSUM = 2


# Memory.HBM as a plain global: an enum member looked up on its class costs ~0.4 us in
# Python 3.11, paid for every operand sliced (a tensor's memory is always a Memory member)
_HBM = Memory.HBM


_tensor_ids = iter(range(1 << 62))
_DIMS: dict = {}        # Tensor.__getitem__: dims tuple -> the one its patterns share
_GEOS: dict = {}        # AccessPattern.geometry(): the same, for geometries
_SHARED_MAX = 4096


def row_major(shape) -> tuple:
    """The elements between steps of each dimension of a dense row-major array of `shape`:
    PyTorch's contiguous strides, which step over a zero-size dimension as over a size-1 one
    (torch.empty(3, 0, 4).stride() is (4, 4, 1))."""
    strides, n = [], 1
    for s in reversed(shape):
        strides.append(n)
        if s:       # max(s, 1) without the call: this runs for every tensor and view made
            n *= s
    return tuple(reversed(strides))


def _shared(table, key):
    """`key` kept in `table` as the one tuple equal keys share (`table.get(key)` missed);
    the table is forgotten past _SHARED_MAX entries."""
    if len(table) >= _SHARED_MAX:
        table.clear()
    table[key] = key
    return key


class Tensor:
    """A buffer. Create through ProgramBuilder.hbm / .sbuf / .psum (which allocate and check
    capacity); `Tensor(...)` directly is fine for HBM tensors of a hand-made program."""

    __slots__ = ("id", "name", "memory", "shape", "dtype", "byte_offset", "partition_start",
                 "freed", "base", "_strides", "_free", "_whole", "__weakref__")

    def __init__(self, name: str, memory: Memory, shape, dtype, byte_offset: int = 0,
                 partition_start: int = 0):
        self.id = next(_tensor_ids)
        self.name = name
        self.memory = memory if memory.__class__ is Memory else Memory(memory)
        self.shape = shape = tuple(int(s) for s in shape)
        self.dtype = normalize(dtype)
        self.byte_offset = int(byte_offset)      # inside each partition (SBUF/PSUM)
        self.partition_start = int(partition_start)
        self.freed = False
        self.base = self        # the allocation its access patterns address (see view())
        self._strides = row_major(shape)
        self._free = int(prod(shape[1:]))       # elements per partition (row), for _footprint
        self._whole = None      # ap() of the whole tensor, made once (APs are immutable)

    @property
    def partitions(self) -> int:
        return self.shape[0]

    @property
    def bytes_per_partition(self) -> int:
        return int(prod(self.shape[1:]) * itemsize(self.dtype))

    @property
    def nbytes(self) -> int:
        return int(prod(self.shape) * itemsize(self.dtype))

    def ap(self) -> "AccessPattern":
        if self._whole is None:
            shape = self.shape
            if not shape:
                self._whole = self[()]
            else:       # self[:, :, ...] written out: every tile and tensor asks for it once
                st = self._strides
                dims = tuple((shape[d], st[d]) for d in range(1, len(shape))) or ((1, 1),)
                self._whole = AccessPattern(self.base, self.partition_start, shape[0], 0, dims,
                                            st[0] if self.memory == Memory.HBM else 1)
        return self._whole

    def fits(self, shape, dtype) -> bool:
        """Whether a [shape] tile of `dtype` fits in this SBUF/PSUM allocation (partitions and
        bytes per partition), so view() can serve it."""
        shape = tuple(int(s) for s in shape)
        return (self.memory != Memory.HBM and normalize(dtype) == self.dtype
                and shape[0] <= self.partitions
                and prod(shape[1:]) * itemsize(self.dtype) <= self.bytes_per_partition)

    def view(self, shape) -> "Tensor":
        """This SBUF/PSUM allocation seen as a smaller [shape] tile laid out densely from the
        start of each partition's bytes: what a kernel does when a remainder tile reuses the
        buffer of the full-size ones. Its access patterns address this tensor, so the builder
        orders the reuse after the earlier readers and writers (WAR/WAW), and no new bytes
        are allocated."""
        shape = tuple(int(s) for s in shape)
        if shape == self.shape:
            return self
        if not self.fits(shape, self.dtype):
            raise ValueError(f"{self.name}: a view of shape {shape} does not fit the "
                             f"{self.memory.name} allocation of shape {self.shape}")
        v = Tensor(self.name, self.memory, shape, self.dtype, self.byte_offset,
                   self.partition_start)
        v.base = self.base
        return v

    def __getitem__(self, idx) -> "AccessPattern":
        if not isinstance(idx, tuple):
            idx = (idx,)
        shape = self.shape
        nd = len(shape)
        if Ellipsis in idx:
            k = idx.index(Ellipsis)
            idx = idx[:k] + (slice(None),) * (nd - len(idx) + 1) + idx[k + 1:]
        if len(idx) < nd:
            idx = idx + (slice(None),) * (nd - len(idx))
        if len(idx) != nd:
            raise IndexError(f"{self.name}: {len(idx)} indices for shape {shape}")
        strides = self._strides
        # slices and in-range ints resolved inline (nearly every index); the rest, and every
        # error, through _resolve
        ix = idx[0]
        if ix.__class__ is slice:
            p_start, stop, p_step = ix.indices(shape[0])
            if p_step <= 0:
                _resolve(ix, shape[0], self.name, 0)            # raises
            p_size = (stop - p_start + p_step - 1) // p_step
            if p_size < 0:
                p_size = 0
        else:
            p_start, p_size, p_step = _resolve(ix, shape[0], self.name, 0)
        offset, dims = 0, []
        for d in range(1, nd):
            ix = idx[d]
            if ix.__class__ is slice:
                start, stop, step = ix.indices(shape[d])
                if step <= 0:
                    _resolve(ix, shape[d], self.name, d)       # raises
                offset += start * strides[d]
                size = (stop - start + step - 1) // step
                dims.append((size if size > 0 else 0, step * strides[d]))
            elif ix.__class__ is int and -shape[d] <= ix < shape[d]:
                offset += (ix % shape[d]) * strides[d]
            else:
                start, size, step = _resolve(ix, shape[d], self.name, d)
                offset += start * strides[d]
                if not isinstance(ix, int):
                    dims.append((size, step * strides[d]))
        if not dims:
            dims = [(1, 1)]
        hbm = self.memory is _HBM
        if not hbm and p_step != 1:
            raise IndexError(f"{self.name}: partition ranges are contiguous (step 1) [ArchV2]")
        # the pattern's record (box and position: AccessPattern._footprint, record()) made here,
        # while the dims are at hand: every sliced pattern is an operand the builder records.
        # Its box is not kept apart (box() takes it from the record when asked): one tuple
        # fewer per operand for the collector to walk once the program is built
        lo = hi = offset
        for size, stride in dims:
            reach = (size - 1) * stride
            if reach < 0:
                lo += reach
            else:
                hi += reach
        p_start += self.partition_start
        if hbm:
            p_stride = strides[0] * p_step
            row0 = p_start * self.base._strides[0]
            rec = (0, 1, row0 + lo, row0 + (p_size - 1) * p_stride + hi + 1, p_start, offset)
        else:
            p_stride = p_step
            rec = (p_start, p_start + p_size, lo, hi + 1, p_start, offset)
        # one dims tuple per pattern shape, shared by the patterns that have it (a kernel slices
        # a few shapes thousands of times): two tuples fewer per operand kept, for the collector
        # to walk once the program is built (_shared).
        dims = tuple(dims)
        dims = _DIMS.get(dims) or _shared(_DIMS, dims)
        ap = AccessPattern(self.base, p_start, p_size, offset, dims, p_stride)
        object.__setattr__(ap, "_rec", rec)
        return ap

    def __repr__(self):
        return f"Tensor({self.name!r}, {self.memory.name}, {self.shape}, {self.dtype})"


def _resolve(ix, n, name, dim):
    if isinstance(ix, int):
        if not -n <= ix < n:
            raise IndexError(f"{name}: index {ix} out of range for dim {dim} of size {n}")
        return ix % n, 1, 1
    if isinstance(ix, slice):
        start, stop, step = ix.indices(n)
        if step <= 0:
            raise IndexError(f"{name}: negative steps are not supported")
        size = max(0, (stop - start + step - 1) // step)
        return start, size, step
    raise IndexError(f"{name}: unsupported index {ix!r} (use ints and slices)")


# Immutable by convention, hashable by value: not frozen=True, whose generated __init__ sets each
# field through object.__setattr__ and made a pattern ~5x as costly to create (every operand of
# every instruction is a new pattern). Nothing assigns to a pattern's fields; the cached _box,
# _geo and _rec are filled in once, from the fields (_box from _rec when it is there).
@dataclass(slots=True, unsafe_hash=True)
class AccessPattern:
    tensor: Tensor
    p_start: int          # absolute partition (SBUF/PSUM) or first row (HBM)
    p_size: int
    offset: int           # element offset of the first element inside a partition row
    dims: tuple           # ((size, stride), ...) in elements, outermost first
    p_stride: int = 1     # elements between partition rows (HBM); 1 for SBUF/PSUM
    _box: tuple | None = field(default=None, compare=False, repr=False)
    # made once per pattern, for every instruction that takes it; not __init__ arguments, so
    # dataclasses.replace (repeat.py moves patterns with it) never copies them
    _geo: tuple | None = field(default=None, init=False, compare=False, repr=False)
    _rec: tuple | None = field(default=None, init=False, compare=False, repr=False)

    # ---- shape -----------------------------------------------------------------------------
    @property
    def memory(self) -> Memory:
        return self.tensor.memory

    @property
    def dtype(self) -> str:
        return self.tensor.dtype

    @property
    def shape(self) -> tuple:
        return (self.p_size,) + tuple(s for s, _ in self.dims)

    @property
    def free_size(self) -> int:
        """Elements per partition (the N of the cost formulas)."""
        n = 1
        for size, _ in self.dims:
            n *= size
        return int(n)

    @property
    def nbytes(self) -> int:
        return int(self.p_size * self.free_size * itemsize(self.dtype))

    @property
    def inner_stride_bytes(self) -> float:
        size, stride = self.dims[-1]
        return (stride if size > 1 else 1) * itemsize(self.dtype)

    @property
    def contiguous_runs_per_partition(self) -> int:
        """Number of maximal contiguous chunks in one partition row (DMA descriptors)."""
        runs, expect, broken = 1, 1, False
        for size, stride in reversed(self.dims):
            if size == 1:
                continue
            if not broken and stride == expect:
                expect *= size
            else:
                broken = True
                runs *= size
        return runs

    def box(self) -> tuple:
        """(p0, p1, f0, f1): conservative footprint for dependency tracking (cached)."""
        if self._box is None:
            rec = self._rec
            object.__setattr__(self, "_box", self._footprint() if rec is None else rec[:4])
        return self._box

    def geometry(self) -> tuple:
        """(memory, dtype, p_start, p_size, dims, p_stride): all of the pattern but its tensor and
        offset, what the instruction modules key their per-geometry checks and costs by."""
        if self._geo is None:
            t = self.tensor
            g = (t.memory, t.dtype, self.p_start, self.p_size, self.dims, self.p_stride)
            object.__setattr__(self, "_geo", _GEOS.get(g) or _shared(_GEOS, g))
        return self._geo

    def form(self) -> tuple:
        """(memory, p_size, dims, p_stride): the pattern without its tensor and its position
        (partition start, offset), what program/repeat.py's emit_key compares operands by. Not
        kept: asked for once per record in a loop, and each tuple kept is one more for the
        collector to walk once the program is built."""
        return (self.tensor.memory, self.p_size, self.dims, self.p_stride)

    def record(self) -> tuple:
        """box() + (p_start, offset): what the program builder records of an operand."""
        if self._rec is None:
            object.__setattr__(self, "_rec", (self._box or self._footprint())
                               + (self.p_start, self.offset))
        return self._rec

    def _footprint(self) -> tuple:
        # a plain loop, not sums of generators: this runs for every operand of every instruction
        lo = hi = self.offset
        for s, st in self.dims:
            reach = (s - 1) * st
            if reach < 0:
                lo += reach
            else:
                hi += reach
        hi += 1
        # and check_inside's test, inline: calling it for every pattern made this 1.9x as slow
        # (217 -> 404 ns; inline 240 ns). The call is left for what the test refuses
        t = self.tensor
        free, p0 = t._free, self.p_start
        if t.memory is _HBM:
            base = p0 * free            # first row's first element
            box = (0, 1, base + lo, base + (self.p_size - 1) * self.p_stride + hi)
            if base + lo >= 0 and box[3] <= t.shape[0] * free:
                return box
            rows = 1
        else:
            box = (p0, p0 + self.p_size, lo, hi)
            rows = self.p_size if self.p_stride else 1
            first = t.partition_start
            if lo >= 0 and hi <= free and first <= p0 and p0 + rows <= first + t.shape[0]:
                return box
        check_inside(self, box, rows)       # raises unless the pattern is empty
        return box

    def __repr__(self):
        return (f"{self.tensor.name}[p{self.p_start}:{self.p_start + self.p_size}, "
                f"off={self.offset}, dims={list(self.dims)}]")


@dataclass(slots=True, unsafe_hash=True)
class IndirectPattern(AccessPattern):
    """An HBM access whose addresses an index tile moves at run time: the indirect DMA of
    software DGE (`dma_copy(..., index=tile, dge="swdge")`), which gathers or scatters rows at
    indices held in SBUF [DGE]. Element (q, i, ...) of the pattern is the plain pattern's
    element plus index[q, i] * `scale` elements: `i` runs over the outermost free dimension, one
    index (one descriptor) each. Indices outside [0, `bound`) are out of bounds (the DMA's
    `oob_mode`). The addresses are unknown when the program is built, so the dependency
    tracker sees the whole tensor (_footprint), not the plain pattern's elements."""
    scale: int = 1
    bound: int = 0

    @property
    def contiguous_runs_per_partition(self) -> int:
        """Each index is its own descriptor: the runs of one indexed row times the indices."""
        rest = AccessPattern(self.tensor, self.p_start, 1, 0, self.dims[1:] or ((1, 1),))
        return self.dims[0][0] * rest.contiguous_runs_per_partition

    def geometry(self) -> tuple:
        return ("indirect", self.scale, self.bound) + AccessPattern.geometry(self)

    def form(self) -> tuple:
        return ("indirect", self.scale, self.bound) + AccessPattern.form(self)

    def _footprint(self) -> tuple:
        t = self.tensor
        if t.memory is not _HBM:
            raise ProgramError(f"{t.name}: an indirect access pattern addresses HBM (the "
                               f"tensor is in {t.memory.name}): gather from and scatter to HBM")
        return (0, 1, 0, t.shape[0] * t._free)


def check_inside(ap: AccessPattern, box: tuple, rows: int) -> None:
    """Refuse a pattern that reaches outside its tensor: it would read other memory, or write
    over it (the interpreter refuses it too). `box` is its footprint (p0, p1, f0, f1); `rows` the
    partitions an SBUF/PSUM pattern reads from p0: 1 for a partition-broadcast view (partition
    step 0), which reads one partition as many. Run once per pattern, where its footprint is
    made: AccessPattern._footprint (a sliced pattern is inside by construction), and the NKI
    front end for the views it maps."""
    t = ap.tensor
    shape = t.shape
    p0, _, f0, f1 = box
    free = t._free
    if t.memory is _HBM:
        if f0 >= 0 and f1 <= shape[0] * free:
            return
        reach, holds = f"elements [{f0}, {f1})", f"elements [0, {shape[0] * free})"
    else:
        first = t.partition_start
        if first <= p0 and p0 + rows <= first + shape[0] and f0 >= 0 and f1 <= free:
            return
        reach = f"partitions [{p0}, {p0 + rows}) x elements [{f0}, {f1}) of each"
        holds = f"partitions [{first}, {first + shape[0]}) x elements [0, {free}) of each"
    if not ap.p_size or any(not n for n, _ in ap.dims):
        return      # an empty pattern reaches nothing (its box is not a range then)
    raise ProgramError(f"access pattern {ap!r} reaches {reach}, outside its tensor {t.name!r} "
                       f"({t.memory.name}, shape {shape}), which holds {holds}: give access "
                       "patterns inside their tensors (slice the tensor: t[...])")


def as_ap(x) -> AccessPattern:
    if isinstance(x, AccessPattern):
        return x
    if isinstance(x, Tensor):
        return x.ap()
    raise TypeError(f"expected a Tensor or AccessPattern, got {type(x).__name__}")
