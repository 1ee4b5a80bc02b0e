"""The memory plan gives a loop's tiles as many buffers as SBUF holds: a load -> store pipeline
runs at the DMA rate instead of being serialised by two buffers x the ~1 us DMA latency."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.nki import memory


@nki.jit
def copy_rows(x):
    n, F = x.shape
    P = nl.tile_size.pmax
    out = nl.ndarray((n, F), dtype=x.dtype, buffer=nl.shared_hbm)
    for i in nl.affine_range(n // P):
        t = nl.ndarray((P, F), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x[i * P:(i + 1) * P, :])
        nisa.dma_copy(dst=out[i * P:(i + 1) * P, :], src=t)
    return out


def run(x):
    sim = nki.simulate(copy_rows, platform_target="trn2")
    np.testing.assert_array_equal(sim(x), x)
    return sim.report


def test_pipeline_gets_more_than_two_buffers_and_is_not_latency_bound(monkeypatch):
    x = np.arange(64 * 128 * 64, dtype=np.float32).reshape(64 * 128, 64)   # 64 tiles of 32 KiB
    deep = run(x)
    monkeypatch.setattr(memory, "BUFFERS_PER_SITE", 2)
    two = run(x)
    # two buffers: every other load waits for a store, ~2 DMA latencies per tile
    assert two.total_ms > 1.5 * deep.total_ms
    per_tile_us = deep.total_ms * 1e3 / 64
    assert per_tile_us < 1.0          # below one DMA fixed latency per tile


def test_depth_is_bounded_by_memory():
    """Tiles of 96 KiB per partition: only two fit in SBUF, and nothing spills."""
    x = np.zeros((8 * 128, 24 * 1024), np.float32)
    rep = run(x)
    assert rep.spills == 0
