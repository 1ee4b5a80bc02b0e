"""lower_op / lower_sequence: build the program of one op or of a sequence, simulate it, and return
a Timing. Big ops are built at two representative sizes and extrapolated (see README)."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..engines import N_COMPUTE_STREAMS, DmaDir, Engine, ENGINE_NAMES
from ..errors import NeuronSimError
from ..hardware import Chip, get_chip
from ..program.program import COLUMNS, Program
from ..timing import simulate
from ..trace.op_program import OpProgram, classify_dma
from .assumptions import REPEAT_CAP
from .context import LowerCtx, cores_of_work
from .registry import RULES, LoweringError, rule_for
from .replay import flush as replay_flush, joined_csr, lower_into
from .rules.optimizer import list_identity
from .spec import OpSpec, TensorSpec, tensor_list

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
    # lower_op: its representative program as the profiler reads it (lanes, DMA bytes by
    # argument, spills, peaks); None for estimates, sequences and empty ops
    program: OpProgram | None = field(default=None, compare=False, repr=False)
    # lower_op: (blocks in all, blocks of this core) of each repeat()/split() (cores_of_work)
    blocks: tuple = field(default=(), compare=False, repr=False)


def _measure(ctx: LowerCtx):
    replay_flush(ctx)
    prog = ctx.b.build()
    if len(prog) == 0:
        return 0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0
    res = ctx.result = simulate(prog)
    return _summed(prog, res)


# as ints: NumPy compares an array with an IntEnum member ~4x slower than with an int
_DMA = int(Engine.DMA)
# HBM bytes per byte a DMA moves, by its direction's byte (dma_dir; -1, no DMA, is 255)
_HBM_PER_BYTE = np.zeros(256, np.float64)
_HBM_PER_BYTE[[int(DmaDir.HBM_TO_SBUF), int(DmaDir.SBUF_TO_HBM)]] = 1.0
_HBM_PER_BYTE[int(DmaDir.HBM_TO_HBM)] = 2.0          # read and written


def _summed(prog, res):
    """(total ns, busy ns per engine, HBM bytes, FLOPs, instructions) of a simulated program.
    HBM bytes in one weighted sum (few NumPy calls: each costs microseconds in a cold lowering);
    byte counts are whole (or small binary fractions), so any order of summing gives the same."""
    c = prog.cols
    w = _HBM_PER_BYTE[c["dma_dir"].astype(np.uint8)]
    w[c["engine"] != _DMA] = 0.0
    hbm = float(np.dot(w, c["dma_bytes"]))
    return (res.total_ns, dict(res.engine_busy_ns), hbm, float(c["flops"].sum()), len(prog))


def _build(emit, chip, lnc, cap, **ctx_kw):
    ctx = LowerCtx(chip, lnc, cap, **ctx_kw)
    emit(ctx)
    return ctx, _measure(ctx)


def _lin(a, b, k, extra):
    """Steady-state extrapolation: a and b are measured k blocks apart; add `extra` blocks at the
    marginal cost (b - a) / k."""
    return b + (b - a) * extra / k


def _op_program(op: OpSpec, ctx: LowerCtx, total_ns: float, hbm_bytes: float, flops: float):
    """The OpProgram of op's representative program (built with operands kept, then dropped),
    with the op's figures: its DMA bytes scaled to the op's HBM bytes, the op's time and FLOPs."""
    res = ctx.result
    if res is None:
        return None
    arg_ids = {}
    for j, a in enumerate(op.args):
        for t in (a if isinstance(a, (list, tuple)) else (a,)):
            if isinstance(t, TensorSpec):
                arg_ids[LowerCtx.key(t)] = j
    out_keys = {LowerCtx.key(t) for t in op.outputs if isinstance(t, TensorSpec)}
    arg_of_tensor = {h.id: arg_ids[k] for k, h in ctx._hbm.items() if k in arg_ids}
    outputs = {h.id for k, h in ctx._hbm.items() if k in out_keys}
    reads, write, save, reload = classify_dma(res.program, arg_of_tensor, outputs)
    res.program.emits = None
    moved = sum(reads.values()) + write + save + reload
    s = hbm_bytes / moved if moved else 0.0
    return OpProgram(op.name, res, ctx.b.sbuf_peak_bytes_per_partition,
                     ctx.b.psum_peak_bytes_per_partition, {j: b * s for j, b in reads.items()},
                     write * s, save * s, reload * s, list(ctx.repeats),
                     total_ns / res.total_ns if res.total_ns else 1.0, flops)


