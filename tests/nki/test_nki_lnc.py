"""The two cores of an LNC=2 launch meeting: nisa.sendrecv exchanges tiles (values against
NumPy), and the core that reaches a sendrecv or core_barrier first idles until the other does
(timing.simulate.simulate_cores); what a pair cannot do is refused with the reason."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl


def _swap_halves(x, busy_rounds=0, barrier=False, cols=None, in_place=False):
    """Each core loads its half of x (rows), core 0 first runs `busy_rounds` VectorE passes over
    its tile, and the cores exchange the tiles (sendrecv of their first `cols` columns, or
    through shared HBM and a core_barrier; `in_place`: into the tile sent): out gets the halves
    swapped."""
    R, C = x.shape
    pid, half = nl.program_id(0), R // 2
    t = nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x[pid * half:(pid + 1) * half, :])
    if pid == 0:
        for _ in range(busy_rounds):
            nisa.tensor_scalar(dst=t, data=t, op0=nl.multiply, operand0=1.0)
    got = t if in_place else nl.ndarray((half, C), dtype=x.dtype, buffer=nl.sbuf)
    if barrier:
        shared = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=shared[pid * half:(pid + 1) * half, :], src=t)
        nisa.core_barrier(shared, (0, 1))
        nisa.dma_copy(dst=got, src=shared[(1 - pid) * half:(2 - pid) * half, :])
    else:
        n = cols or C
        nisa.sendrecv(src=t[:, :n], dst=got[:, :n], send_to_rank=1 - pid, recv_from_rank=1 - pid,
                      pipe_id=0)
    out = nl.ndarray((R, C), dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out[pid * half:(pid + 1) * half, :], src=got)
    return out


def _run(x, lnc=2, **kw):
    kernel = nki.jit(lambda x: _swap_halves(x, **kw))
    return nki.simulate(kernel, platform_target="trn2")[lnc](x), nki.last_report()


X = np.random.default_rng(0).standard_normal((256, 64)).astype(np.float32)


@pytest.mark.parametrize("in_place", [False, True])
def test_sendrecv_gives_each_core_the_other_cores_tile(in_place):
    out, rep = _run(X, in_place=in_place)
    np.testing.assert_array_equal(out, np.concatenate([X[128:], X[:128]]))
    assert all("sendrecv" in p.opnames for p in rep.programs)


@pytest.mark.parametrize("barrier", [False, True], ids=["sendrecv", "core_barrier"])
def test_the_core_that_arrives_first_waits_for_the_other(barrier):
    """Core 0 runs 40 VectorE passes before the meeting, core 1 none: core 1's row that waits
    (sendrecv's transfer, core_barrier's wait) starts only once core 0 has signalled, so core 1
    ends after core 0's work, not ~40 passes earlier."""
    out, rep = _run(X, busy_rounds=40, barrier=barrier)
    np.testing.assert_array_equal(out, np.concatenate([X[128:], X[:128]]))
    busy = [t for t in rep.instruction_times(core=0, op="tensor_scalar")]
    work_end = max(t.end_ns for t in busy)
    waits = [rep.instruction_times(core=c, op="sendrecv" if not barrier else "core_barrier")[-1]
             for c in (0, 1)]
    assert waits[1].start_ns > work_end          # core 1 idled until core 0 had finished
    assert abs(waits[1].start_ns - waits[0].start_ns) < 200     # both leave the meeting together
    _, alone = _run(X, busy_rounds=0, barrier=barrier)
    core1 = [rep.timing[c].total_ns for c in (0, 1)]
    assert core1[1] > alone.timing[1].total_ns + 0.8 * (work_end - busy[0].start_ns)


def test_sendrecv_of_mismatched_shapes_is_refused():
    with pytest.raises(nki.NkiValidationError, match=r"core 0 sends src \[128, 64\] float32 to "
                       r"core 1's dst \[128, 32\] float32; core 1 sends src \[128, 32\] "
                       r"float32 to core 0's dst \[128, 64\] float32: each dst must have"):
        kernel = nki.jit(lambda x: _swap_halves(x, cols=64 if nl.program_id(0) == 0 else 32))
        nki.simulate(kernel, platform_target="trn2")[2](X)


def test_cores_meeting_at_different_instructions_are_refused():
    @nki.jit
    def crossed(x):
        t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if nl.program_id(0) == 0:
            nisa.core_barrier(x, (0, 1))
        else:
            nisa.sendrecv(src=t, dst=t, send_to_rank=0, recv_from_rank=0, pipe_id=0)
        return x

    with pytest.raises(nki.NkiValidationError, match="meeting #1 of the programs is core_barrier "
                       "on core 0, sendrecv on core 1: each core_barrier and sendrecv needs"):
        nki.simulate(crossed, platform_target="trn2")[2](X[:128, :4].copy())


def test_sendrecv_needs_an_lnc2_launch():
    with pytest.raises(nki.NkiValidationError, match=r"exchanges tiles between the two cores of "
                       r"an LNC=2 launch.*launch the kernel as kernel\[2\]"):
        _run(X, lnc=1)


@pytest.mark.parametrize("op", ["core_barrier", "sendrecv"])
def test_a_meeting_the_other_core_never_reaches_is_an_error_not_a_hang(op):
    """Core 1 returns without the meeting core 0 waits at (on the hardware, a hang)."""
    @nki.jit
    def lonely(x):
        t = nl.ndarray((128, 4), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        if nl.program_id(0) == 0:
            if op == "core_barrier":
                nisa.core_barrier(x, (0, 1))
            else:
                nisa.sendrecv(src=t, dst=t, send_to_rank=1, recv_from_rank=1, pipe_id=0)
        return x

    with pytest.raises(nki.NkiValidationError, match=rf"meeting #1 \({op}\) of program 0 is never "
                       r"met: the other programs returned \(program 1 after 0 meetings\)"):
        nki.simulate(lonely, platform_target="trn2")[2](X[:128, :4].copy())


def test_the_gpsimd_dma_path_takes_at_most_1024_bytes_per_partition():
    @nki.jit
    def wide(x):
        pid = nl.program_id(0)
        t = nl.ndarray((128, x.shape[1]), dtype=x.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=t, src=x)
        nisa.sendrecv(src=t, dst=t, send_to_rank=1 - pid, recv_from_rank=1 - pid, pipe_id=0,
                      dma_engine=nisa.dma_engine.gpsimd_dma)
        return x

    nki.simulate(wide, platform_target="trn2")[2](X[:128, :].copy())    # 256 B: fine
    with pytest.raises(nki.NkiValidationError, match=r"expected at most 1024 B per partition with "
                       r"dma_engine=gpsimd_dma, found 2048 B"):
        nki.simulate(wide, platform_target="trn2")[2](np.zeros((128, 512), np.float32))
