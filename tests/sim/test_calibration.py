"""Every single-core published measurement, as an ISA program or an NKI kernel, against the
targets of issue 13: rows that set a constant ("fit") within 10%; rows that only check
("predict") within 25% each and 10% median, at least 15 of them. (~60 s: builds ~460k
instructions through the builder and traces the Fused Mamba kernels.)

The predict median is met (7.9%); the each-row target is not yet (see `python -m
neuron_sim.calibrate`), so that test is a strict xfail that fails loudly the day the simulator
meets it and the mark must go. Fit rows within 10% and at least 15 predict rows are asserted."""

import pytest

from neuron_sim import calibrate

PREDICT_NOT_MET = ("issue 13: predict rows not yet each within 25%: Mamba v2 at seq 7168 and 8192 "
                   "(C12, C13) +34% and +39-42%: HBM-bound on whole-tile spills (per channel "
                   "tile and state the accumulator is stored and reloaded and u refetched, 12 MB "
                   "at the 106 GB/s Trn1 DMA ceiling, and the small B_i/C_i loads queue behind "
                   "those refetches in the one FIFO HBM share); the hardware spills less or "
                   "overlaps more (VectorE 58.9% active at 8192 against 51% here). v2 at seq 512 "
                   "(C11, C13) +20% (VectorE per state 8N cycles against ~6.9N measured)")


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
