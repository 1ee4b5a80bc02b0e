"""``nisa.<instr>`` for any instruction of the ISA registry, made from its module alone.

The adapter binds the call to the module's ``build`` signature (``dst`` first, as in NKI), maps
the tensor views to access patterns, runs the core's rules on them (neuron_sim/isa/common.py:
the free dimensions of a pattern, its `SAME_SHAPE` operands), chooses the engine (`ENGINES`,
`default_engine` when the kernel leaves it open), lets the module check (`check_operands`: the
partition rules, memory reach ... of its OPERANDS) and cost the instruction on the target's chip
(every error names the kernel's line), computes the result with the module's ``semantics`` on
the kernel's own tensors (accumulator registers included), and records the instruction (its
OPERANDS' roles say which operands it reads and writes) for the program build. A module whose
NKI rules need the kernel's views themselves (their dimensions before access patterns merge
them, e.g. tensor_reduce's axis) declares `check_views(**arguments)`, and NKI arguments it takes
but does not model `UNMODELLED` (not recorded unless given). An accumulating write
(``accumulate``) left open adds where an earlier instruction wrote dst and overwrites elsewhere,
element by element.

A kernel's loops repeat a few operand geometries thousands of times: the checks and the build
run once per geometry and trace (`_key`), later calls of it only compute and record."""

from __future__ import annotations

import inspect
import math
from enum import Enum
from operator import itemgetter

import numpy as np

from ...engines import Engine
from ...errors import NeuronSimError
from ...isa import module_for
from ...isa.common import check_engine, check_pattern_dims, check_same_shape, engines_of
from ...numerics.formats import pack_x4, unpack_x4
from ...program.builder import engine_of
from .. import broadcast
from ..program import _Mapper
from ..tensor import IndirectView, NkiTensor
from ..tracer import current, user_loc
from ._common import _Ctx
from .enums import engine


class _TracePlan:
    """Addresses while tracing: the explicit ones, else partition 0 and byte 0. The memory plan
    assigns the real ones later and the program build checks again with them."""

    @staticmethod
    def address(st, index):
        return st.address or (0, 0)


class _Views:
    """The interpreter's state interface (neuron_sim/interpreter.py) over the kernel's tensors,
    so that a module's ``semantics`` computes the nisa call's numerics."""

    rounding, rng = "rne", None       # as _Ctx.write stores (a module's own store() reads them)

    def __init__(self, ctx, views, kept=(), opened=None):
        self.ctx, self.views = ctx, views          # id(access pattern) -> (operand, view)
        self.kept = kept    # ids of operands only written: a masked write reads back what it keeps
        self.opened = opened    # dst's elements an accumulating write adds to, when only some

    def read(self, ap):
        name, v = self.views[id(ap)]
        if id(ap) in self.kept:     # unwritten elements it keeps stay NaN, as on the hardware
            old = np.asarray(v.np(), np.float32).reshape(ap.shape)
            if self.opened is not None and name == "dst":   # -0.0 + x is x, bit for bit
                old = np.where(self.opened.reshape(ap.shape), old, np.float32(-0.0))
            return old
        return self.ctx.read(v, name).reshape(ap.shape)

    def read_raw(self, ap):
        name, v = self.views[id(ap)]
        return self.ctx.read(v, name, raw=True).reshape(ap.shape)

    def read_packed(self, ap):
        name, v = self.views[id(ap)]
        return unpack_x4(self.ctx.read(v, name, raw=True), ap.dtype).reshape(ap.shape + (4,))

    def write_packed(self, ap, values):
        self.ctx.write(self.views[id(ap)][1], pack_x4(values, ap.dtype))

    def write(self, ap, values, exact_from=None):
        if exact_from is not None and exact_from.dtype == ap.dtype:
            values = self.read_raw(exact_from)
        self.ctx.write(self.views[id(ap)][1], values)

    write_raw = write       # store() keeps raw storage words as they are

    def buffer(self, tensor):
        """The whole storage an operand's pattern addresses (an indirect DMA reaches its table's
        rows by index, through this): a read operand's view must be initialised, dst's is
        written."""
        tensors = _PerTrace.of(self.ctx.trace).mapper.tensors
        for name, v in self.views.values():
            if tensors.get(v.storage.id) is tensor:
                if name == "dst":
                    v.mark_written()
                else:
                    self.ctx.trace.check_initialized(v, f"nisa.{self.ctx.op}", name, self.ctx.loc)
                return v.storage.data
        raise KeyError(tensor.name)

    def accumulator(self, engine):
        tr = self.ctx.trace
        return tr.act_regs if engine == Engine.SCALAR else tr.vec_regs