def _timed(emit, chip, lnc, op: OpSpec) -> Timing:
    """Time op's program: built once with at most REPEAT_CAP blocks (kept as Timing.program)
    and, when that truncated a repeat, again with half as many to extrapolate."""
    t0 = time.perf_counter()
    name = op.name
    ctx, (tot, eng, hbm, flops, n) = _build(emit, chip, lnc, REPEAT_CAP, keep_operands=True,
                                            name=name)
    truncated = [(r, e) for r, e in ctx.repeats if r > e]
    extrapolated = False
    if truncated:
        per_core, e2 = truncated[0]
        ctx1, (tot1, eng1, hbm1, flops1, n1) = _build(emit, chip, lnc, REPEAT_CAP // 2, name=name)
        e1 = [e for r, e in ctx1.repeats if r > e][0]
        k, extra = e2 - e1, per_core - e2
        eng_added = {e: _lin(eng1.get(e, 0.0), eng.get(e, 0.0), k, extra) - eng[e] for e in eng}
        # In steady state each block costs at least what its busiest engine adds: the two small
        # builds can still overlap start-up with work, which would put the total under an engine.
        tot = max(_lin(tot1, tot, k, extra), tot + max(eng_added.values(), default=0.0))
        eng = {e: eng[e] + added for e, added in eng_added.items()}
        hbm = _lin(hbm1, hbm, k, extra)
        flops = _lin(flops1, flops, k, extra)
        extrapolated = True
    cores = cores_of_work(ctx._blocks, ctx.lnc)
    hbm, flops = hbm * cores, flops * cores
    program = _op_program(op, ctx, tot, hbm, flops)
    return Timing(tot, eng, hbm, flops, n, extrapolated=extrapolated,
                  lower_s=time.perf_counter() - t0, ops=(name,),
                  extra={"sbuf_peak_bytes_per_partition": ctx.b.sbuf_peak_bytes_per_partition},
                  program=program, blocks=tuple(ctx._blocks))


def _map_tensors(op: OpSpec, f) -> OpSpec:
    """A copy of op with each TensorSpec t, in tensor lists too, replaced by f(t, is_output)."""
    def each(a, out):
        if isinstance(a, TensorSpec):
            return f(a, out)
        return type(a)(f(t, out) for t in a) if tensor_list(a) else a
    return OpSpec(op.name, tuple(each(a, False) for a in op.args),
                  tuple(each(o, True) for o in op.outputs), op.kwargs)


def _with_ids(op: OpSpec, fn) -> OpSpec:
    """A copy of op whose TensorSpecs carry ids: fn(tensor, is_output, position) -> id."""
    pos = [0]

    def tag(a, out):
        pos[0] += 1
        return a if a.id is not None else a.with_id(fn(a, out, pos[0]))
    return _map_tensors(op, tag)


def _all_ids(op: OpSpec) -> bool:
    """Whether every TensorSpec `_with_ids` would tag has an id already."""
    for a in (*op.args, *op.outputs):
        if isinstance(a, TensorSpec):
            if a.id is None:
                return False
        elif tensor_list(a):
            for t in a:
                if t.id is None:
                    return False
    return True


def assign_ids(ops):
    """Give every tensor of a sequence that has no id an identity: an input equal in (shape,
    strides, dtype) to the most recent earlier output is that output; everything else is a
    distinct tensor. (Compiled graphs and the eager backend pass explicit ids.)"""
    latest, out, kept = {}, [], set()
    for i, op in enumerate(ops):
        def fn(t, is_out, k, i=i):
            if not is_out and t.layout_key in latest:
                return latest[t.layout_key]
            return ("o" if is_out else "x", i, k)
        # (the eager backend's and the compiler's ops carry every id: kept as they are, once)
        tagged = op if id(op) not in kept and _all_ids(op) else _with_ids(op, fn)
        kept.add(id(tagged))
        for o in tagged.outputs:
            latest[o.layout_key] = o.id
        out.append(tagged)
    return out


def _op_emitter(op: OpSpec):
    """(op with tensor ids, its rule, emit(ctx) that lowers it). LoweringError when no rule
    applies."""
    rule = rule_for(op.name)
    if rule is None:
        raise LoweringError(f"no lowering rule for {op.name!r} (normalised {op.op!r}); "
                            "time it with neuron_sim.lower.estimate or add a @lowers rule")
    op = _with_ids(op, lambda t, is_out, k: ("o" if is_out else "x", k))

    def emit(ctx):
        lower_into(ctx, rule, op)
    return op, rule, emit


def lower_op(op: OpSpec, chip=None, lnc: int = 1) -> Timing:
    """Lower and simulate one op. Raises LoweringError when no rule applies (use `estimate`)."""
    chip = get_chip(chip)
    op, rule, emit = _op_emitter(op)
    if (op.outputs and all(o.numel == 0 for o in op.outputs)) or \
            (not op.outputs and op.inputs and all(t.numel == 0 for t in op.inputs)):
        # zero-element result: nothing to move or compute
        return Timing(0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0, ops=(op.name,),
                      note="empty tensors")
    try:
        return _timed(emit, chip, lnc, op)
    except (LoweringError, NeuronSimError):
        raise
    except (IndexError, ValueError, TypeError, KeyError, ZeroDivisionError) as e:
        raise LoweringError(f"rule {rule.__name__} could not lower {op.name} with args "
                            f"{op.args!r}: {type(e).__name__}: {e}") from e


def warm_up(chip=None) -> None:
    """Lower and simulate one tiny op, for what a process's first lowering pays once: numba
    loading the dependency and scheduling kernels (from its on-disk cache when there is one,
    ~250 ms of CPU) and the modules they pull in. The eager device runs it in a background
    thread from its first use (torch_neuronx.cost.warm_up_in_background), so the first drain
    finds the kernels loaded; it is also safe next to real lowering (numba loads and compiles
    under its own lock) and leaves nothing behind that changes a later program. The ISA
    instruction modules, which the builder imports at their first use, are imported here too
    (~25 ms of CPU for all of them)."""
    from .. import isa
    for name in isa.instruction_names():
        isa.module_for(name)
    t = TensorSpec((get_chip(chip).sbuf_partitions, 4), "float32")     # one tile
    lower_op(OpSpec("aten::add.Tensor", (t, t), (t,)), chip)


def _keys(tensors, lists):
    """Residency keys of an op's tensors: each tensor, and a tensor list as the one flat
    tensor a foreach op streams (optimizer.list_identity)."""
    out = [LowerCtx.key(t) for t in tensors]
    for lst in lists:
        ident = list_identity(lst)
        if ident is not None:
            out.append(("id", ident))
    return out


def _row_reads(op: OpSpec, chip, later) -> dict:
    """{key: [p, cols]} of the inputs in `later` (keys) op's rule reads in a plan other than
    the flat one, as the rule declares it (`@lowers(..., reads=...)`, lower/reads.py)."""
    reads = getattr(RULES.get(op.op), "reads", None)
    return reads(op, chip, later) if reads is not None else {}


def sequence_ctx(fused, chip, lnc, live, cap=REPEAT_CAP, ctx_type=LowerCtx, **ctx_kw):
    """The LowerCtx of `fused`'s one program (ops with ids, in order): which outputs a later op
    reads (they may stay resident), in which plans they read them (a resident copy is laid
    out for its readers, as a compiler lays out an intermediate) and each tensor's last
    reader (its SBUF is free after it). `live`: keys of the outputs to store (None: all).
    semantics.run_lowered_sequence builds the same program in full."""
    later = set()
    last_read = {}          # key -> the last op reading it: its SBUF is free after that
    for i, o in enumerate(fused):
        for k in _keys(o.inputs, [list(a) for a in o.args if tensor_list(a)]):
            last_read[k] = i
    for i, o in enumerate(fused):
        for k in _keys(o.outputs, [list(o.outputs)] if len(o.outputs) > 1 else []):
            if last_read.get(k, -1) > i:
                later.add(k)
    read_plans = {}         # key -> [p, cols] covering its readers' plans other than the flat
    for o in fused:
        for k, shape in _row_reads(o, chip, later).items():
            old = read_plans.get(k, shape)
            read_plans[k] = (max(old[0], shape[0]), max(old[1], shape[1]))
    return ctx_type(chip, lnc, cap, live=live, consumed_later=frozenset(later),
                    last_read=last_read, read_plans=read_plans, name="fused", **ctx_kw)


def _program(fused, chip, lnc, live):
    """ONE program of `fused` (in order): (total, engines, hbm, flops, instructions, truncated,
    SBUF peak bytes per partition, spilled), truncated when some op emitted fewer blocks than it
    has (representative repeats); spilled: key -> TensorSpec of the intermediates stored to HBM
    only because a later op reads them and they could not stay resident."""
    ctx = sequence_ctx(fused, chip, lnc, live)
    later = ctx.consumed_later
    stored = {}             # key -> TensorSpec: outputs of ops that emitted instructions
    kept = set()            # keys that stayed resident (free_dead releases them all by the end)
    try:
        for i, o in enumerate(fused):
            rows = lower_into(ctx, rule_for(o.name), o)
            kept.update(ctx._resident)
            ctx.free_dead(i)
            if rows:                # a view emits nothing: its consumers read its base
                stored.update((LowerCtx.key(t), t) for t in o.outputs)
    except (IndexError, ValueError, TypeError, KeyError, ZeroDivisionError) as e:
        raise LoweringError(f"fused sequence could not be lowered: {type(e).__name__}: {e}") \
            from e
    tot, eng, hbm, flops, n = _measure(ctx)
    cores = cores_of_work(ctx._blocks, ctx.lnc)
    truncated = any(r > e for r, e in ctx.repeats)
    spilled = {k: t for k, t in stored.items() if k in later and k not in kept
               and (live is None or k not in live)}
    return (tot, eng, hbm * cores, flops * cores, n, truncated,
            ctx.b.sbuf_peak_bytes_per_partition, spilled)


# Rules whose work is the same per element wherever it sits: a run of such ops over big tensors
# can be timed on a slice of every tensor and scaled (see _sliced).
_ELEMENTWISE_RULES = {"unary_activation", "unary_vector", "binary", "ternary",
                      "activation_backward", "copy_like", "fill", "foreach"}
# Of those, the rules that only stream chunks through LowerCtx.stream: tiles from the op's own
# pool, DMAs on the round-robin queues, nothing carried from one op to the next (the foreach
# optimizer rules tag tensors with ctx.ops_done; matmuls carry ctx._seq and the stationary)
_STREAM_RULES = _ELEMENTWISE_RULES - {"foreach"}


def _concatenated_program(fused, alone, chip, live):
    """`_program(fused, ...)`'s program without building it, when it is only the ops' own
    programs one after the other: no tensor shared between or inside the ops (so no dataflow,
    no residency, no dependency from one op to another), every output stored (`live` None),
    every op a streaming rule whose standalone program (`alone[i].program`) is the one it emits
    in a sequence. The builder would then write each op's rows as it did alone, its DMAs on the
    queues shifted by the DMAs before it (round-robin), and free every tile at the op's end (so
    each op allocates as alone: the SBUF peak is the largest op's). The per-tensor optimizer
    groups of an eager step are such sequences. None when it does not apply. The same program
    as _program's, array for array (tests/lower/test_graph_fusion.py compares the two)."""
    if live is not None or len(fused) < 2 or len(alone) != len(fused):
        return None
    seen = set()
    for o, a in zip(fused, alone):
        rule = rule_for(o.name)
        if rule is None or rule.__name__ not in _STREAM_RULES or a.program is None \
                or a.estimated or a.extrapolated or not a.blocks \
                or a.program.result.program.chip.name != chip.name:
            return None
        for t in (*o._inputs, *o.outputs):
            k = LowerCtx.key(t)
            if k in seen:
                return None
            seen.add(k)
    progs = [a.program.result.program for a in alone]
    lens = np.array([len(p) for p in progs], np.int64)
    starts = np.concatenate(([0], np.cumsum(lens)[:-1]))
    cols = {k: np.concatenate([p.cols[k] for p in progs]) for k in COLUMNS}
    # op names numbered as the builder meets them: by first appearance over the rows
    nid, combined = {}, []
    for p in progs:
        combined += [nid.setdefault(nm, len(nid)) for nm in p.opnames]
    base = np.concatenate(([0], np.cumsum([len(p.opnames) for p in progs])[:-1]))
    row_name = np.asarray(combined, np.int64)[cols["op"] + np.repeat(base, lens)]
    uniq, first = np.unique(row_name, return_index=True)
    met = uniq[np.argsort(first)]
    rank = np.empty(len(nid), np.int64)
    rank[met] = np.arange(met.size)
    by_id = list(nid)
    names = [by_id[i] for i in met]
    cols["op"] = rank[row_name].astype(COLUMNS["op"])
    # DMA queues: the round-robin goes on from the DMAs of the ops before
    nq = chip.dma_queues_per_engine
    dma = cols["engine"] == _DMA
    per_op = np.add.reduceat(dma.astype(np.int64), starts)
    shift = np.repeat(np.concatenate(([0], np.cumsum(per_op)[:-1])) % nq, lens)[dma]
    q = (cols["stream"][dma].astype(np.int64) - N_COMPUTE_STREAMS + shift) % nq
    cols["stream"][dma] = N_COMPUTE_STREAMS + q
    cols["dma_engine0"][dma] = q % chip.dma_engines_per_core

    def csr(pairs):      # per-op CSR (ptr, idx) over local rows -> one over the whole program
        ptrs, idxs = zip(*pairs)
        counts = [len(i) for i in idxs]
        return joined_csr(ptrs), np.concatenate(idxs).astype(np.int64) + np.repeat(starts, counts)
    ptr, idx = csr([(p.dep_ptr, p.dep_idx) for p in progs])
    optr, oidx = csr([p.order_edges() for p in progs])
    return Program(chip, cols, ptr, idx, names, None, [], "fused", optr, oidx)


def _concatenated(fused, alone, chip, lnc, live):
    """_program's result from `_concatenated_program` when it applies, else None."""
    prog = _concatenated_program(fused, alone, chip, live)
    if prog is None:
        return None
    tot, eng, hbm, flops, n = _summed(prog, simulate(prog))
    cores = cores_of_work([b for a in alone for b in a.blocks], lnc)
    peak = max(a.extra.get("sbuf_peak_bytes_per_partition", 0) for a in alone)
    return tot, eng, hbm * cores, flops * cores, n, False, peak, {}


_SLICE_START, _SLICE_MAX = 8, 1 << 14


def is_elementwise(name: str) -> bool:
    """Whether the rule of op `name` does the same work per element wherever it sits (so a
    broadcast operand is read chunk by chunk, and a run of such ops can be fused as a loop)."""
    rule = rule_for(name)
    return rule is not None and rule.__name__ in _ELEMENTWISE_RULES


# _sliceable and _group_bytes run for every op of every fused group: plain loops, as generator
# expressions cost more than the work
def _sliceable(op: OpSpec) -> bool:
    if not is_elementwise(op.name) or op.op == "aten::addr":
        return False
    ins, outs = op._inputs, op.outputs
    if not ins and not outs:
        return False
    for t in (*ins, *outs):
        if not t.is_contiguous:
            return False
    return True


def _loop_bytes(chip: Chip) -> float:
    """A tensor (or foreach list) bigger than this cannot stay resident next to a few others: a
    run of element-wise ops over it is timed as a fused loop instead."""
    return chip.resident_sbuf_bytes_per_partition * chip.sbuf_partitions / 4


def _group_bytes(op: OpSpec) -> float:
    """Bytes of the op's biggest tensor, a tensor list (a foreach op streams it as one) and
    its outputs each counted as one; 0.0 with none."""
    best = None
    for a in (*op.args, tuple(op.outputs)):
        if isinstance(a, TensorSpec):
            n = a.nbytes
        elif tensor_list(a):
            n = 0
            for t in a:
                n += t.nbytes
        else:
            continue
        if best is None or n > best:
            best = n
    return 0.0 if best is None else best


def _slice_op(op: OpSpec, s: int) -> OpSpec:
    """op with every tensor cut to 1/s of its elements (flat, same identity)."""
    from dataclasses import replace
    return _map_tensors(op, lambda a, out: replace(a, shape=(max(1, -(-a.numel // s)),),
                                                   strides=None))


def _sliced(group, chip, lnc, live):
    """Big element-wise ops fused as a compiler fuses loops: each chunk of every tensor goes
    through the whole run while it is in SBUF. Timed on slices of 1/s and 1/2s of every tensor
    (small enough that nothing is truncated) and scaled to the full size: time, busy time and
    bytes are affine in 1/s once the chunk pipeline is in steady state.

    At LNC=2 each physical core runs the loop over its half of every tensor, so the slices are
    timed on one core (lnc=1) and scaled to 1/lnc of the run; bytes and FLOPs are the pair's.
    (Timing the slices at LNC=2 split each slice's few chunks over the pair: a slice of 1 and of
    2 chunks both put one chunk on this core, the two slices timed the same and the run scaled
    as if it were one slice, an eager optimizer group 2-8x short.)"""
    # small enough that a few sliced tensors fit the resident SBUF at once (as a chunk of each
    # does in the compiler's fused loop)
    biggest = max(_group_bytes(o) for o in group)
    s = _SLICE_START
    while s < _SLICE_MAX and biggest / s > _loop_bytes(chip):
        s *= 2
    while True:
        r1 = _program([_slice_op(o, s) for o in group], chip, 1, live)
        if not r1[5] or s >= _SLICE_MAX:
            break
        s *= 2
    r2 = _program([_slice_op(o, 2 * s) for o in group], chip, 1, live)
    share = 1.0 / max(1, int(lnc))      # of every tensor, on each physical core

    def full(x1, x2):          # T(1/s) = a + b/s: from s and 2s, the value at `share`
        return max(x1, x1 * (2 * s * share - 1) - x2 * (2 * s * share - 2))
    eng = {e: full(r1[1].get(e, 0.0), r2[1].get(e, 0.0)) for e in set(r1[1]) | set(r2[1])}
    # a slice still dominated by fixed latencies does not scale; no engine is busier than 100%
    total = max(full(r1[0], r2[0]), max(eng.values(), default=0.0))
    return (total, eng, full(r1[2], r2[2]) / share, full(r1[3], r2[3]) / share, r1[4])


def lower_sequence(ops, chip=None, lnc: int = 1, *, live_outputs=None,
                   standalone=None) -> Timing:
    """Lower `ops` (in order) into ONE program whose intermediates stay in SBUF when a later op
    reads them and they fit (chip.resident_sbuf_bytes_per_partition), and are released after
    their last reader.
    Tensor identity: `TensorSpec.id` when set, otherwise equal (shape, strides, dtype).
    `live_outputs` (ids): outputs to store to HBM; None stores every output (eager: the user
    may hold any of them).

    Ops too big for one representative program (their own lowering extrapolates): element-wise
    ones are fused with each other as loops (`_sliced`); the others are timed by their own
    program and added in series. `standalone` may pass already-known per-op Timings (the eager
    cache does) to avoid lowering them twice."""
    chip = get_chip(chip)
    t0 = time.perf_counter()
    ops = assign_ids(list(ops))
    alone = list(standalone) if standalone is not None else [lower_op(o, chip, lnc) for o in ops]
    big = [a.extrapolated for a in alone]
    # element-wise ops that are big, or whose tensors could not stay resident, run as fused loops
    resident_max = _loop_bytes(chip)
    loops = {i for i, (o, b) in enumerate(zip(ops, big))
             if _sliceable(o) and (b or _group_bytes(o) > resident_max)}
    in_fused = [i for i, b in enumerate(big) if not b and i not in loops]
    fused = [ops[i] for i in in_fused]
    looped = [ops[i] for i in sorted(loops)]
    serial = [i for i, b in enumerate(big) if b and i not in loops]
    live = None if live_outputs is None else {("id", x) for x in live_outputs}

    def live_for(part):
        """Outputs a part must store: the live ones and whatever another part reads."""
        if live is None:
            return None
        others = [o for o in ops if not any(o is p for p in part)]
        return live | {LowerCtx.key(t) for o in others for t in o.inputs}

    tot, eng, hbm, flops, n = 0.0, {e: 0.0 for e in ENGINES}, 0.0, 0.0, 0
    parts, peak, spilled = [], 0, {}
    if fused:
        fused_alone = [alone[i] for i in in_fused]
        *part, peak, spilled = (_concatenated(fused, fused_alone, chip, lnc, live_for(fused))
                                or _program(fused, chip, lnc, live_for(fused)))
        parts.append(part[:5])
    if looped:
        parts.append(_sliced(looped, chip, lnc, live_for(looped)))
    for i in serial:
        a = alone[i]
        parts.append((a.total_ns, a.engine_ns, a.hbm_bytes, a.flops, a.instructions))
        peak = max(peak, a.extra.get("sbuf_peak_bytes_per_partition", 0))
    part_of = ["loop" if i in loops else "fused" if not b else i for i, b in enumerate(big)]
    spill_bytes, spills = _spills(ops, part_of, alone, spilled)
    for p_tot, p_eng, p_hbm, p_flops, p_n in parts:
        tot += p_tot
        eng = {e: eng.get(e, 0.0) + p_eng.get(e, 0.0) for e in set(eng) | set(p_eng)}
        hbm += p_hbm
        flops += p_flops
        n += p_n
    return Timing(tot, eng, hbm, flops, n, extrapolated=any(big),
                  lower_s=time.perf_counter() - t0, ops=tuple(o.name for o in ops),
                  per_op_ns=tuple(a.total_ns for a in alone),
                  extra={"sbuf_peak_bytes_per_partition": peak, "spill_bytes": spill_bytes,
                         "spills": spills})


def _spills(ops, part_of, alone, spilled) -> tuple:
    """(bytes, count) of the intermediates written to HBM and read back (bytes counted twice):
    `spilled` by the fused program, and those passed between its parts (fused program, fused
    loops, big ops in series) by an op that emits instructions (not a view)."""
    key = LowerCtx.key
    producer = {}
    for i, o in enumerate(ops):
        for t in o.outputs:
            producer[key(t)] = i
    spilled = dict(spilled)
    for j, o in enumerate(ops):
        pj = part_of[j]
        for t in o._inputs:
            k = key(t)
            i = producer.get(k, j)
            if i < j and part_of[i] != pj and alone[i].instructions:
                spilled[k] = t
    return 2 * sum(t.nbytes for t in spilled.values()), len(spilled)
