"""``nisa.<instr>`` for any instruction of the ISA registry, made from its module alone.

The adapter binds the call to the module's ``build`` signature (``dst`` first, as in NKI), maps
the tensor views to access patterns, checks in NKI's words the partition-start rule, the
module's `SAME_SHAPE` operands and its engine (`ENGINES`, `default_engine` when the kernel leaves
it open, the engine's memory reach), lets the module check and cost the instruction on the
target's chip (an error names the kernel's line), computes the result with the module's
``semantics`` on the kernel's own tensors (accumulator registers included), and records the
instruction for the program build. Hand-written adapters remain where the NKI call needs the
kernel's view itself (tensor_reduce's axis, dma_transpose's axes), the NKI program build's own
DMA path (dma_copy) or PSUM write masks (nc_matmul)."""

from __future__ import annotations

import inspect

import numpy as np

from ...engines import Engine
from ...errors import NeuronSimError
from ...isa import module_for
from ...program.builder import engine_of
from ..errors import NkiValidationError
from ..program import _Mapper
from ..tensor import NkiTensor
from ._common import _arg, _Ctx
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

    def __init__(self, ctx, views, kept=()):
        self.ctx, self.views = ctx, views          # id(access pattern) -> (operand, view)
        self.kept = kept    # ids of operands only written: a masked write reads back what it keeps

    def read(self, ap):
        name, v = self.views[id(ap)]
        if id(ap) in self.kept:     # unwritten elements it keeps stay NaN, as on the hardware
            return np.asarray(v.np(), np.float32).reshape(ap.shape)
        return self.ctx.read(v, name).reshape(ap.shape)

    def read_raw(self, ap):
        name, v = self.views[id(ap)]
        return self.ctx.read_raw(v, name).reshape(ap.shape)

    def write(self, ap, values, exact_from=None):
        if exact_from is not None and exact_from.dtype == ap.dtype:
            values = self.read_raw(exact_from)
        self.ctx.write(self.views[id(ap)][1], values)

    def write_raw(self, ap, raw):
        self.ctx.write(self.views[id(ap)][1], raw)

    def accumulator(self, engine):
        tr = self.ctx.trace
        return tr.act_regs if engine == Engine.SCALAR else tr.vec_regs


_COMPUTE = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def _engine(ctx, mod, default, given, operands):
    """The engine of the call: nisa.vector_engine ... as asked, else (unknown) the module's
    `default_engine` for these operands or its `build` default; one of the module's `ENGINES`
    (else any compute engine), reaching every tensor operand's memory (errors in NKI's words)."""
    names = [Engine(e).name.lower() for e in getattr(mod, "ENGINES", _COMPUTE)]
    if getattr(given["engine"], "value", given["engine"]) in (None, "unknown") \
            and hasattr(mod, "default_engine"):
        default = mod.default_engine(**operands)
    tensors = [(k, v) for k, v in given.items() if isinstance(v, NkiTensor)]
    return engine_of(ctx.engine(given["engine"], Engine(default).name.lower(), names, tensors))


def adapter(name: str):
    """The nisa function of instruction `name`."""
    mod = module_for(name)
    params = [p.replace(default=engine.unknown) if p.name == "engine" else p
              for p in list(inspect.signature(mod.build).parameters.values())[1:]]
    default_engine = inspect.signature(mod.build).parameters.get("engine")
    sig = inspect.Signature(params + [inspect.Parameter("name", inspect.Parameter.KEYWORD_ONLY,
                                                        default=None)])

    def call(*args, **kwargs):
        ctx = _Ctx(name)
        try:
            bound = sig.bind(*args, **kwargs)
        except TypeError as e:
            ctx.fail(f"{e}; the call is nisa.{name}{sig}")
        bound.apply_defaults()
        given = {k: v for k, v in bound.arguments.items() if k != "name"}
        mapper, views, operands = _Mapper(_TracePlan()), {}, {}
        if "seed" in given and given["seed"] is None:     # a random draw: one stream per instruction
            given["seed"] = len(ctx.trace.instrs)
        for k, v in given.items():
            if isinstance(v, NkiTensor):
                ctx.partitions(v, k)
                ctx.pattern_dims(v, k)
                ap = operands[k] = mapper.ap(v, len(ctx.trace.instrs))
                views[id(ap)] = (k, v)
            elif type(v) in (int, float) or isinstance(v, np.floating):
                operands[k] = _arg(v)       # numbers as Python floats, as the modules compare
            else:
                operands[k] = v
        same = [(k, given[k]) for k in getattr(mod, "SAME_SHAPE", ()) if isinstance(given[k], NkiTensor)]
        for (an, a), (bn, b) in zip(same, same[1:]):
            ctx.same_pf(a, b, an, bn)
        if "engine" in given:
            operands["engine"] = _engine(ctx, mod, default_engine.default, given, operands)
        try:
            out = mod.build(ctx.chip, **operands)
        except NeuronSimError as e:
            raise NkiValidationError(str(e), ctx.loc, f"nisa.{name}") from e
        except (AttributeError, TypeError) as e:
            ctx.fail(f"the operands of nisa.{name}{sig} do not fit it ({e})")
        emits = out if isinstance(out, (list, tuple)) else (out,)
        read_ids = {id(a): views[id(a)] for e in emits for a in e.reads if id(a) in views}
        written_ids = {id(a): views[id(a)] for e in emits for a in e.writes if id(a) in views}
        read_ids |= {i: v for i, v in views.items() if i not in read_ids and i not in written_ids}
        reads, writes = list(read_ids.values()), list(written_ids.values())
        if ctx.numerics:
            state = _Views(ctx, views, written_ids.keys() - read_ids.keys())
            for e in emits:
                mod.semantics(state, e)
        else:
            for k, v in reads:
                ctx.trace.check_initialized(v, f"nisa.{name}", k, ctx.loc)
            for _, v in writes:
                ctx.write(v, None)
        ctx.emit(Engine(emits[-1].engine).name.lower(), [v for _, v in reads], [v for _, v in writes],
                 **{k: operands[k] if not isinstance(v, NkiTensor) else v for k, v in given.items()})

    call.__name__ = call.__qualname__ = name
    call.__signature__ = sig
    call.__doc__ = mod.__doc__
    return call