class _PerTrace:
    """The adapters' state for one trace: one access-pattern mapper (equal views recur in every
    loop iteration) and the calls built so far, by operand geometry (_key)."""

    def __init__(self):
        self.mapper = _Mapper(_TracePlan())
        self.built = {}

    @staticmethod
    def of(trace):
        st = trace.__dict__.get("_generic")
        if st is None:
            st = trace._generic = _PerTrace()
        return st


class _Built:
    """A call's checks and build, for every call of the same operand geometry: the module's
    emits (with the access patterns of the call that made them: `semantics` finds the operand
    of each through `aps`), the operands read and written, the arguments the module took other
    than given (numbers as floats, the engine chosen)."""

    __slots__ = ("emits", "aps", "reads", "writes", "kept", "retyped", "engine", "lowered",
                 "read_views", "write_views")

    def __init__(self, emits, aps, reads, writes, kept, retyped):
        self.emits, self.aps, self.reads, self.writes = emits, aps, reads, writes
        self.kept, self.retyped = kept, retyped
        self.engine = _NAMES[Engine(emits[-1].engine)]      # the trace's name of it
        self.lowered = self.engine in broadcast.CONSUMERS   # a partition broadcast is lowered
        self.read_views, self.write_views = _picker(reads), _picker(writes)


def _picker(names):
    """A call's arguments `names`, as a tuple, from its arguments by name."""
    if len(names) > 1:
        return itemgetter(*names)
    return (lambda given, k=names[0]: (given[k],)) if names else (lambda given: ())


_PLAIN = (type(None), bool, int, str, tuple)       # keyed by value as they are


def _key(key: list, given) -> tuple:
    """What a call's checks and build read, after what `key` holds: each tensor operand's geometry
    (in HBM, where the view lies in its tensor changes no check or cost: a DMA's tiles of a big
    tensor are one key) and which operand's storage it shares; every other argument by type and
    value (the sign of a zero too; an enum member by identity, as its __hash__ is Python code).
    Unhashable if an argument is."""
    storages = []
    for v in given.values():
        c = v.__class__
        if c is NkiTensor:
            st = v.storage
            storages.append(st.id)
            if st.on_chip:
                g = v._geometry         # v.geometry(): its cached number read inline
                key.append(g if g is not None else v.geometry())
            else:
                key.append((st.buffer, st.dtype_name, v.shape, v.strides))
        elif c in _PLAIN:
            key.append((c, v))
        elif isinstance(v, Enum):
            key.append((type(v), id(v)))
        elif isinstance(v, (float, np.floating)) and v == 0:
            key.append((type(v), v, math.copysign(1.0, v)))
        else:
            key.append((type(v), v))
    if len(set(storages)) < len(storages):      # which operands share a storage
        key.append(tuple([storages.index(i) for i in storages]))
    return tuple(key)


def _partly_written(dst) -> tuple:
    """accumulate=None on a dst written in part: a PSUM write adds where an earlier instruction
    wrote dst, else overwrites (the first write of an accumulation group) [ISA]. (Whether it
    adds anywhere, the elements it adds to when that is only some of them.)"""
    mask = np.asarray(dst.written_mask())
    return bool(mask.any()), None if mask.all() else mask


_NAMES = {e: e.name.lower() for e in Engine}


