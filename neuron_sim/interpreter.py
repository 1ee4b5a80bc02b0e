"""Functional execution: run a program's instructions in program order on NumPy buffers, each
through its instruction module's semantics (FP32 arithmetic, casts that round like the formats).

    out = execute(program, {"A": a, "B": b})     # -> {hbm tensor name: array}

Program order is a valid execution order because every dependency points backwards."""

from __future__ import annotations

from math import prod

import numpy as np
from numpy.lib.stride_tricks import as_strided

from .errors import ProgramError
from .hardware import get_chip, list_chips
from .isa import module_for
from .numerics.formats import MX_PACKED, np_dtype, unpack_x4
from .numerics.rounding import store
from .program.ap import AccessPattern, Memory


MAX_LANES = max(get_chip(n).sbuf_partitions for n in list_chips())


def _check_inside(ap, shape, steps, base, size) -> None:
    """The elements an access reaches lie in its tensor: a strided view past the end would read
    other memory and write over it."""
    if 0 in shape:
        return
    lo = base + sum(min(0, (n - 1) * st) for n, st in zip(shape, steps))
    hi = base + sum(max(0, (n - 1) * st) for n, st in zip(shape, steps))
    if lo < 0 or hi >= size:
        raise ProgramError(f"an access of {ap.tensor.name!r} reaches its element "
                           f"{lo if lo < 0 else hi}, outside its {size} elements: give access "
                           "patterns inside their tensors")


class State:
    """Backing storage of every tensor a program touches, plus the rounding mode."""

    def __init__(self, rounding: str = "rne", seed: int = 0):
        self.rounding = rounding
        self.rng = np.random.default_rng(seed)
        self.buffers: dict[int, np.ndarray] = {}
        self.registers: dict[int, np.ndarray] = {}

    def accumulator(self, engine) -> np.ndarray:
        """The engine's accumulator registers, one FP32 per partition (lane), kept across
        instructions (reduce_cmd)."""
        return self.registers.setdefault(int(engine), np.zeros(MAX_LANES, np.float32))

    def buffer(self, t) -> np.ndarray:
        b = self.buffers.get(t.id)
        if b is None:
            shape = t.shape + ((4,) if t.dtype in MX_PACKED else ())
            b = self.buffers[t.id] = np.zeros(shape, np_dtype(t.dtype))
        return b

    def _view(self, ap: AccessPattern, packed: bool = False) -> np.ndarray:
        t = ap.tensor
        buf = self.buffer(t)
        flat = buf.reshape(-1)
        row = int(prod(t.shape[1:]))
        lanes = 4 if t.dtype in MX_PACKED else 1
        if t.memory == Memory.HBM:
            pstride = ap.p_stride if ap.p_size > 1 else row
        else:
            pstride = row * ap.p_stride
        base = ((ap.p_start - t.partition_start) * row + ap.offset) * lanes
        item = flat.itemsize
        shape = (ap.p_size,) + tuple(s for s, _ in ap.dims)
        steps = (pstride * lanes,) + tuple(st * lanes for _, st in ap.dims)     # in items
        if packed:
            shape, steps = shape + (4,), steps + (1,)
        _check_inside(ap, shape, steps, base, flat.size)
        strides = tuple(st * item for st in steps)
        # stride over an unsigned view: NumPy cannot build strided views of some ml_dtypes
        # (float8) directly; same item size, so viewing back is exact
        raw = flat.view(f"u{item}")
        return as_strided(raw[base:], shape=shape, strides=strides, writeable=True).view(flat.dtype)

    def read_raw(self, ap) -> np.ndarray:
        return np.array(self._view(ap))

    def read(self, ap) -> np.ndarray:
        """The values as FP32, shape (partitions, *free)."""
        return self._view(ap).astype(np.float32)

    def read_packed(self, ap) -> np.ndarray:
        """The four values of each element of an x4-packed MX operand, FP32 [..., 4]."""
        return self._view(ap, packed=True).astype(np.float32)

    def write_packed(self, ap, values) -> None:
        """Store [..., 4] values (already rounded to the element type) into an x4 operand."""
        view = self._view(ap, packed=True)
        view[...] = np.asarray(values, np.float32).astype(view.dtype).reshape(view.shape)

    def write(self, ap, values, exact_from=None) -> None:
        if exact_from is not None and exact_from.dtype == ap.dtype:    # bit-exact copy
            packed = ap.dtype in MX_PACKED          # all four values of each x4 element
            view = self._view(ap, packed)
            view[...] = self._view(exact_from, packed).reshape(view.shape)
            return
        with np.errstate(over="ignore"):        # (NumPy warns of values it rounds to inf)
            store(self._view(ap), np.asarray(values, np.float32), ap.dtype, self.rounding,
                  self.rng)

    def write_raw(self, ap, raw) -> None:
        """Store storage-format values bit for bit (dtypes must match)."""
        view = self._view(ap)
        view[...] = np.asarray(raw).view(view.dtype).reshape(view.shape)

    def load(self, tensor, array) -> None:
        a = np.asarray(array)
        if tensor.dtype in MX_PACKED and a.shape == tensor.shape:     # x4 words: unpack them
            a = unpack_x4(a, tensor.dtype)
        if a.shape != self.buffer(tensor).shape:
            raise ProgramError(f"input {tensor.name!r}: shape {a.shape}, expected "
                               f"{self.buffer(tensor).shape}")
        self.buffers[tensor.id] = a.astype(np_dtype(tensor.dtype))


def execute(program, inputs=None, *, rounding: str = "rne", seed: int = 0, state=None) -> dict:
    """Run `program` (built with keep_operands=True). `inputs` maps HBM tensor names to arrays
    (or pass a `state` already loaded). Returns every HBM tensor's final contents by name.
    rounding: 'rne' or 'stochastic'."""
    if program.emits is None:
        raise ProgramError("this program keeps no operands (built in bulk); it can be timed but "
                           "not executed")
    state = state or State(rounding, seed)
    hbm = {t.name: t for t in program.tensors if t.memory == Memory.HBM}
    for name, arr in (inputs or {}).items():
        if name not in hbm:
            raise ProgramError(f"no HBM tensor named {name!r}; have {sorted(hbm)}")
        state.load(hbm[name], arr)
    for emit in program.emits:
        mod = module_for(emit.name)
        if mod is not None:
            mod.semantics(state, emit)
    return {name: state.buffer(t) for name, t in hbm.items()}
