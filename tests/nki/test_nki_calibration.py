"""Calibration through kernels: the matmul tutorial's stages reproduce the published times and
HFU; the single-engine measurements (C15-C19, examples/nki/calibrate_engines.py) their rows.

C1-C4 (Trn1, BF16) and C8 (Trn2, FP32) are measured on [4096, 8192] @ [8192, 8192]
(../shared/calibration/public.json). Tracing that shape takes 7-25 s per stage, so the tests run
a faithful fraction of it and scale the simulated time back up:

- C1, C2, C3 keep N and K and run M/8: every m (or m-block) iteration does the same loads and
  matmuls, and no data is reused across m iterations, so time is linear in the number of them.
- C4 and C8 keep M and K and run N/8, one N block of 1024: each N block re-loads all of lhsT
  and its own slice of rhs and writes its own output, identical work per block.

Pipeline fill/drain is paid once per run instead of once per kernel, so scaled times are a
little pessimistic. HFU is FLOPs over time, so it scales with the time and needs no factor.
Percentages (MBU, VectorE active) are ratios of per-block quantities and need
no scaling; the full shape gives the same values to 0.5%. The full-size run is
``python examples/nki/calibrate_matmul.py --full``; both are in the tolerance (15%).
"""

import numpy as np
import pytest

import nki
import nki.language as nl

from neuron_sim import calibrate
from nki_examples import load_example

mt = load_example("matmul_tutorial")

PUBLISHED_MS = {"C1": 51.80, "C2": 42.96, "C3": 22.07, "C4": 6.97}
PUBLISHED_HFU = {"C1": 10.98, "C2": 13.24, "C3": 26.51, "C4": 85.24}
C8_TENSOR_ACTIVE_MS = 28.16
C8_MBU_PERCENT = 8.96
C8_VECTOR_ACTIVE_PERCENT = 10.55
TOL = 0.15

K, M, N = 8192, 4096, 8192


def scaled_ms(kernel, target, dtype, m, n, factor):
    lhsT = np.zeros((K, m), dtype=dtype)
    rhs = np.zeros((K, n), dtype=dtype)
    nki.simulate(kernel, platform_target=target, numerics=False)(lhsT, rhs)
    rep = nki.last_report()
    return rep.total_ms * factor, rep


@pytest.mark.parametrize("cid,kernel,m,n", [
    ("C1", mt.matmul_tiled, M // 8, N),
    ("C2", mt.matmul_hoist_load, M // 8, N),
    ("C3", mt.matmul_block_free, M // 8, N),
    ("C4", mt.matmul_fully_optimized, M, N // 8),
])
def test_matmul_tutorial_stage_trn1(cid, kernel, m, n):
    ms, rep = scaled_ms(kernel, "trn1", nl.bfloat16, m, n, (M * N) / (m * n))
    pub = PUBLISHED_MS[cid]
    assert abs(ms - pub) / pub < TOL, f"{cid}: simulated {ms:.2f} ms vs published {pub} ms"
    hfu = PUBLISHED_HFU[cid]
    assert abs(rep.hfu_percent - hfu) / hfu < TOL, f"{cid}: HFU {rep.hfu_percent:.2f}% vs published {hfu}%"


def test_kernel_optimization_v5_trn2():
    ms, rep = scaled_ms(mt.matmul_kopt_v5, "trn2", nl.float32, M, N // 8, 8)
    tensor_ms = rep.engine_busy_ns["TensorE"] * 8 / 1e6
    assert abs(tensor_ms - C8_TENSOR_ACTIVE_MS) / C8_TENSOR_ACTIVE_MS < TOL, tensor_ms
    # TensorE is the bottleneck (published: 99.5% active); the total stays within tolerance of it
    assert abs(ms - C8_TENSOR_ACTIVE_MS / 0.995) / (C8_TENSOR_ACTIVE_MS / 0.995) < TOL, ms
    # HBM traffic (loads, stores, spills) and the partial-sum adds. DMA-active % is not asserted:
    # 17.5% against 21.54% published. The ISA-level program (neuron_sim/calibrate) gets 19.1%
    # with more spill traffic (491 MB against 380 MB here) and a shorter total (28.9 ms, 29.7 here)
    assert abs(rep.mbu_percent - C8_MBU_PERCENT) / C8_MBU_PERCENT < TOL, rep.mbu_percent
    vec = rep.engine_active_percent["VectorE"]
    assert abs(vec - C8_VECTOR_ACTIVE_PERCENT) / C8_VECTOR_ACTIVE_PERCENT < TOL, vec


# ---- C15-C19: one small kernel each (examples/nki/calibrate_engines.py), ~1 s together ----------
ce = load_example("calibrate_engines")


@pytest.fixture(scope="module")
def pub():
    return calibrate.published()


@pytest.mark.parametrize("cid", ["C16", "C17", "C18", "C19"])
def test_single_engine_rows_within_tolerance(cid, pub):
    rows = ce.CASES[cid](pub)
    assert rows and all(r.asserted for r in rows)
    bad = [(r.metric, r.published, round(r.simulated, 3)) for r in rows if r.error > TOL]
    assert not bad, f"{cid}: {bad}"


def test_c15_is_reported_but_not_asserted(pub):
    """C15 was measured on one DMA engine; nisa.dma_copy has no way to ask for that, and the core
    spreads a 4-partition load over 4 engines (357 ns each; 4 x 357 = 1429 engine-ns against the
    published 1416 ns on one). The row stays in the table with that explanation."""
    (row,) = ce.CASES["C15"](pub)
    assert not row.asserted and "engines" in row.note
    assert abs(4 * row.simulated - row.published) / row.published < TOL


def test_hwdge_dmas_use_one_queue_per_dge_unit(pub):
    """Hardware-DGE DMAs are issued by the core's 2 DGE units, ~600 ns per instruction each: 64 of
    them take ~32 x 600 ns to issue, not 4 x 600 ns as over all 16 queues."""
    ce.c18_rows(pub)
    rep = nki.last_report()
    dmas = rep.instruction_times(op="dma_copy")
    assert {t.stream for t in dmas} == {"DMA queue 0", "DMA queue 1"}
    assert max(t.start_ns for t in dmas) == pytest.approx(31 * 600, rel=0.01)


def test_engine_table_ends_with_result_line():
    last = calibrate.format_table(ce.rows()).splitlines()[-1]
    assert last.startswith("RESULT median_err=")
