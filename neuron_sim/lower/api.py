"""lower_op / lower_sequence: build the program of one op or of a sequence, simulate it, and return
a Timing. Big ops are built at two representative sizes and extrapolated (see README)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..engines import DmaDir, Engine, ENGINE_NAMES
from ..errors import NeuronSimError
from ..config import default_chip
from ..hardware import Chip, get_chip
from ..timing import simulate
from .assumptions import REPEAT_CAP
from .context import LowerCtx
from .registry import LoweringError, rule_for
from .spec import OpSpec, TensorSpec

ENGINES = tuple(ENGINE_NAMES[e] for e in Engine)


@dataclass
class Timing:
    total_ns: float
    engine_ns: dict                 # busy ns per engine of one physical core
    hbm_bytes: float                # bytes to/from HBM (whole logical core)
    flops: float                    # TensorE FLOPs (whole logical core)
    instructions: int               # instructions simulated (after representative repeats)
    estimated: bool = False         # True: roofline, no program
    extrapolated: bool = False
    lower_s: float = 0.0            # wall seconds spent building + simulating
    ops: tuple = ()
    per_op_ns: tuple = ()           # lower_sequence: each op's standalone time
    note: str = ""
    extra: dict = field(default_factory=dict)


def _chip(chip) -> Chip:
    return chip if isinstance(chip, Chip) else get_chip(chip or default_chip())


def _measure(ctx: LowerCtx):
    prog = ctx.b.build()
    if len(prog) == 0:
        return 0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0
    res = simulate(prog)
    c = prog.cols
    dma = c["engine"] == Engine.DMA
    d = c["dma_dir"]
    hbm = float(c["dma_bytes"][dma & ((d == DmaDir.HBM_TO_SBUF) | (d == DmaDir.SBUF_TO_HBM))].sum()
                + 2 * c["dma_bytes"][dma & (d == DmaDir.HBM_TO_HBM)].sum())
    return (res.total_ns, dict(res.engine_busy_ns), hbm, float(c["flops"].sum()), len(prog))


def _build(emit, chip, lnc, cap, **ctx_kw):
    ctx = LowerCtx(chip, lnc, cap, **ctx_kw)
    emit(ctx)
    return ctx, _measure(ctx)


def _lin(a, b, k, extra):
    """Steady-state extrapolation: a and b are measured k blocks apart; add `extra` blocks at the
    marginal cost (b - a) / k."""
    return b + (b - a) * extra / k


def _timed(emit, chip, lnc, name, **ctx_kw) -> Timing:
    t0 = time.perf_counter()
    ctx, (tot, eng, hbm, flops, n) = _build(emit, chip, lnc, REPEAT_CAP, **ctx_kw)
    truncated = [(r, e) for r, e in ctx.repeats if r > e]
    extrapolated = False
    if truncated:
        per_core, e2 = truncated[0]
        ctx1, (tot1, eng1, hbm1, flops1, n1) = _build(emit, chip, lnc, REPEAT_CAP // 2, **ctx_kw)
        e1 = [e for r, e in ctx1.repeats if r > e][0]
        k, extra = e2 - e1, per_core - e2
        tot = _lin(tot1, tot, k, extra)
        eng = {e: _lin(eng1.get(e, 0.0), eng.get(e, 0.0), k, extra) for e in eng}
        hbm = _lin(hbm1, hbm, k, extra)
        flops = _lin(flops1, flops, k, extra)
        extrapolated = True
    cores = ctx.cores_of_work()
    return Timing(tot, eng, hbm * cores, flops * cores, n, extrapolated=extrapolated,
                  lower_s=time.perf_counter() - t0, ops=(name,))


def _with_ids(op: OpSpec, fn) -> OpSpec:
    """A copy of op whose TensorSpecs carry ids: fn(tensor, is_output, position) -> id."""
    from dataclasses import replace
    pos = [0]

    def tag(a, out):
        if isinstance(a, TensorSpec):
            pos[0] += 1
            return a if a.id is not None else replace(a, id=fn(a, out, pos[0]))
        if isinstance(a, (list, tuple)) and a and all(isinstance(t, TensorSpec) for t in a):
            return type(a)(tag(t, out) for t in a)
        return a
    return OpSpec(op.name, tuple(tag(a, False) for a in op.args),
                  tuple(tag(o, True) for o in op.outputs), op.kwargs)


def assign_ids(ops):
    """Give every tensor of a sequence that has no id an identity: an input equal in (shape,
    strides, dtype) to the most recent earlier output is that output; everything else is a
    distinct tensor. (Compiled graphs and the eager backend pass explicit ids.)"""
    latest, out = {}, []
    for i, op in enumerate(ops):
        def fn(t, is_out, k, i=i):
            if not is_out and t.layout_key in latest:
                return latest[t.layout_key]
            return ("o" if is_out else "x", i, k)
        tagged = _with_ids(op, fn)
        for o in tagged.outputs:
            latest[o.layout_key] = o.id
        out.append(tagged)
    return out


def lower_op(op: OpSpec, chip=None, lnc: int = 1) -> Timing:
    """Lower and simulate one op. Raises LoweringError when no rule applies (use `estimate`)."""
    chip = _chip(chip)
    rule = rule_for(op.name)
    if rule is None:
        raise LoweringError(f"no lowering rule for {op.name!r} (normalised {op.op!r}); "
                            "time it with neuron_sim.lower.estimate or add a @lowers rule")

    op = _with_ids(op, lambda t, is_out, k: ("o" if is_out else "x", k))
    if (op.outputs and all(o.numel == 0 for o in op.outputs)) or \
            (not op.outputs and op.inputs and all(t.numel == 0 for t in op.inputs)):
        # zero-element result: nothing to move or compute
        return Timing(0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0, ops=(op.name,),
                      note="empty tensors")

    def emit(ctx):
        rule(ctx, op)
        ctx.end_op()
    try:
        return _timed(emit, chip, lnc, op.name)
    except (LoweringError, NeuronSimError):
        raise
    except (IndexError, ValueError, TypeError, KeyError, ZeroDivisionError) as e:
        raise LoweringError(f"rule {rule.__name__} could not lower {op.name} with args "
                            f"{op.args!r}: {type(e).__name__}: {e}") from e


def lower_sequence(ops, chip=None, lnc: int = 1, *, live_outputs=None,
                   standalone=None) -> Timing:
    """Lower `ops` (in order) into ONE program whose intermediates stay in SBUF when a later op
    reads them and they fit (RESIDENT_SBUF_BYTES). Tensor identity: `TensorSpec.id` when set,
    otherwise equal (shape, strides, dtype). `live_outputs` (ids): outputs to store to HBM;
    None stores every output (eager: the user may hold any of them).

    Ops too big for one representative program (their own lowering extrapolates) are timed by
    their own program and added in series; `standalone` may pass already-known per-op Timings
    (the eager cache does) to avoid lowering them twice."""
    chip = _chip(chip)
    t0 = time.perf_counter()
    ops = assign_ids(list(ops))
    alone = list(standalone) if standalone is not None else [lower_op(o, chip, lnc) for o in ops]
    big = [a.extrapolated for a in alone]
    fused = [o for o, b in zip(ops, big) if not b]
    live = None if live_outputs is None else {("id", x) for x in live_outputs}
    later = set()
    seen_inputs = []
    for o in fused:
        for t in o.inputs:
            seen_inputs.append(LowerCtx.key(t))
    for i, o in enumerate(fused):
        reads_after = {LowerCtx.key(t) for o2 in fused[i + 1:] for t in o2.inputs}
        for t in o.outputs:
            if LowerCtx.key(t) in reads_after:
                later.add(LowerCtx.key(t))

    def emit(ctx):
        for o in fused:
            rule_for(o.name)(ctx, o)
            ctx.end_op()
    if fused:
        ctx = LowerCtx(chip, lnc, REPEAT_CAP, live=live, consumed_later=frozenset(later),
                       name="fused")
        try:
            emit(ctx)
        except (IndexError, ValueError, TypeError, KeyError, ZeroDivisionError) as e:
            raise LoweringError(f"fused sequence could not be lowered: {type(e).__name__}: {e}") \
                from e
        tot, eng, hbm, flops, n = _measure(ctx)
        cores = ctx.cores_of_work()
        hbm, flops = hbm * cores, flops * cores
    else:
        tot, eng, hbm, flops, n = 0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0
    for a, b in zip(alone, big):
        if b:
            tot += a.total_ns
            eng = {e: eng.get(e, 0.0) + a.engine_ns.get(e, 0.0) for e in set(eng) | set(a.engine_ns)}
            hbm += a.hbm_bytes
            flops += a.flops
            n += a.instructions
    return Timing(tot, eng, hbm, flops, n, extrapolated=any(big),
                  lower_s=time.perf_counter() - t0, ops=tuple(o.name for o in ops),
                  per_op_ns=tuple(a.total_ns for a in alone))
