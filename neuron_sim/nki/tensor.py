"""NKI tensors: a *storage* (one allocation in HBM, SBUF or PSUM) and *views* on it.

A view is ``(shape, strides, offset)`` in elements over the storage's row-major element space,
as the NKI language guide describes. On-chip (SBUF/PSUM) tensors keep dimension 0 as the
partition dimension: its stride is the storage's free size, it is never strided, and integer
indexing keeps it at size 1. Views are free; only ``nki.isa`` instructions touch memory.
"""

from __future__ import annotations

import itertools
import math
import threading

import numpy as np

from ..program.ap import row_major as _row_major
from . import dtypes
from .errors import NkiValidationError

ON_CHIP = ("sbuf", "psum")

_ids = itertools.count()
_GEOMETRIES: dict = {}          # NkiTensor.geometry
# NkiTensor.__getitem__: (geometry number, index) -> the view's fields and geometry number
_INDEXED: dict = {}
_geometry_ids = itertools.count()
_MASK_LOCK = threading.Lock()


class Storage:
    """One allocation. ``data`` is None when the kernel is traced for timing only."""

    __slots__ = ("id", "buffer", "shape", "dtype", "name", "data", "written", "loc", "role",
                 "address", "first_use", "last_use", "used_at", "free_elems", "trace",
                 "on_chip", "itemsize", "row_major", "dtype_name", "n_written", "boxes",
                 "write_count")

    def __init__(self, buffer, shape: tuple, dtype, name, loc, role, trace, data=None,
                 address=None):
        self.id = next(_ids)
        self.buffer = buffer
        self.shape = shape          # a tuple of ints (KernelTrace.new_storage)
        self.dtype = dtype
        self.name = name or f"t{self.id}"
        self.loc = loc
        self.role = role            # "input", "output", "internal"
        self.trace = trace
        self.address = address      # explicit (start_partition, byte_offset) or None (auto)
        self.first_use = None       # instruction indices, filled while tracing
        self.last_use = None
        self.write_count = 0        # instructions that wrote it so far (reuse.py)
        self.on_chip = buffer in ON_CHIP
        self.used_at = [] if self.on_chip else None     # on-chip: the indices, for memory.py
        self.row_major = _row_major(shape)
        self.dtype_name, self.itemsize = dtypes._info(dtype)
        self.free_elems = math.prod(shape[1:]) if self.on_chip else math.prod(shape)
        self.data = data
        # Which elements some instruction has written, kept as cheaply as the writes allow:
        # "all" / "none" need no array; "boxes" while every write was a block of whole rows x
        # one column interval (see _box) apart from the others, as a tile loaded piece by
        # piece is (self.boxes); a bool mask once a write is anything else.
        self.written = "all" if role == "input" else "none"
        self.boxes = []
        self.n_written = 0      # elements set so far, in boxes or a large mask (-1: not counted)

    @property
    def partitions(self) -> int:
        return self.shape[0] if self.on_chip else 1

    def mask(self) -> np.ndarray:
        """The element-level written mask (materialised on demand; the lock matters only when
        the two programs of an LNC=2 launch share a tensor)."""
        if isinstance(self.written, str):
            with _MASK_LOCK:
                w = self.written
                if isinstance(w, str):
                    n = math.prod(self.shape)
                    if w == "all":
                        self.n_written, m = n, np.ones(n, dtype=bool)
                    else:
                        m = np.zeros(n, dtype=bool)
                        rows = m.reshape(-1, self.row_major[0]) if self.boxes else None
                        for r0, r1, c0, c1 in self.boxes:
                            rows[r0:r1, c0:c1] = True
                    self.written, self.boxes = m, []
        return self.written

    def _write_box(self, box) -> bool:
        """Record a write of `box` (see _box) if it is apart from the boxes written so far."""
        r0, r1, c0, c1 = box
        with _MASK_LOCK:
            w = self.written
            if w.__class__ is not str or w == "all":      # another program got there first
                return False
            for q0, q1, d0, d1 in self.boxes:
                if r0 < q1 and q0 < r1 and c0 < d1 and d0 < c1:
                    return False
            self.boxes.append(box)
            self.n_written += (r1 - r0) * (c1 - c0)
            if self.n_written == math.prod(self.shape):
                self.written, self.boxes = "all", []
            else:
                self.written = "boxes"
        return True

    @property
    def bytes_per_partition(self) -> int:
        return self.free_elems * self.itemsize

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * self.itemsize

    def describe(self) -> str:
        where = f" (allocated at {self.loc[0]}:{self.loc[1]})" if self.loc else ""
        return f"{self.name}{list(self.shape)} {dtypes.name_of(self.dtype)} in {self.buffer}{where}"


