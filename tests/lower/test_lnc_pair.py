"""LNC=2 as a pair: every op's work, device-to-device copies included, is shared by the two
physical cores of the logical core, each moving its half through its share of the pair's HBM
stack. So no op that reads and writes the same bytes is cheaper than copying them."""

import pytest

from neuron_sim.lower import OpSpec, TensorSpec, lower_op, lower_sequence

SIZES_MB = (0.25, 1, 8, 64)


def _ops(mb):
    rows = int(mb * (1 << 20)) // 4 // 1024
    x, z, y = (TensorSpec((rows, 1024), "float32") for _ in range(3))
    return {
        "clone": OpSpec("aten::clone", (x,), (y,)),
        "copy_d2d": OpSpec("neuron::copy_d2d", (x,), (y,)),
        "softmax": OpSpec("aten::_softmax", (x, -1, False), (y,)),
        "add": OpSpec("aten::add.Tensor", (x, z), (y,)),
        "mul": OpSpec("aten::mul.Tensor", (x, 2.0), (y,)),
        "relu": OpSpec("aten::relu", (x,), (y,)),
    }


@pytest.mark.parametrize("lnc", [1, 2])
@pytest.mark.parametrize("mb", SIZES_MB)
def test_no_op_is_cheaper_than_copying_its_bytes(mb, lnc):
    t = {name: lower_op(op, "trn2", lnc).total_ns for name, op in _ops(mb).items()}
    copy = t["clone"]
    assert t["copy_d2d"] == pytest.approx(copy)
    for name in ("softmax", "mul", "relu"):          # read N bytes, write N bytes: as a copy
        assert t[name] >= copy * (1 - 1e-9), (name, t)
    assert t["add"] >= copy, t                        # reads twice as much


@pytest.mark.parametrize("mb", (8, 64))
def test_a_big_copy_is_shared_by_the_pair(mb):
    """At LNC=2 a copy takes about half its LNC=1 time (each core its half at its share of the
    stack), and its bytes are the whole copy's (both cores together)."""
    op = _ops(mb)["clone"]
    one, two = lower_op(op, "trn2", 1), lower_op(op, "trn2", 2)
    assert two.total_ns == pytest.approx(one.total_ns / 2, rel=0.08)
    assert two.hbm_bytes == pytest.approx(one.hbm_bytes)
    assert two.hbm_bytes == pytest.approx(2 * mb * (1 << 20))      # read once, written once


def test_a_small_copy_stays_on_one_core():
    """Below 64 KiB per core a second DMA's fixed latency would cost more than it saves."""
    rows = 16
    x, y = TensorSpec((rows, 1024), "float32"), TensorSpec((rows, 1024), "float32")
    t = lower_op(OpSpec("aten::clone", (x,), (y,)), "trn2", 2)
    assert t.hbm_bytes == pytest.approx(2 * rows * 1024 * 4)
    assert t.instructions == 1


@pytest.mark.parametrize("n", [1, 2, 4])
def test_a_fused_loop_is_shared_by_the_pair(n):
    """n independent lerps over 4 MiB tensors (too big to stay resident: fused as a loop). At
    LNC=2 each core runs the loop over its half of every tensor: half the LNC=1 VectorE busy
    time, half the LNC=1 time plus the pipeline's fill (~5 us), the bytes the same. (The loop's slices were once timed at LNC=2, where a slice of
    1 and of 2 chunks both put one chunk on a core: 4 such lerps took 13.7 us, one lerp alone
    30.4 us.)"""
    x = [TensorSpec((2048, 512), "float32", id=(k, i)) for i in range(n) for k in "abo"]
    ops = [OpSpec("aten::lerp_.Scalar", (x[3 * i], x[3 * i + 1], 0.1), (x[3 * i + 2],))
           for i in range(n)]
    one, two = lower_sequence(ops, "trn2", 1), lower_sequence(ops, "trn2", 2)
    assert 0.5 * one.total_ns <= two.total_ns <= 0.6 * one.total_ns
    assert two.engine_ns["VectorE"] == pytest.approx(one.engine_ns["VectorE"] / 2, rel=0.05)
    assert two.total_ns >= two.engine_ns["VectorE"]
    assert two.hbm_bytes == pytest.approx(one.hbm_bytes)
    assert two.hbm_bytes == pytest.approx(n * 3 * 4 * (1 << 20), rel=0.01)   # 2 reads, 1 write
