"""Advice whose saving is checked: the profiled steps re-timed with the change applied.

The profiling hook keeps every drained batch of the session (`hook.SESSION.batches`: the queue's
own op descriptions and the ns each was charged). A recommendation here rewrites those batches
as the changed program would issue them and prices both with the cost model that timed the run
(`LoweredCostModel.price`: same AEE groups, same lowered programs, nothing recorded). The saving
it states is that difference, per step, not a rule of thumb.

Fused optimizer: torch.optim's Adam/AdamW without `fused=True` issue about eight element-wise ops
per parameter on the device (on 'neuron', `foreach=True` falls back to the same per-tensor ops).
`fused=True` issues what torch/optim/adam.py's `_fused_adam` does: `_foreach_add_(state_steps,
1)` (one add_ per step tensor, kept on the device) and one `_fused_adam(w)_` over all tensors.
The trace's `Optimizer.step#...` annotations say which device rows are the optimizer
(`neuron_sim.explorer.phases`); the tensors come from the optimizer's own ops: the k-th
`lerp_` (exp_avg, grad), `addcmul_` (exp_avg_sq) and `addcdiv_` (param) are parameter k's."""

from __future__ import annotations

import itertools

import torch

from neuron_sim.explorer.summary import COMPILED_GRAPH_PREFIX

FUSED = {"Adam": "aten::_fused_adam_", "AdamW": "aten::_fused_adamw_"}
MIN_SAVING_SHARE = 0.05      # recommend when the re-timed steps are >= 5% shorter
QUEUE_OPS = 4096             # the queue drains by itself when this full (NeuronQueue.cpp)
MAX_PRICED_BATCHES = 4       # drained batches re-timed (the latest; each costs a pricing pass)
_fake_storage = itertools.count(1 << 62)   # step tensors the fused optimizer would allocate


def _match_rows(rows, batches) -> list:
    """[(batch index, op index) or None] for each (name, ns) row: the latest unmatched drained
    op of that name and time, walking both backwards (the trace's steps are the session's last)."""
    where = {}
    for b, (batch, out) in enumerate(batches):
        for i, item in enumerate(batch):
            if out[i] > 0:
                where.setdefault((item.name, int(out[i])), []).append((b, i))
    picked = []
    for key in reversed(rows):
        cands = where.get(key)
        picked.append(cands.pop() if cands else None)
    return picked[::-1]


def _runs(marks):
    """Optimizer steps of one batch: [first, last] op index of each run of optimizer rows not
    interrupted by another phase's row (ops in between that matched no row go with the run).
    `marks`: [(op index, is optimizer)]."""
    runs = []
    for is_opt, run in itertools.groupby(sorted(marks), key=lambda mark: mark[1]):
        if is_opt:
            ops = [i for i, _ in run]
            runs.append([ops[0], ops[-1]])
    return runs


def _fused_items(batch, run, fused_name):
    """The ops `fused=True` would issue for the optimizer ops `run` of `batch`, or None when
    they are not the per-tensor Adam recipe."""
    from ..cost import queued_op, tensor_desc
    def first_args(name):
        return [batch[i].args for i in range(run[0], run[1] + 1)
                if batch[i].name.split(".")[0] == name]
    lerp, addcmul, addcdiv = (first_args(n) for n in ("aten::lerp_", "aten::addcmul_",
                                                      "aten::addcdiv_"))
    n = len(addcdiv)
    if n == 0 or len(lerp) != n or len(addcmul) != n:
        return None     # not Adam's per-tensor recipe
    device, stream = batch[run[0]].device, batch[run[0]].stream
    steps = [tensor_desc((), (), torch.float32, next(_fake_storage)) for _ in range(n)]
    one = tensor_desc((), (), torch.int64, next(_fake_storage), on_neuron=False)   # CPU scalar 1
    items = [queued_op("aten::add_.Tensor", device, stream, (s, one, 1), (s,)) for s in steps]
    # torch groups the tensors by device and dtype: one fused call per group
    groups = {}
    for k, a in enumerate(addcdiv):
        groups.setdefault(a[0].dtype, []).append(k)
    for ks in groups.values():
        lists = ([addcdiv[k][0] for k in ks], [lerp[k][1] for k in ks],       # params, grads
                 [lerp[k][0] for k in ks], [addcmul[k][0] for k in ks],       # exp_avg(_sq)s
                 [], [steps[k] for k in ks])
        items.append(queued_op(fused_name, device, stream,
                               lists + (1e-3, 0.9, 0.999, 0.01, 1e-8, False, False, None, None),
                               ()))
    return items


