"""The profiled steps as `torch.compile(backend="neuron")` of the forward and loss would run them:
the compile advice's re-timed program (advice.compiled_step).

The compiled step has one graph for the forward (with the loss) and one for the backward (AOT
Autograd), each ONE program and one launch, priced as the compile backend prices a graph
(`neuron_dynamo_backend.graph_cost.lower_graph`: the ops lowered as one sequence, only the graph's
outputs stored to HBM). What stays eager keeps its eager pricing (AEE groups), and a graph launch
ends the AEE group before it, as a compiled graph's launch does. This module rewrites the drained
ops of the forward and backward phases into those graphs:

- a graph is a run of one phase's ops; it ends at a phase change, a sync point (a drain that did
  not end because the queue was full), a host copy or work of known duration (a graph already
  compiled, a collective, a kernel);
- the forward graph leaves out its trailing `fill_`/`zero_`: the gradient seed `loss.backward()`
  makes (ones_like) is issued outside any compiled forward;
- tensor identity as in the graph: an op's input is the latest output of the graph at the same
  place (storage, offset, layout); an input the graph did not write is one graph input per place;
  a read of a graph output's memory through another layout is a view, which a graph reads from
  HBM (graph_cost gives every view its own identity), so that output is stored;
- outputs stored (live): those read after the graph (by the following ops, before the memory is
  written again), those read through a view, and the last op's;
- functionalization: a copy followed by an in-place op on the copy (`masked_fill` is `clone` +
  `masked_fill_` on the eager queue) is the out-of-place op, as AOT's graph has it.

Measured against the compiled step: README.md ("torch.compile")."""

from __future__ import annotations

from neuron_sim.explorer.summary import COMPILED_GRAPH_PREFIX

from ..cost import HOST_COPIES, Writes, described, extent, op_spec, place_of, queued_op
from .autocast import CAST, OVERWRITING

GRAPHED = ("forward", "backward")
# in-place ops that write every element: their operand's value is not read (a fresh tensor)
VALUELESS = ("aten::fill_", "aten::zero_")


def _graphable(item) -> bool:
    return item.preset_ns < 0 and item.name not in HOST_COPIES


def graph_spans(flat) -> list:
    """[(lo, hi)] of `flat` ([(item, phase, ends a sync drain)] in issue order) that would be
    compiled graphs."""
    spans, lo = [], None
    for k, (item, phase, _sync) in enumerate(flat):
        if lo is not None and (phase != flat[lo][1] or flat[k - 1][2] or not _graphable(item)):
            spans.append((lo, k))
            lo = None
        if lo is None and phase in GRAPHED and _graphable(item):
            lo = k
    if lo is not None:
        spans.append((lo, len(flat)))
    out = []
    for lo, hi in spans:
        if flat[lo][1] == "forward":          # the gradient seed is not part of the forward
            while hi - lo > 1 and flat[hi - 1][0].name.split(".")[0] in VALUELESS:
                hi -= 1
        out.append((lo, hi))
    return out


class _Later:
    """For each storage, the accesses [(position, (first, end) elements, is a write)] of the
    ops in issue order: what happens to a graph's output after the graph. An op that
    overwrites its operand (fill_: the gradient seed, zero_grad's zero_) does not read it,
    however it is described: the allocator may have handed it a freed output's storage."""

    def __init__(self, items):
        self.at = {}
        for k, item in enumerate(items):
            overwrites = item.name.split(".")[0] in OVERWRITING
            for t, is_out in described(item):
                if t.on_neuron and t.storage and (is_out or not overwrites):
                    self.at.setdefault(t.storage, []).append((k, extent(t), is_out))

    def read_after(self, t, hi: int) -> bool:
        """Is the memory `t` was written to read at or after position `hi` before it is
        written again?"""
        lo_e, hi_e = extent(t)
        for k, (a, b), is_out in self.at.get(t.storage, ()):
            if k >= hi and a < hi_e and lo_e < b:
                return not is_out
        return False


