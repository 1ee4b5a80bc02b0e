"""neuron_sim.collectives, torch-free: the C32 calibration (shape), the fabric geometry, the
algorithms' basic laws, and the scale-on-paper estimator."""

import subprocess
import sys

import pytest

from neuron_sim.collectives import (CollectiveCall, ddp_pattern, estimate, estimate_step,
                                    fabric_for, fsdp2_pattern)
from neuron_sim.collectives.calibration import fit_c32
from neuron_sim.collectives.scale import group_cores


def test_imports_without_torch():
    code = ("import sys; sys.modules['torch'] = None; import neuron_sim.collectives as c; "
            "print(c.estimate('all_reduce', 1024, [0, 1], c.fabric_for('trn2.48xlarge')).ns)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) > 0


def test_c32_shape_reproduced_with_one_fitted_bandwidth():
    fit = fit_c32()
    for point in fit["points"]:
        assert abs(point["error"]) < 0.10, point
    # the fitted bandwidth of the unknown C32 hardware is below one Trn2 NeuronLink port
    assert 20e9 < fit["bytes_per_s"] < fabric_for("trn2.48xlarge").link_bytes_per_s


def test_small_messages_sit_on_the_latency_floor_and_large_ones_grow_linearly():
    f = fabric_for("trn2.48xlarge")
    group = list(range(0, 64, 4))           # one core per chip
    t = {n: estimate("all_reduce", n, group, f).seconds for n in (1 << 10, 1 << 16, 1 << 30, 1 << 31)}
    assert t[1 << 10] == pytest.approx(t[1 << 16], rel=1e-6)
    assert t[1 << 10] == pytest.approx(300e-6, rel=0.01)      # nccom example, 16 ranks
    assert t[1 << 31] / t[1 << 30] == pytest.approx(2.0, rel=0.05)


def test_torus_geometry():
    f = fabric_for("trn2.48xlarge")
    assert f.cores == 64 and f.cores_per_chip == 4
    assert f.hops(0, 3) == 0                       # one chip
    assert f.hops(0, 4) == 1                       # next chip in the row
    assert f.hops(0, 4 * 2) == 2                   # two columns away
    assert f.hops(0, 4 * 3) == 1                   # wrap-around
    assert f.hops(0, 4 * 15) == 2                  # diagonal corner, both wrap
    assert f.ring_channels(list(range(0, 64, 4))) == 4
    assert f.ring_channels([0, 4]) == 2
    assert f.ring_channels([0, 1]) == 1
    assert fabric_for("trn3.48xlarge").kind == "switched"
    assert fabric_for("trn2u.48xlarge-ultraserver").cores == 256


def test_more_ranks_or_bytes_never_take_less_time():
    f = fabric_for("trn2.48xlarge")
    for op in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast"):
        prev = 0.0
        for ranks in (2, 4, 8, 16, 32, 64):
            t = estimate(op, 1 << 24, list(range(ranks)), f).seconds
            assert t >= prev * 0.999, (op, ranks)
            prev = t
        assert estimate(op, 1 << 26, list(range(8)), f).seconds > estimate(op, 1 << 20, list(range(8)), f).seconds


def test_algorithms_and_errors():
    f = fabric_for("trn2.48xlarge")
    assert estimate("all_reduce", 1 << 20, list(range(8)), f, "rdh").algorithm == "rdh"
    with pytest.raises(ValueError, match="power-of-two"):
        estimate("all_reduce", 1 << 20, list(range(6)), f, "rdh")
    with pytest.raises(ValueError, match="unknown collective"):
        estimate("all_sum", 1, [0, 1], f)
    with pytest.raises(ValueError, match="does not exist"):
        estimate("all_reduce", 1, [0, 64], f)
    assert estimate("all_reduce", 1 << 20, [5], f).seconds == 0.0


def test_scale_estimate_for_64_ranks():
    calls = [CollectiveCall("all_gather", 4 << 20, "dp", 8), CollectiveCall("reduce_scatter", 4 << 20, "dp", 4)]
    two = estimate_step(1e-3, calls, "trn2.48xlarge", {"dp": 2})
    sixty_four = estimate_step(1e-3, calls, "trn2.48xlarge", {"dp": 64})
    assert sixty_four.ranks == 64
    assert sixty_four.comm_s > two.comm_s
    assert sixty_four.serial_s == pytest.approx(1e-3 + sixty_four.comm_s)
    assert sixty_four.overlapped_s == max(1e-3, sixty_four.comm_s)
    assert group_cores({"dp": 16, "tp": 4}, "tp") == [0, 1, 2, 3]
    assert group_cores({"dp": 16, "tp": 4}, "dp") == list(range(0, 64, 4))
    with pytest.raises(ValueError, match="does not fit"):
        estimate_step(1e-3, calls, "trn2.3xlarge", {"dp": 64})


def test_patterns():
    # FSDP2: root gathered once, other units twice; every unit reduce-scatters once; padding
    calls = {(c.op, c.nbytes): c.count for c in fsdp2_pattern([(3, 2)], [[(4,)], [(4,)]], world=4)}
    assert calls == {("all_gather", 4 * 2 * 4): 1, ("reduce_scatter", 32): 1,
                     ("all_gather", 16): 4, ("reduce_scatter", 16): 2}
    # DDP: reverse order, first bucket capped at 1 MiB, then 25 MiB
    mib = 1 << 20
    buckets = sorted((c.nbytes, c.count) for c in ddp_pattern([10 * mib, 10 * mib, 10 * mib, mib // 2]))
    assert buckets == [(mib // 2, 1), (10 * mib, 1), (20 * mib, 1)]
