"""LNC=2 as a pair: every op's work, device-to-device copies included, is shared by the two
physical cores of the logical core, each moving its half through its share of the pair's HBM
stack. So no op that reads and writes the same bytes is cheaper than copying them."""

import pytest

from neuron_sim.lower import OpSpec, TensorSpec, lower_op

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