def _engine(ctx, mod, default, engines, given, operands):
    """The engine of the call: nisa.vector_engine ... as asked, else (unknown) the module's
    `default_engine` for these operands or its `build` default; one of `engines` (the module's
    `ENGINES`, else any compute engine: the core's check, raised at the kernel's line; the
    module's check_operands then checks each operand's memory)."""
    requested = given["engine"]
    name = requested.value if isinstance(requested, engine) else (requested or "unknown")
    if name == "unknown":
        if hasattr(mod, "default_engine"):
            default = mod.default_engine(ctx.chip, **operands)
        name = _NAMES[Engine(default)]
    eng = engine_of(name)
    ctx.core(check_engine, ctx.op, eng, engines, ctx.chip)
    return eng


def _with_index(given) -> bool:
    """dma_copy of a table[idx_tile, ...] (tensor.IndirectView) side: its index tile is the
    `index` operand, and a DGE mode left open is software DGE (NKI: a gather or scatter by
    indices in SBUF takes swdge; another mode given is refused by the module)."""
    side = given["src"] if given["src"].__class__ is IndirectView else given["dst"]
    if side.__class__ is not IndirectView:
        return False
    given["index"] = side.index
    dge = given["dge_mode"]
    if dge in (None, "none", "unknown") or getattr(dge, "value", None) == "unknown":
        given["dge_mode"] = "swdge"
    return True


