"""A partition broadcast (`t.broadcast_to((128, F))` of a one-partition SBUF tile) costs an
instruction, as on the hardware: a TensorE matmul by a ones row into PSUM (drained to SBUF by
ScalarE per PSUM bank when the row is longer than a bank). Results are unchanged."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def scale_rows(F):
    @nki.jit
    def kernel(x, b):
        P = x.shape[0]
        xt = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=xt, src=x)
        bt = nl.ndarray((1, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=bt, src=b)
        y = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=y, data1=xt, data2=bt.broadcast_to((P, F)), op=nl.multiply)
        out = nl.ndarray((P, F), dtype=nl.float32, buffer=nl.shared_hbm)
        nisa.dma_copy(dst=out, src=y)
        return out
    return kernel


def run(F, target="trn1"):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, F)).astype(np.float32)
    b = rng.standard_normal((1, F)).astype(np.float32)
    sim = nki.simulate(scale_rows(F), platform_target=target)
    y = sim(x, b)
    np.testing.assert_array_equal(y, x * b)
    return sim.report


def test_short_row_is_broadcast_by_tensor_engine_into_psum():
    rep = run(512)
    mm = [t for t in rep.instruction_times() if t.op == "nc_matmul"]
    tt = [t for t in rep.instruction_times() if t.op == "tensor_tensor"]
    assert mm and all(t.stream == "TensorE" for t in mm)
    assert len(tt) == 1 and tt[0].start_ns >= max(t.end_ns for t in mm) - 1e-6
    # one SBUF and one PSUM input: a single pass over the 512 elements (1.12 GHz on Trn1)
    assert abs(tt[0].busy_ns - 512 / 1.12) < 1.0


def test_long_row_goes_through_psum_banks_to_sbuf():
    rep = run(2048)
    times = rep.instruction_times()
    assert sum(t.op == "nc_matmul" and "moving" in t.kind for t in times) == 4
    assert sum(t.op == "activation" for t in times) == 4        # ScalarE drains each bank
    tt = [t for t in times if t.op == "tensor_tensor"][0]
    assert abs(tt.busy_ns - 2 * 2048 / 1.12) < 1.0             # two SBUF inputs