_WHOLE_CHECK_ELEMS = 1 << 20


def _aliases(shape, strides) -> bool:
    """Whether a view names some element more than once (dims sorted by stride must each step
    past everything the smaller ones reach)."""
    reach = 0
    for s, n in sorted((abs(s), n) for s, n in zip(strides, shape) if n > 1):
        if s <= reach:
            return True
        reach += (n - 1) * s
    return False


def _box(v):
    """(r0, r1, c0, c1) when view `v` is exactly rows [r0, r1) x columns [c0, c1) of its
    storage seen as rows of `row_major[0]` elements (partitions x free elements on chip, first
    dimension x the others in HBM): its first dimension steps one row, the others are
    contiguous. Else None."""
    st = v.storage
    shape, strides = v.shape, v.strides
    if len(shape) < 2 or len(st.shape) < 2:
        return None
    row = st.row_major[0]
    if shape[0] != 1 and strides[0] != row:
        return None
    cols = 1
    for n, s in zip(reversed(shape[1:]), reversed(strides[1:])):
        if n != 1 and s != cols:
            return None
        cols *= n
    r0, c0 = divmod(v.offset, row)
    if c0 + cols > row:
        return None
    return r0, r0 + shape[0], c0, c0 + cols


class IndexRange:
    """``nl.arange``/``nl.mgrid``/``nl.ds`` index: elements start, start+step, ... (size of
    them). `axis`: the axis of a 2-D index it spans, as NumPy broadcasts it (nl.arange(n)[:, None]
    spans axis 0, [None, :] axis 1; None for an unshaped range, whose position decides)."""

    __slots__ = ("start", "size", "step", "axis")

    def __init__(self, start, size, step=1, axis=None):
        self.start, self.size, self.step = int(start), int(size), int(step)
        self.axis = axis

    def __getitem__(self, key):
        key = key if isinstance(key, tuple) else (key,)
        axis = next((i for i, k in enumerate(key) if k is not None), None)
        return IndexRange(self.start, self.size, self.step, axis)

    def __add__(self, k):
        return IndexRange(self.start + int(k), self.size, self.step, self.axis)

    __radd__ = __add__

    def __sub__(self, k):
        return self + (-k)

    def __mul__(self, k):
        return IndexRange(self.start * int(k), self.size, self.step * int(k), self.axis)

    __rmul__ = __mul__

    def as_slice(self) -> slice:
        return slice(self.start, self.start + self.size * self.step, self.step)