def _matched(phased):
    """(the session's latest drained batches, [(batch index, op index) or None] per row)."""
    from .hook import SESSION
    rows = [(e["name"], int(round(float(e["dur"]) * 1e3))) for e, _p in phased]
    batches = list(SESSION.batches)
    return batches, _match_rows(rows, batches)


def _step_ends(phased) -> list:
    """Indices of the rows that end an optimizer step (the trace's steps; the session keeps only
    its latest batches to re-time)."""
    return [k for k, (_e, p) in enumerate(phased)
            if p == "optimizer" and (k + 1 == len(phased) or phased[k + 1][1] != "optimizer")]


def _retimed(title, detail, metric, saving_ns, **more) -> dict:
    """A recommendation whose saving is re-timed (`more`: "per", "recommended")."""
    return {"title": title, "detail": detail, "metric": metric,
            "threshold": f"re-timed saving >= {100 * MIN_SAVING_SHARE:.0f}%",
            "saving_ns": saving_ns, "checked": "re-timed", **more}


def _steps_retimed(title, charged, new_ns, steps, per, change, advice, metric) -> dict:
    """The latest `steps` steps (`charged` ns) re-timed as `new_ns` with `change`: recommended
    when that saves >= MIN_SAVING_SHARE of a step (a loss is stated as one)."""
    saving = (charged - new_ns) / steps
    step_ns = charged / steps
    verb = "shorter" if saving >= 0 else "longer"
    return _retimed(title, f"Re-timed with {change}, each {per} is {abs(saving) / 1e6:.3f} ms "
                    f"{verb} ({100 * abs(saving) / step_ns:.0f}% of the {per}). {advice}",
                    metric, saving, per=per, recommended=saving >= MIN_SAVING_SHARE * step_ns)


def _model():
    from .. import _state
    torch.neuron.synchronize()
    return _state["cost_model"]


def fused_optimizer(phased, total_ns: float):
    """The fused-optimizer recommendation for the profiled steps (in the process that profiled),
    with its re-timed saving; None when it does not apply or saves too little. `phased`:
    neuron_sim.explorer.phases.row_phases(trace) of the profile's trace."""
    phased, classes = phased
    opt_rows = [(e, p) for e, p in phased if p == "optimizer"]
    if not opt_rows:
        return None
    fused_name = FUSED.get(classes[0]) if len(classes) == 1 else None
    if fused_name is None or any("_fused_" in e["name"] for e, _p in opt_rows):
        return None
    batches, matched = _matched(phased)
    per_batch = {}
    for (_e, phase), m in zip(phased, matched):
        if m is not None:
            per_batch.setdefault(m[0], []).append((m[1], phase == "optimizer"))
    runs = {b: r for b, r in ((b, _runs(marks)) for b, marks in per_batch.items()) if r}
    steps = len(_step_ends(phased))
    if not runs:
        return None
    model = _model()
    saved = priced = 0
    for b in sorted(runs)[-MAX_PRICED_BATCHES:]:     # steady-state steps price alike
        batch, charged = batches[b]
        new, last = [], 0
        for run in runs[b]:
            items = _fused_items(batch, run, fused_name)
            if items is None:       # e.g. a step split by a queue-full drain: left as it ran
                continue
            new.extend(batch[last:run[0]])
            new.extend(items)
            last = run[1] + 1
            priced += 1
        if last:
            new.extend(batch[last:])
            saved += sum(charged) - sum(model.price(new))
    if not priced:
        return None
    opt_ns = sum(float(e["dur"]) * 1e3 for e, _p in opt_rows)
    saving = saved / priced
    if saving * steps < MIN_SAVING_SHARE * total_ns:
        return None
    cls = classes[0]
    return _retimed(f"Use the fused {cls} (fused=True)",
                    (f"torch.optim.{cls} runs about eight element-wise ops per parameter on the "
                     f"device: {opt_ns / steps / 1e6:.3f} ms of each step. Re-timed with "
                     f"torch.optim.{cls}(..., fused=True) (one _fused_{cls.lower()}_ kernel over "
                     f"all parameters), each step is {saving / 1e6:.3f} ms shorter "
                     f"({100 * saving * steps / total_ns:.0f}% of device time)."),
                    f"optimizer {100 * opt_ns / total_ns:.0f}% of device time", saving)


