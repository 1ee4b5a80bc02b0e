"""Every single-core published measurement, as an ISA program or an NKI kernel, against the
targets of issue 13: rows that set a constant ("fit") within 10%; rows that only check
("predict") within 25% each and 10% median, at least 15 of them. (~60 s: builds ~460k
instructions through the builder and traces the Fused Mamba kernels.)

All three are asserted: the worst predict row was Mamba v2 at seq 8192 (+42%) until the loop-
invariant deltaU of its state loop was computed once per channel tile, as the toolchain of the
published Trn1 runs did (hardware/assumptions.json `reuse_loop_invariant`)."""

import functools

import pytest

from neuron_sim import calibrate

@pytest.fixture(scope="module")
def rows():
    return calibrate.run()


def test_every_single_core_target_is_present(rows):
    ids = {r.id for r in rows}
    assert ids == {"C1", "C2", "C3", "C4", "C8", "C9", "C10", "C11", "C12", "C13", "C15", "C16",
                   "C17", "C18", "C19"}


def test_fit_rows_name_the_constant_they_set(rows):
    fit = [r for r in rows if r.role == "fit"]
    assert len(fit) >= 10 and all(len(r.sets) > 10 for r in fit)
    # the Mamba rows were never used to set anything
    assert all(r.role == "predict" for r in rows if r.id in {"C9", "C10", "C11", "C12", "C13"})


def test_fit_rows_within_tolerance(rows):
    bad = [(r.id, r.metric, r.published, r.simulated, round(r.error, 4)) for r in rows
           if r.role == "fit" and r.asserted and r.error > calibrate.TOLERANCE_FIT]
    assert not bad


def test_enough_predict_rows(rows):
    assert calibrate.stats(rows, "predict")[2] >= calibrate.MIN_PREDICT_ROWS


def test_each_predict_row_within_tolerance(rows):
    bad = [(r.id, r.metric, r.published, r.simulated) for r in rows
           if r.role == "predict" and r.asserted and r.error > calibrate.TOLERANCE_PREDICT_EACH]
    assert not bad


def test_predict_median_within_tolerance(rows):
    med, _, n = calibrate.stats(rows, "predict")
    assert med <= calibrate.TOLERANCE_PREDICT_MEDIAN and n >= calibrate.MIN_PREDICT_ROWS


def test_unasserted_rows_say_why(rows):
    for r in rows:
        if not r.asserted:
            assert len(r.note) > 30


def test_table_groups_and_result_line(rows):
    lines = calibrate.format_table(rows).splitlines()
    assert lines[0].startswith("== fit rows") and any(l.startswith("== predict rows") for l in lines)
    last = lines[-1]
    for field in ("RESULT median_err=", " max_err=", " n=", " predict_median_err=",
                  " predict_max_err=", " n_predict="):
        assert field in last


def test_every_c8_row_is_asserted_and_traffic_counts_spills(rows):
    c8 = {r.metric: r for r in rows if r.id == "C8"}
    assert {"dma_active_ms", "dma_active_percent", "mbu_percent", "vector_active_percent",
            "tensor_active_percent", "hfu_percent"} <= set(c8)
    assert all(r.asserted for r in c8.values())
    assert "spill" in c8["mbu_percent"].note
    assert all(r.asserted for r in rows)


def _efficiency(ms_by_seq):
    """The tutorial's scaling efficiency: the seq-512 latency scaled linearly, over the latency."""
    base = ms_by_seq[512]
    return {seq: base * seq / 512 / ms for seq, ms in ms_by_seq.items() if seq != 512}


@pytest.mark.parametrize("version", ["v2", "v3"])
def test_mamba_sweep_follows_the_published_curve(rows, version):
    """C13 [Mamba]: v3 (seq tiled) scales at >= 92% up to seq 8192; v2 falls to ~72% from seq 1024
    (the partition broadcasts of B_i and C_i no longer fit a PSUM bank) and to ~50% at 7168-8192
    (spills). The simulated efficiency follows the published one point by point within 12 points."""
    sweep = [r for r in rows if r.id == "C13" and r.metric.startswith(f"{version}_ms@")]
    seqs = [int(r.metric.split("@seq")[1]) for r in sweep]
    pub = _efficiency(dict(zip(seqs, (r.published for r in sweep))))
    sim = _efficiency(dict(zip(seqs, (r.simulated for r in sweep))))
    assert len(sim) == 8
    off = {s: (round(pub[s], 3), round(sim[s], 3)) for s in sim if abs(sim[s] - pub[s]) > 0.12}
    assert not off, off
    if version == "v3":
        assert min(sim.values()) >= 0.90
    else:
        assert max(sim.values()) < 0.85
        assert sim[7168] < 0.6 and sim[8192] < 0.6 and min(sim, key=sim.get) >= 7168


@functools.cache
def _seq_8192_report(version):
    """Two channel tiles of the published 32 at seq 8192 (~1 s of simulated time each)."""
    from neuron_sim.calibrate import mamba
    from neuron_sim.nki.launch import last_report, simulate
    simulate(mamba.KERNELS[version], platform_target="trn1", numerics=False)(*mamba.inputs(256, 8192))
    return last_report()


@pytest.mark.parametrize("version,vector_percent,spills", [("v2", 58.93, True), ("v3", 94.85, False)])
def test_mamba_seq_8192_engine_picture(version, vector_percent, spills):
    """The published profiles at seq 8192 [Mamba]: v2 spills (qSyncSpillReload0 and
    qVectorSpillReload0 rows) and VectorE is active 58.93% of the time; v3, seq tiled, has no
    spill traffic and VectorE is 94.85% active, the busy engine. VectorE activity within 25% of
    the published figure."""
    rep = _seq_8192_report(version)
    act = rep.engine_active_percent
    assert abs(act["VectorE"] - vector_percent) / vector_percent <= 0.25, act
    assert (rep.spill_bytes > 0) == spills
    if not spills:
        assert max(act, key=act.get) == "VectorE"


def test_mamba_v2_seq_8192_vector_time():
    """[Mamba]: v2 at seq 8192 keeps VectorE active 58.93% of 53.33 ms = 31.4 ms over 32 channel
    tiles x 16 states, 8.4 VectorE cycles per element and state (v3: 94.85% of 27.8 ms = 26.4
    ms, 7.0 cycles; the cost table's 7N simulates 26.9 ms, +2%). With deltaU = delta * u in the
    state loop v2 would take 10N; computed once per channel tile (nki/reuse.py) 8.1N. The
    simulated VectorE busy time within 10%: it is the engine time the spill traffic has to hide
    behind."""
    busy_ms = _seq_8192_report("v2").engine_busy_ns["VectorE"] / 1e6 * 16
    assert abs(busy_ms - 0.5893 * 53.33) / (0.5893 * 53.33) <= 0.10, busy_ms