def graph_ops(items, lo: int, hi: int, later: _Later) -> tuple:
    """(OpSpecs of items[lo:hi] as one graph with the graph's tensor identities, live output
    ids)."""
    latest, written, outside = {}, Writes(), {}
    live, specs, out_tensor = set(), [], {}

    for i in range(lo, hi):
        ids = []
        for k, (t, is_out) in enumerate(described(items[i]), 1):
            place, own = place_of(t), (i - lo, k)      # positions: equal steps, equal keys
            if is_out:
                if place is not None:
                    for p2 in written.overwrite(t, place):   # ends the places it overlaps
                        latest.pop(p2, None)
                        outside.pop(p2, None)
                    latest[place] = own
                    out_tensor[own] = t
                ids.append(own)
            elif place is None:
                ids.append(own)
            elif place in latest:
                ids.append(latest[place])
            else:   # the graph output whose memory t reads in another layout
                base = next((latest[p2] for p2 in written.overlapping(t) if p2 in latest), None)
                if base is not None:
                    live.add(base)
                    ids.append(own)
                else:
                    ids.append(outside.setdefault(place, own))
        specs.append(op_spec(items[i], ids=iter(ids)))
    for own in latest.values():
        if later.read_after(out_tensor[own], hi):
            live.add(own)
    live.update(t.id for t in specs[-1].outputs)
    return _functionalized(specs), live


def _functionalized(specs) -> list:
    """A copy whose only reader is an in-place op on the copy becomes that op out of place. The
    other copies keep the queue's name (`neuron::copy_d2d`, lowered by its own rule): renamed
    `aten::clone` (a graph's name) the demo GPT's forward graph priced 7% over the compiled one
    (535 vs 499 us: the element-wise copy rule streams the strided head copies through SBUF), as
    the queue's copy 0.7% over."""
    from neuron_sim.lower import OpSpec
    readers = {}
    for j, o in enumerate(specs):
        for t in o.inputs:
            readers.setdefault(t.id, []).append(j)
    drop, swap = set(), {}
    for i, o in enumerate(specs):
        if o.name != CAST or not o.outputs or not o.inputs:
            continue
        src, out = o.inputs[0], o.outputs[0]
        r = readers.get(out.id, [])
        if src.dtype != out.dtype or src.shape != out.shape or len(r) != 1:
            continue
        nxt = specs[r[0]]
        name = nxt.name.split("::", 1)[-1].split(".")[0]
        first = nxt.args[0] if nxt.args else None
        if name.endswith("_") and not name.startswith("_") and getattr(first, "id", None) == out.id:
            drop.add(i)
            swap[r[0]] = OpSpec(nxt.name, (src,) + tuple(nxt.args[1:]), nxt.outputs, nxt.kwargs)
    return [swap.get(j, o) for j, o in enumerate(specs) if j not in drop]


def graph_ns(specs, live, model) -> float:
    """Simulated ns of one launch of the graph, as the compile backend charges it."""
    from ..neuron_dynamo_backend.graph_cost import lower_graph
    program, serial, _custom = lower_graph(specs, live, model.chip.name, model.lnc, model.cache)
    return (model.launch_ns + (program.total_ns if program is not None else 0.0)
            + sum(t.total_ns for _n, t in serial))


def compiled_batch(flat, model) -> tuple:
    """(the ops of `flat` with each would-be graph replaced by one launch of known duration,
    graphs made). `flat`: [(item, phase, ends a sync drain)]."""
    items = [f[0] for f in flat]
    later = _Later(items)
    new, last, graphs = [], 0, 0
    for lo, hi in graph_spans(flat):
        specs, live = graph_ops(items, lo, hi, later)
        ns = graph_ns(specs, live, model)
        new.extend(items[last:lo])
        first = items[lo]
        new.append(queued_op(f"{COMPILED_GRAPH_PREFIX}advice_{flat[lo][1]}", first.device,
                             first.stream, (), (), int(round(ns))))
        last = hi
        graphs += 1
    new.extend(items[last:])
    return new, graphs