def sync_points(phased, total_ns: float):
    """The recommendation to synchronise once per step, with its re-timed saving: the step's
    drained batches priced as one (AEE groups run on across the removed sync points, as they do
    when nothing waits for the device). Steps end where an optimizer step ends; a batch that
    ended because the queue was full (QUEUE_OPS) keeps its boundary. None when each step drains
    once or the saving is under MIN_SAVING_SHARE."""
    phased, _classes = phased
    ends = _step_ends(phased)
    if not ends:
        return None
    batches, matched = _matched(phased)
    step_end_batches = {matched[k][0] for k in ends if matched[k] is not None}
    seen = sorted({m[0] for m in matched if m is not None})
    # each merged run of batches: consecutive drains up to one that ends a step
    merged, run = [], []
    for b in seen:
        if run and b != run[-1] + 1:
            run = []                       # a batch with no profiled row: not re-timed
        run.append(b)
        if b in step_end_batches or len(batches[b][0]) >= QUEUE_OPS:
            if len(run) > 1:
                merged.append(run)
            run = []
    if not merged:
        return None
    steps_seen = sum(1 for k in ends if matched[k] is not None)
    drains = sum(1 for b in seen if len(batches[b][0]) < QUEUE_OPS)
    model = _model()
    saved = 0
    priced = merged[-MAX_PRICED_BATCHES:]            # steady-state steps price alike
    for run in priced:
        charged = sum(sum(batches[b][1]) for b in run)
        saved += charged - sum(model.price([item for b in run for item in batches[b][0]]))
    saving = saved / len(priced)
    step_ns = total_ns / len(ends)
    if saving < MIN_SAVING_SHARE * step_ns:
        return None
    per_step = drains / max(steps_seen, 1)
    return _retimed("Synchronise once per step",
                    (f"The device queue drained {per_step:.1f} times per step: each sync point "
                     "(.item(), printing or branching on a device tensor, "
                     "torch.neuron.synchronize(), an op run on the CPU) ends the group of ops "
                     "Adaptive Eager Execution fuses and launches together. Re-timed with one "
                     f"drain per step, each step is {saving / 1e6:.3f} ms shorter "
                     f"({100 * saving / step_ns:.0f}% of a step)."),
                    f"{per_step:.1f} drains per step", saving)


RETIMED_STEPS = 2      # latest optimizer steps the bf16 advice re-times (cold programs: seconds)


def _latest_steps(phased_rows) -> tuple:
    """(the session's latest drained batches, the indices of those of the latest RETIMED_STEPS
    steps that are all still kept, how many steps they are, what a step is: "step", or
    "profiled region" without an optimizer, the phase of every op of each batch)."""
    batches, matched = _matched(phased_rows)
    phases = _item_phases(batches, matched, phased_rows)
    seen = sorted({m[0] for m in matched if m is not None})
    ends = [matched[k][0] for k in _step_ends(phased_rows) if matched[k] is not None]
    if not ends:        # no kept batch (no step), or no optimizer (the region is one step)
        return batches, seen, int(bool(seen)), "profiled region", phases
    first = ends[-RETIMED_STEPS - 1] + 1 if len(ends) > RETIMED_STEPS else seen[0]
    span = list(range(first, ends[-1] + 1))
    return batches, span, min(len(ends), RETIMED_STEPS), "step", phases