class NkiTensor:
    """A view on a Storage. Attributes follow the NKI language guide."""

    __slots__ = ("storage", "shape", "strides", "offset", "_sub", "_geometry", "_mapped")
    __array_priority__ = 1000  # so ndarray <op> tensor defers to the tensor

    def __init__(self, storage: Storage, shape=None, strides=None, offset=0):
        self.storage = storage
        self.shape = tuple(storage.shape if shape is None else (int(s) for s in shape))
        self.strides = tuple(_row_major(self.shape) if strides is None else strides)
        self.offset = int(offset)
        self._sub = None        # index key -> the view it gave (__getitem__); views never change
        self._geometry = None
        self._mapped = None     # (program._Mapper, the access pattern it gave this view)

    # ---- attributes -------------------------------------------------------------------------
    @property
    def dtype(self):
        return self.storage.dtype

    @property
    def buffer(self) -> str:
        return self.storage.buffer

    @property
    def name(self) -> str:
        return self.storage.name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def on_chip(self) -> bool:
        return self.storage.on_chip

    def __len__(self):
        return self.shape[0]

    def __repr__(self):
        return (f"NkiTensor(name={self.name!r}, shape={self.shape}, "
                f"dtype={dtypes.name_of(self.dtype)}, buffer={self.buffer}, offset={self.offset}, "
                f"strides={self.strides})")

    def geometry(self) -> int:
        """A number for all of the view but its storage's identity (the storage's memory, dtype,
        shape and explicit address; the view's shape, strides and offset): views of equal
        numbers pass the same checks at the same cost, which the nisa functions keep."""
        g = self._geometry
        if g is None:
            st = self.storage
            key = (st.buffer, st.dtype_name, st.shape, st.address, self.shape, self.strides,
                   self.offset)
            g = _GEOMETRIES.get(key)
            if g is None:
                if len(_GEOMETRIES) > 1 << 20:
                    _GEOMETRIES.clear()             # numbers are never reused: old views just miss
                g = _GEOMETRIES[key] = next(_geometry_ids)
            self._geometry = g
        return g

    # ---- partition / free geometry (on-chip) --------------------------------------------------
    @property
    def partition_start(self) -> int:
        return self.offset // self.storage.free_elems if self.on_chip else 0

    @property
    def num_partitions(self) -> int:
        return self.shape[0] if self.on_chip else 1

    @property
    def free_size(self) -> int:
        """Elements per partition this view touches (all of it, for HBM)."""
        return math.prod(self.shape[1:]) if self.storage.on_chip else math.prod(self.shape)

    def is_contiguous(self) -> bool:
        return self.strides == _row_major(self.shape) or self.size <= 1

    def get_pattern(self):
        return [[st, n] for st, n in zip(self.strides, self.shape)]

    # ---- NumPy access (numerics) ----------------------------------------------------------------
    def _over(self, arr):
        """This view of `arr`, an array over the storage's elements (its data, its written mask)."""
        if self.covers_storage():       # the common whole-tensor case: no as_strided
            return arr.reshape(self.shape)
        flat = arr.reshape(-1)      # storages are contiguous: a view, never a copy
        item = flat.itemsize
        return np.lib.stride_tricks.as_strided(
            flat[self.offset:], shape=self.shape, strides=[s * item for s in self.strides])

    def np(self):
        """The NumPy view of this tensor's data (storage dtype)."""
        return self._over(self.storage.data)

    def covers_storage(self) -> bool:
        st = self.storage
        return self.offset == 0 and self.shape == st.shape and self.strides == st.row_major

    def written_mask(self):
        return self._over(self.storage.mask())

    def mark_written(self) -> None:
        st = self.storage
        w = st.written
        if w.__class__ is str and w == "all":
            return
        if self.covers_storage():
            st.written, st.boxes = "all", []
            return
        if w.__class__ is str:          # "none" or "boxes"
            box = _box(self)
            if box is not None and st._write_box(box):
                return
        m = self.written_mask()
        with _MASK_LOCK:
            # a mask too large for fully_written's whole-mask check counts the elements written
            # so far, so a tile filled piece by piece becomes "all" when its last piece lands (a
            # view that names an element twice would be counted twice: such a write stops the
            # count)
            w = st.written
            big = not isinstance(w, str) and w.size > _WHOLE_CHECK_ELEMS
            if big and st.n_written >= 0:
                if _aliases(self.shape, self.strides):
                    st.n_written = -1
                else:
                    st.n_written += m.size - int(np.count_nonzero(m))
            m[...] = True
            if big and st.n_written == w.size:
                st.written = "all"

    def fully_written(self) -> bool:
        st = self.storage
        w = st.written
        if isinstance(w, str):
            return w == "all"
        # a tile filled piece by piece (one DMA per operand) is read thousands of times: once
        # every element is written, say so and stop looking at the mask
        if w.size <= _WHOLE_CHECK_ELEMS and w.all():
            st.written = "all"
            return True
        return bool(self.written_mask().all())

    def nothing_written(self) -> bool:
        w = self.storage.written
        return isinstance(w, str) and w == "none"

    # ---- views ------------------------------------------------------------------------------
    def __getitem__(self, key):
        if key.__class__ is not tuple and not isinstance(key, tuple):
            key = (key,)
        # a kernel slices the same tile the same way in every loop iteration: the view made
        # for an index of ints and slices is kept (slices are unhashable before Python 3.12)
        hk = []
        for k in key:
            c = k.__class__
            if c is slice:
                hk.append((k.start, k.stop, k.step))
            elif c is int:
                hk.append(k)
            else:
                hk = None
                break
        if hk is not None:
            hk = tuple(hk)
            sub = self._sub
            if sub is None:
                sub = self._sub = {}
            else:
                v = sub.get(hk)
                if v is not None:
                    return v
            # a new tile of a loop's iteration is sliced as the last one was: the view, and
            # its geometry number, are kept by the geometry number it came from
            g = self._geometry
            geo = (g if g is not None else self.geometry(), hk)
            made = _INDEXED.get(geo)
            if made is None:
                v = self._index(key)
                if len(_INDEXED) > 1 << 16:
                    _INDEXED.clear()
                _INDEXED[geo] = (v.shape, v.strides, v.offset, v.geometry())
            else:
                v = make_view(self.storage, made[0], made[1], made[2])
                v._geometry = made[3]
            sub[hk] = v
            return v
        return self._index(key)

    def _index(self, key):
        for i, k in enumerate(key):
            if k is not Ellipsis:
                continue
            fill = self.ndim - (len(key) - 1)
            key = key[:i] + (slice(None),) * fill + key[i + 1:]
            break
        ndim = len(self.shape)
        if len(key) > ndim:
            raise NkiValidationError(
                f"too many indices ({len(key)}) for tensor of shape {self.shape}")
        if len(key) < ndim:
            key = key + (slice(None),) * (ndim - len(key))
        on_chip = self.storage.on_chip
        shape, strides, offset = [], [], self.offset
        dropped_last = None
        range_axis = None       # the axis an index of shaped ranges keeps (a[i_p, 0]: [P, 1])
        for d, (k, n, st) in enumerate(zip(key, self.shape, self.strides)):
            c = k.__class__
            if c is IndexRange:
                range_axis = k.axis if range_axis is None else range_axis
                k, c = k.as_slice(), slice
            if c is int or (c is not slice and isinstance(k, (int, np.integer))):
                k = int(k)
                if k < 0:
                    k += n
                if not 0 <= k < n:
                    raise NkiValidationError(f"index {k} out of range for dimension {d} of size "
                                             f"{n} (tensor {self.name}{list(self.shape)})")
                offset += k * st
                if d == 0 and on_chip:      # partition dim is never dropped
                    shape.append(1)
                    strides.append(st)
                else:
                    dropped_last = st
                continue
            if c is NkiTensor:          # table[idx_tile, ...]: a gather's or scatter's rows
                return self._indirect(d, k, key)
            if c is not slice:
                raise NkiValidationError(f"unsupported index {k!r} for dimension {d}: use ints, "
                                         "slices, nl.ds(...) or nl.arange(...)")
            start, stop, step = k.indices(n)
            if step <= 0:
                raise NkiValidationError(
                    "negative or zero slice steps are not supported by access patterns")
            if d == 0 and on_chip and step != 1:
                raise NkiValidationError(
                    f"strided partition access {k} on {self.name}: the hardware cannot stride "
                    "along the partition dimension; slice partitions contiguously")
            if start >= n or (k.stop or 0) > n:     # k.indices clamps: check the slice's own stop
                raise NkiValidationError(f"slice {k} out of range for dimension {d} of size {n} "
                                         f"(tensor {self.name}{list(self.shape)})")
            size = (stop - start + step - 1) // step if step != 1 else stop - start
            offset += start * st
            shape.append(size if size > 0 else 0)
            strides.append(st * step)
        if len(shape) < 2 and (on_chip or range_axis is not None):
            at = 0 if range_axis == 1 and not on_chip else len(shape)
            shape.insert(at, 1)
            strides.insert(at, dropped_last if dropped_last is not None else 1)
        return make_view(self.storage, tuple(shape), tuple(strides), offset)

    def _indirect(self, d, index, key):
        """The IndirectView of `self[key]` whose dimension d is indexed by the tile `index`."""
        why = _index_tile_fault(self, d, index)
        if why:
            from .tracer import user_loc    # (tracer imports this module)
            raise NkiValidationError(f"{self.name}[{index.name}{list(index.shape)}, ...]: {why}",
                                     user_loc())
        return IndirectView(self._index((slice(None),) + tuple(key[1:])), index)

    def __setitem__(self, key, value):
        self._nl("_assign", self[key], value)

    def slice(self, dim, start, end, step=1):
        return self[(slice(None),) * (dim % self.ndim) + (slice(start, end, step),)]

    def select(self, dim, index):
        return self[(slice(None),) * (dim % self.ndim) + (int(index),)]

    def reshape(self, new_shape):
        if not isinstance(new_shape, (tuple, list)):
            new_shape = (new_shape,)
        new_shape = tuple(int(s) for s in new_shape)
        if -1 in new_shape:
            known = math.prod(s for s in new_shape if s != -1)
            new_shape = tuple(self.size // known if s == -1 else s for s in new_shape)
        if math.prod(new_shape) != self.size:
            raise NkiValidationError(
                f"cannot reshape {self.shape} into {new_shape}: element counts differ")
        if self.on_chip:
            if new_shape[0] != self.shape[0]:
                raise NkiValidationError(
                    f"reshape of on-chip tensor {self.name} must keep the partition dimension "
                    f"({self.shape[0]}), got {new_shape}")
            free = self.shape[1:]
            if self.strides[1:] != _row_major(free) and math.prod(free) > 1:
                raise NkiValidationError(f"reshape needs the free dimensions of {self.name} to be "
                                         "contiguous; copy it with nisa.tensor_copy first")
            strides = (self.strides[0],) + _row_major(new_shape[1:])
        else:
            if not self.is_contiguous():
                raise NkiValidationError(f"reshape needs {self.name} to be contiguous")
            strides = _row_major(new_shape)
        return NkiTensor(self.storage, new_shape, strides, self.offset)

    def permute(self, dims):
        dims = tuple(dims)
        if self.on_chip and dims[0] != 0:
            raise NkiValidationError(
                "the partition dimension (0) must stay first in a permute of an on-chip tensor")
        return NkiTensor(self.storage, [self.shape[d] for d in dims],
                         [self.strides[d] for d in dims], self.offset)

    def broadcast(self, dim, size):
        if self.shape[dim] != 1:
            raise NkiValidationError(
                f"broadcast needs dimension {dim} of size 1, found {self.shape[dim]}")
        shape, strides = list(self.shape), list(self.strides)
        shape[dim], strides[dim] = int(size), 0
        return NkiTensor(self.storage, shape, strides, self.offset)

    def broadcast_to(self, shape):
        t = self
        for d, (have, want) in enumerate(zip(self.shape, shape)):
            if have != want:
                t = t.broadcast(d, want)
        return t

    def expand_dim(self, dim):
        shape, strides = list(self.shape), list(self.strides)
        shape.insert(dim, 1)
        strides.insert(dim, 1)
        return NkiTensor(self.storage, shape, strides, self.offset)

    def squeeze_dim(self, dim):
        if self.shape[dim] != 1:
            raise NkiValidationError(
                f"squeeze_dim needs dimension {dim} of size 1, found {self.shape[dim]}")
        shape, strides = list(self.shape), list(self.strides)
        del shape[dim], strides[dim]
        return NkiTensor(self.storage, shape, strides, self.offset)

    def ap(self, pattern, offset=None, dtype=None):
        """Raw access pattern ``[[stride, count], ...]`` over the storage (not composable); with
        ``dtype``, over the storage's bytes read as that dtype (strides, counts and offset in its
        elements), as AWS's MX kernels view uint32/uint8 inputs as x4-packed MX data."""
        if dtype is not None and dtypes.name_of(dtype) != self.storage.dtype_name:
            return NkiTensor(_reinterpreted(self.storage, dtype)).ap(pattern, offset)
        strides = [int(p[0]) for p in pattern]
        shape = [int(p[1]) for p in pattern]
        if self.on_chip and shape[0] > 1 and strides[0] != self.storage.free_elems:
            raise NkiValidationError(
                "the partition stride of an on-chip access pattern must be the storage's free "
                f"size ({self.storage.free_elems}), got {strides[0]}")
        offset = self.offset if offset is None else int(offset)
        return NkiTensor(self.storage, shape, strides, offset)

    # ---- arithmetic sugar: each operator is an nl call ------------------------------------------
    def _nl(self, name, *args):
        from . import language
        return getattr(language, name)(*args)

    def __add__(self, o): return self._nl("add", self, o)
    def __radd__(self, o): return self._nl("add", o, self)
    def __sub__(self, o): return self._nl("subtract", self, o)
    def __rsub__(self, o): return self._nl("subtract", o, self)
    def __mul__(self, o): return self._nl("multiply", self, o)
    def __rmul__(self, o): return self._nl("multiply", o, self)
    def __truediv__(self, o): return self._nl("divide", self, o)
    def __rtruediv__(self, o): return self._nl("divide", o, self)
    def __neg__(self): return self._nl("negative", self)
    def __matmul__(self, o): return self._nl("matmul", self, o)

    def __iadd__(self, o): return self._nl("_inplace", self, o, "add")
    def __isub__(self, o): return self._nl("_inplace", self, o, "subtract")
    def __imul__(self, o): return self._nl("_inplace", self, o, "multiply")

    def __bool__(self):
        raise NkiValidationError("the value of a tensor is not known while the kernel is traced; "
                                 "use nki.isa instructions (or dynamic_range) instead of Python "
                                 "control flow on data")


def _reinterpreted(st: Storage, dtype) -> Storage:
    """Kernel input `st` as a flat tensor of `dtype` over the same bytes (one per dtype)."""
    name = dtypes.name_of(dtype)
    if st.on_chip or st.role != "input":
        raise NkiValidationError(
            f"ap(dtype={name}) reads the bytes of {st.describe()} as another dtype: the simulator "
            "does this for kernel inputs in HBM only; copy the data with its own dtype instead")
    if st.nbytes % dtypes.itemsize(dtype):
        raise NkiValidationError(f"ap(dtype={name}): {st.describe()} has {st.nbytes} bytes, not a "
                                 f"multiple of the {dtypes.itemsize(dtype)} bytes of one {name}")
    aliases = st.trace.__dict__.setdefault("_reinterpreted", {})
    alias = aliases.get((st.id, name))
    if alias is None:
        data = None
        if st.data is not None:
            if st.data.dtype.itemsize != st.itemsize:
                raise NkiValidationError(f"ap(dtype={name}) needs {st.name}'s exact bytes: it is "
                                         "held as float32 under NKI_PRECISE_FP=0")
            data = st.data.reshape(-1).view(dtypes.storage_dtype(dtype, True))
        alias = aliases[(st.id, name)] = st.trace.new_storage(
            st.buffer, (st.nbytes // dtypes.itemsize(dtype),), dtype, name=f"{st.name}.{name}",
            role="input", data=data, loc=st.loc)
    return alias


def _index_tile_fault(table, d, index) -> str | None:
    """Why `index` cannot index dimension d of `table` (an indirect DMA's rule), or None."""
    if table.on_chip:
        return "only an HBM tensor's rows are indexed by a tile (an indirect DMA)"
    if d:
        return "a tile indexes the first dimension only"
    if index.buffer != "sbuf":
        return "the index tile must be in SBUF: load the indices there first"
    if not index.storage.dtype_name.startswith(("int", "uint")):
        return "the index tile must hold integers (int32 or uint32)"
    if index.ndim != 2:
        return "the index tile must be 2-D: [partitions, indices]"
    return None


class IndirectView(NkiTensor):
    """``table[idx_tile, ...]``: rows of an HBM tensor at the indices an SBUF integer tile
    [P, R] holds, the source of a gather or the destination of a scatter (nisa.dma_copy makes
    it an indirect DMA: neuron_sim/isa/dma/dma_copy.py). The indices are known only at run
    time, so what it writes and must find initialised is `base`, every row it may reach; its
    shape is the moved tile's: [P, R, ...] ([P, ...] for one index per partition)."""

    __slots__ = ("base", "index")

    def __init__(self, base: NkiTensor, index: NkiTensor):
        r = index.shape[1]
        rest = base.shape[1:] or (1,)
        super().__init__(base.storage, (index.shape[0],) + ((r,) if r > 1 else ()) + rest,
                         (0,) * (2 if r > 1 else 1) + (base.strides[1:] or (1,)), base.offset)
        self.base, self.index = base, index

    def written_mask(self):
        return self.base.written_mask()

    def mark_written(self) -> None:
        self.base.mark_written()

    def fully_written(self) -> bool:
        return self.base.fully_written()

    def _index(self, key):
        raise NkiValidationError("index the table and its other dimensions in one step: "
                                 "table[idx_tile, j0:j1]")


def make_view(storage, shape: tuple, strides: tuple, offset: int) -> NkiTensor:
    """A view from already-checked fields (what indexing computed), without __init__'s
    conversions: views are made per instruction operand."""
    v = _new(NkiTensor)
    v.storage, v.shape, v.strides, v.offset = storage, shape, strides, offset
    v._sub = v._geometry = v._mapped = None
    return v


_new = object.__new__
