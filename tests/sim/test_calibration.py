"""Every single-core published measurement, as an ISA program or an NKI kernel, against the
targets of issue 13: rows that set a constant ("fit") within 10%; rows that only check
("predict") within 25% each and 10% median, at least 15 of them. (~60 s: builds ~460k
instructions through the builder and traces the Fused Mamba kernels.)

The predict median is met (7.9%); the each-row target is not yet (see `python -m
neuron_sim.calibrate`), so that test is a strict xfail that fails loudly the day the simulator
meets it and the mark must go. Fit rows within 10% and at least 15 predict rows are asserted."""

import functools

import pytest

from neuron_sim import calibrate

PREDICT_NOT_MET = (
    "issue 13: predict rows not yet each within 25%: Mamba v2 at seq 7168 (C13, +34%) and 8192 "
    "(C12, C13, +39/+42%). Per 128-channel tile and state (published 80.7 and 102 us; simulated "
    "108 and 144 us): the partition broadcasts of B_i and C_i longer than a PSUM bank are copied "
    "to SBUF tiles (nki/broadcast.py), so the working set at deltaBu is 7 [128, seq] FP32 tiles "
    "(accum, delta, u, deltaA, deltaU, B broadcast, deltaBu) against 176 KiB usable: 196 KiB at "
    "7168, 224 at 8192. At 8192 the instruction order forces 3 tile transfers per tile and state "
    "(accum stored and reloaded: at deltaU, delta and u are operands and accum's next use is the "
    "furthest; u fetched again at deltaBu), 12.6 MB = 119 us at the 106 GB/s Trn1 HBM share, "
    "so even perfect overlap gives >= 64.9 ms (+24.4%); the reloads cannot be hoisted (deltaU "
    "..scanC are all over capacity) and VectorE (73.6 us busy per tile and state) waits ~70 us "
    "per state on them (DMA 86% active). At 7168 one refetch of u (3.67 MB, 34.6 us) is issued "
    "after deltaBu and C_i's 28 KB load queues behind it in the FIFO HBM share (~21 us), then "
    "the C broadcast's 14 matmul+copy pairs (~11 us) run before scanC: VectorE idles ~34 us per "
    "state. The published VectorE activity at 8192 (58.93% of 53.33 ms = 31.4 ms, 8.4 cycles "
    "per element and state; test_mamba_v2_seq_8192_vector_time) is ~8N per state, not the 10N "
    "simulated (37.7 ms: both broadcast consumers read SBUF copies at 2N, step 6 is 2N): either "
    "the broadcast operands are read at the PSUM rate or step 6 runs off VectorE; v3's 94.85% "
    "of 27.8 ms (7.0N) matches the cost table (7N). Reading the broadcasts from PSUM bank "
    "by bank (no copies; 8N) gives 42.2 at 7168 and 64.9 at 8192 (measured in an earlier "
    "session) but v2 at 1024-5120 -11 to -13% and no efficiency drop from 512 to 1024 (98% "
    "against the published 73%, test_mamba_sweep_follows_the_published_curve), because v2 at "
    "seq 512 (C11, C13) is +20% (8N by the ISA cost table against 6.85N measured: 99.63% of "
    "1.61 ms). What blocks it: a cause for the published 512 -> 1024 drop that is consistent "
    "with 8.4N at 8192, and a DMA model in which transfers on different queues share the HBM "
    "instead of queueing whole while its bandwidth stays bounded (with the FIFO share, "
    "reloading earlier makes the states' small B_i/C_i loads wait longer). The variants tried "
    "(HBM sharing, step 6 on GpSimd, cost-aware spill victims, earlier reloads, partial-tile "
    "spills, clean inputs spilled first) and their numbers: calibrate/mamba.py")


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


@pytest.mark.xfail(strict=True, reason=PREDICT_NOT_MET)
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


@pytest.mark.xfail(strict=True, reason="VectorE per state is 10N cycles in v2 beyond one PSUM bank "
                   "of columns (the B_i/C_i broadcasts are read from SBUF copies) where the profile "
                   "gives 8.4N; see PREDICT_NOT_MET")
def test_mamba_v2_seq_8192_vector_time():
    """[Mamba]: v2 at seq 8192 keeps VectorE active 58.93% of 53.33 ms = 31.4 ms over 32 channel
    tiles x 16 states, 8.4 VectorE cycles per element and state (v3: 94.85% of 27.8 ms = 26.4
    ms, 7.0 cycles; the cost table's 7N simulates 26.9 ms, +2%). The simulated VectorE busy time
    within 10%: it is the engine time the spill traffic has to hide behind."""
    busy_ms = _seq_8192_report("v2").engine_busy_ns["VectorE"] / 1e6 * 16
    assert abs(busy_ms - 0.5893 * 53.33) / (0.5893 * 53.33) <= 0.10, busy_ms
