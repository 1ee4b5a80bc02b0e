"""Replayed op emissions (neuron_sim/lower/replay.py) give the programs the rules build: the ops
of a model's layers lowered alone and in overlapping fused windows (as the eager backend's AEE
groups are), with replay and with every rule run, simulate the same programs array for array
and give equal Timings."""

import hashlib

import numpy as np
import pytest

from neuron_sim.errors import CapacityError
from neuron_sim.hardware import get_chip
from neuron_sim.lower import OpSpec, TensorSpec, api, lower_op, lower_sequence, replay
from neuron_sim.lower.context import LowerCtx
from neuron_sim.lower.registry import rule_for
from neuron_sim.program.program import COLUMNS

TOKENS, C = 1024, 256


def T(shape, id, strides=None):
    return TensorSpec(shape, "float32", strides, id=id)


def _layers(n):
    """n transformer-MLP-like layers: layer norm, two linears around a GELU, a residual add;
    each layer's ops read the previous layer's output (so intermediates can stay resident)."""
    ops, x = [], T((TOKENS, C), ("x", 0))
    for i in range(n):
        y, h, g, o = (T((TOKENS, C), ("y", i)), T((TOKENS, 4 * C), ("h", i)),
                      T((TOKENS, 4 * C), ("g", i)), T((TOKENS, C), ("o", i)))
        nxt = T((TOKENS, C), ("x", i + 1))
        ops += [
            OpSpec("aten::native_layer_norm", (x, (C,), T((C,), ("w", i)), T((C,), ("b", i)),
                                               1e-5),
                   (y, T((TOKENS, 1), ("m", i)), T((TOKENS, 1), ("r", i)))),
            OpSpec("aten::addmm", (T((4 * C,), ("b1", i)), y,
                                   T((C, 4 * C), ("w1", i), strides=(1, C)), 1, 1), (h,)),
            OpSpec("aten::gelu", (h, "none"), (g,)),
            OpSpec("aten::addmm", (T((C,), ("b2", i)), g,
                                   T((4 * C, C), ("w2", i), strides=(1, 4 * C)), 1, 1), (o,)),
            OpSpec("aten::add.Tensor", (x, o, 1), (nxt,)),
        ]
        x = nxt
    return ops


def _lower_all(lnc, live):
    """Every op alone, then windows of 7 ops moved by 3 (each op in several contexts), then
    the whole run: the digest of every simulated program and the Timings."""
    programs = hashlib.sha256()
    simulate = api.simulate

    def digest(p, *a, **k):
        r = simulate(p, *a, **k)
        for c in COLUMNS:
            programs.update(p.cols[c].tobytes())
        for a in (p.dep_ptr, p.dep_idx, *p.order_edges(), r.start_ns, r.end_ns):
            programs.update(np.ascontiguousarray(a).tobytes())
        programs.update(repr(list(p.opnames)).encode())
        return r
    api.simulate = digest
    try:
        chip = get_chip("trn2")
        ops = _layers(3)
        alone = [lower_op(o, chip, lnc) for o in ops]
        times = [(a.total_ns, a.engine_ns, a.hbm_bytes, a.instructions) for a in alone]
        for s in range(0, len(ops) - 6, 3):
            t = lower_sequence(ops[s:s + 7], chip, lnc, standalone=alone[s:s + 7],
                               live_outputs=live)
            times.append((t.total_ns, t.engine_ns, t.hbm_bytes, t.instructions, t.extra))
        t = lower_sequence(ops, chip, lnc, live_outputs=live)
        times.append((t.total_ns, t.engine_ns, t.hbm_bytes, t.instructions, t.extra))
    finally:
        api.simulate = simulate
    return programs.hexdigest(), times


@pytest.mark.parametrize("lnc,live", [(1, None), (2, None), (1, {("x", 3)})])
def test_replayed_ops_build_the_programs_their_rules_build(lnc, live, monkeypatch):
    replayed = []
    run = replay._Recording.replay

    def counted(self, ctx, tensors):
        ok = run(self, ctx, tensors)
        replayed.append(ok)
        return ok
    monkeypatch.setattr(replay._Recording, "replay", counted)
    monkeypatch.setattr(replay, "_RECORDINGS", {})
    with_replay = _lower_all(lnc, live)
    assert sum(replayed) > 20      # most ops of the windows and of the whole run
    monkeypatch.setattr(replay, "REPLAY", False)
    assert _lower_all(lnc, live) == with_replay


def test_an_op_that_no_longer_fits_runs_its_rule_and_raises_its_error(monkeypatch):
    """A recording whose tiles do not fit next to what this context holds leaves the context
    as it was and runs the rule, which raises the rule's own capacity error."""
    monkeypatch.setattr(replay, "_RECORDINGS", {})
    chip = get_chip("trn2")
    op = api.assign_ids([_layers(1)[1]])[0]
    rule = rule_for(op.name)

    def lower(fill):
        ctx = LowerCtx(chip, 1, name="fused")
        if fill:
            ctx.b.sbuf("full", (chip.sbuf_partitions, chip.sbuf_usable_bytes_per_partition - 4096),
                       "uint8")
        replay.lower_into(ctx, rule, op)
        return ctx
    fresh = lower(False)
    assert len(replay._RECORDINGS) == 1 and len(fresh.b) > 0
    with pytest.raises(CapacityError) as replayed:
        lower(True)
    monkeypatch.setattr(replay, "REPLAY", False)
    with pytest.raises(CapacityError) as ruled:
        lower(True)
    assert str(replayed.value) == str(ruled.value)


def test_a_recording_serves_every_context_whose_headroom_answers_match(monkeypatch):
    """The resident bytes in use are not part of an op's context: its recording keeps what the
    op asked of them (can this output still become resident?) and serves a context with other
    bytes in use that gets the same answers; a context that gets another answer runs the rule.
    Either way the program and the residency left behind are the rule's."""
    monkeypatch.setattr(replay, "_RECORDINGS", {})
    chip = get_chip("trn2")
    gelu = api.assign_ids(_layers(1))[2]          # its output is read by the next linear
    out = LowerCtx.key(gelu.outputs[0])
    rule = rule_for(gelu.name)
    recorded = []
    record = replay._record

    def counted(*a):
        recorded.append(1)
        return record(*a)
    monkeypatch.setattr(replay, "_record", counted)

    def lower(held):
        ctx = LowerCtx(chip, 1, consumed_later=frozenset({out}), name="fused")
        ctx._resident_bytes = held                # other intermediates' bytes in use
        replay.lower_into(ctx, rule, gelu)
        summary = api._measure(ctx)
        cols = {c: ctx.result.program.cols[c].tobytes() for c in COLUMNS}
        return summary, cols, out in ctx._resident, ctx._resident_bytes

    budget = chip.resident_sbuf_bytes_per_partition
    runs = [lower(held) for held in (0, 4096, budget)]
    assert len(recorded) == 2                     # 4096 in use: the same answer, replayed
    assert runs[0][2] and runs[1][2] and not runs[2][2]
    monkeypatch.setattr(replay, "REPLAY", False)
    assert runs == [lower(held) for held in (0, 4096, budget)]