def _item_phases(batches, matched, phased) -> list:
    """The phase of every op of each batch: its row's, or (an op with no row: a view, a copy
    timed at 0) the phase of the op before it."""
    at = {m: p for (_e, p), m in zip(phased, matched) if m is not None}
    out = []
    for b, (batch, _ns) in enumerate(batches):
        last, ps = "forward", []
        for i in range(len(batch)):
            last = at.get((b, i), last)
            ps.append(last)
        out.append(ps)
    return out


def bf16_autocast(phased, total_ns: float):
    """The bf16 recommendation, re-timed: the latest profiled steps rewritten as
    torch.autocast('neuron', dtype=torch.bfloat16) would issue them (profiling/autocast.py:
    matmuls in bf16, the casts autocast and autograd add) and priced by the cost model. A
    recommendation when that saves >= MIN_SAVING_SHARE of a step; otherwise the same figures with
    "recommended": False (the summary lists them as a note). None when no float32 matmul ran."""
    from .autocast import CAST, FP32, LOWER, TensorDesc, autocast_batches
    phased_rows, _classes = phased
    batches, span, steps, per, phases = _latest_steps(phased_rows)
    if not span:
        return None
    chosen = [batches[b] for b in span]
    if not any(it.name.split(".")[0] in LOWER and any(
            type(a) is TensorDesc and a.dtype == FP32 for a in it.args)
            for batch, _ns in chosen for it in batch):
        return None
    new, casts = autocast_batches([b for b, _ns in chosen], [phases[b] for b in span])
    model = _model()
    charged = sum(sum(ns) for _b, ns in chosen)
    priced = [model.price(b) for b in new]
    cast_ns = sum(ns for b, p in zip(new, priced) for it, ns in zip(b, p) if it.seq == -1
                  and it.name == CAST)
    return _steps_retimed("Train in bf16: torch.autocast('neuron', dtype=torch.bfloat16)",
                          charged, sum(sum(p) for p in priced), steps, per,
                          f"the step's matmuls in bf16 (autocast's op lists) and the "
                          f"{casts / steps:.0f} casts autocast and autograd add "
                          f"({cast_ns / steps / 1e6:.3f} ms)",
                          "Parameters, gradients and the optimizer stay float32.",
                          f"{casts / steps:.0f} casts per {per}")


COMPILE = "Compile the forward and loss: torch.compile(backend='neuron')"


def compiled_step(phased, total_ns: float):
    """The torch.compile recommendation, re-timed: the latest profiled steps with the forward
    (and loss) and the backward each one compiled graph, priced as the compile backend prices a
    graph (profiling/compiled.py); the optimizer and what runs between the graphs stay eager.
    A recommendation when that saves >= MIN_SAVING_SHARE of a step, otherwise the same figures
    with "recommended": False. None when the region has no forward or backward op to compile
    or already runs compiled graphs."""
    from .compiled import compiled_batch
    phased_rows, _classes = phased
    if any(e["name"].startswith(COMPILED_GRAPH_PREFIX) for e, _p in phased_rows):
        return None
    batches, span, steps, per, phases = _latest_steps(phased_rows)
    if not span:
        return None
    flat, charged = [], 0
    for b in span:
        batch, ns = batches[b]
        sync_end = len(batch) < QUEUE_OPS            # a queue-full drain is no sync point
        flat.extend((item, phases[b][i], sync_end and i == len(batch) - 1)
                    for i, item in enumerate(batch))
        charged += sum(ns)
    model = _model()
    new, graphs = compiled_batch(flat, model)
    if not graphs:
        return None
    return _steps_retimed(COMPILE, charged, sum(model.price(new)), steps, per,
                          f"the forward (and the loss) and the backward as {graphs / steps:.0f} "
                          f"compiled graphs per {per}, one program and one launch each (the "
                          "optimizer as profiled)",
                          "Compile the function that returns the loss (a model that computes "
                          "its own loss: the model).", f"{graphs / steps:.0f} graphs per {per}")


# Every re-timed recommendation by its function's name, in the order the summary tries them
# (tests/profiler/test_advice.py applies each one and checks its saving)
RETIMED = ("fused_optimizer", "sync_points", "bf16_autocast", "compiled_step")