def adapter(name: str):
    """The nisa function of instruction `name`."""
    mod = module_for(name)
    params = [p.replace(default=engine.unknown) if p.name == "engine" else p
              for p in list(inspect.signature(mod.build).parameters.values())[1:]]
    default_engine = inspect.signature(mod.build).parameters.get("engine")
    sig = inspect.Signature(params + [inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY,
                                                        default=None)])

    names = [p.name for p in params]
    defaults = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    engines = engines_of(mod)
    dma = engines == (Engine.DMA,)
    same_shape = getattr(mod, "SAME_SHAPE", ())
    check_views = getattr(mod, "check_views", None)
    roles = {k: o.role for k, o in mod.OPERANDS.items()}
    where = f"nisa.{name}"
    # NKI arguments the module takes but does not model: left out of the call's record unless given
    unmodelled = getattr(mod, "UNMODELLED", ())
    slots = {k: defaults.get(k) for k in names if k not in unmodelled}    # in order
    accumulates, seeded = "accumulate" in names and "dst" in names, "seed" in names
    indexed = "index" in names and name == "dma_copy"      # src or dst may be table[idx_tile]
    decided = [k for k in ("accumulate", "seed") if k in names]     # set by the call itself
    pick_decided = itemgetter(*decided) if decided else None
    keyword_sets = set()        # the sets of keywords a call gave that bind as they are

    def bind(args, kwargs):
        """`sig.bind` with its defaults applied, minus `name` (inspect's is ~40% of a call)."""
        if len(args) > len(names):
            raise TypeError(f"takes {len(names)} positional arguments but {len(args)} were given")
        given = dict(zip(names, args))
        for k, v in kwargs.items():
            if k in given:
                raise TypeError(f"multiple values for argument {k!r}")
            if k not in defaults and k not in names:
                if k != "name":
                    raise TypeError(f"got an unexpected keyword argument {k!r}")
                continue
            given[k] = v
        missing = [k for k in names if k not in given and k not in defaults]
        if missing:
            raise TypeError(f"missing a required argument: {missing[0]!r}")
        return {k: given[k] if k in given else defaults[k] for k in names
                if k in given or k not in unmodelled}

    def first(ctx, given):
        """The checks and the module's build for a call of operands not seen before (_key: it
        holds all that the view rules read too)."""
        if check_views is not None:     # rules on the kernel's views, before dims merge
            ctx.core(check_views, **given)
        mapper = _PerTrace.of(ctx.trace).mapper
        operands, chip = {}, ctx.chip
        for k, v in given.items():
            if isinstance(v, NkiTensor):
                ap = operands[k] = mapper.ap(v, len(ctx.trace.instrs))
                if not dma:                 # DMA descriptors take views of any rank
                    ctx.core(check_pattern_dims, name, k, ap, chip)
            elif type(v) in (int, float) or isinstance(v, np.floating):
                operands[k] = float(v)      # numbers as Python floats, as the modules compare
            else:
                operands[k] = v
        same = [k for k in same_shape if isinstance(given[k], NkiTensor)]
        for a, b in zip(same, same[1:]):
            ctx.core(check_same_shape, name, a, operands[a], b, operands[b], chip)
        if "engine" in given:
            operands["engine"] = _engine(ctx, mod, default_engine.default, engines, given, operands)
        try:
            out = ctx.core(mod.build, chip, **operands)
        except (AttributeError, TypeError) as e:
            ctx.fail(f"the operands of nisa.{name}{sig} do not fit it ({e})")
        emits = out if isinstance(out, (list, tuple)) else (out,)
        tensors = [k for k, v in given.items() if isinstance(v, NkiTensor)]
        reads = [k for k in tensors if roles[k] == "read"]
        writes = [k for k in tensors if roles[k] == "write"]
        kept = {id(operands[k]) for k in writes} - {id(operands[k]) for k in reads}
        return _Built(emits, [(k, operands[k]) for k in tensors], reads, writes, kept,
                      {k: a for k, a in operands.items()
                       if k not in tensors and a is not given[k]})

    def call(*args, **kwargs):
        tr, loc = current(), user_loc()     # (a _Ctx only where its checks are needed)
        keywords = tuple(kwargs)
        if not args and keywords in keyword_sets:
            given = {**slots, **kwargs}         # keywords only, all known: the usual call
        else:
            try:
                given = bind(args, kwargs)
            except TypeError as e:
                _Ctx(name, tr, loc).fail(f"{e}; the call is nisa.{name}{sig}")
            if not args and "name" not in kwargs:
                keyword_sets.add(keywords)
        opened = None
        if accumulates and given["dst"].__class__ is NkiTensor:
            dst = given["dst"]
            if given["accumulate"] is not None:
                if given["accumulate"]:
                    tr.check_initialized(dst, where, "dst (accumulate=True)", loc)
            elif dst.nothing_written():     # left open: the first write of a group overwrites
                given["accumulate"] = False
            elif dst.fully_written():
                given["accumulate"] = True
            else:
                given["accumulate"], opened = _partly_written(dst)
        if seeded and given["seed"] is None:     # a random draw: one stream per instruction
            given["seed"] = len(tr.instrs)
        memo = (tr.__dict__.get("_generic") or _PerTrace.of(tr)).built  # once per geometry
        if indexed and _with_index(given):
            # built per call: its semantics reads where its operands lie (the rows sit at
            # index * row stride past the view's offset), which the key leaves out
            key = None
        elif not args:
            # the arguments left at their defaults are the same in every call: the ones given
            # by name, and what the call decided (accumulate, seed), say the rest
            key = _key([name, keywords, pick_decided(given)] if decided else [name, keywords],
                       kwargs)
        else:
            key = _key([name], given)
        try:
            built = memo.get(key)
        except TypeError:                           # an argument that is no dict key
            built = key = None
        if built is None:
            built = first(_Ctx(name, tr, loc), given)
            if key is not None:
                memo[key] = built
        reads, writes = built.read_views(given), built.write_views(given)
        if tr.numerics:
            views = {id(a): (k, given[k]) for k, a in built.aps}
            state = _Views(_Ctx(name, tr, loc), views, built.kept, opened)
            try:
                for e in built.emits:
                    mod.semantics(state, e)
            except NeuronSimError as err:   # e.g. an indirect DMA's index out of bounds
                state.ctx.fail(str(err))
        else:
            for k, v in zip(built.reads, reads):
                w = v.storage.written       # (a storage written whole passes every check)
                if w.__class__ is not str or w != "all":
                    tr.check_initialized(v, where, k, loc)
            for v in writes:
                v.mark_written()
        if built.retyped:
            given.update(built.retyped)     # the arguments as the module took them
        if built.lowered:
            tr.emit(name, built.engine, reads, writes, given, loc)
        else:
            tr.record(name, built.engine, reads, writes, given, loc)

    call.__name__ = call.__qualname__ = name
    call.__signature__ = sig
    call.__doc__ = mod.__doc__
    return call
