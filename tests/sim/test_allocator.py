"""neuron_sim.memory.allocator: first-fit placement over one partition's bytes, reuse after
free, the peak, and the error when full."""

import pytest

from neuron_sim.errors import CapacityError
from neuron_sim.memory.allocator import PartitionAllocator


def test_first_fit_reuses_a_freed_hole_and_keeps_the_peak():
    a = PartitionAllocator("SBUF", 1000, "trn2")
    offs = [a.alloc(100, n) for n in "xyz"]
    assert offs == [0, 100, 200] and a.peak == 300 and a.used == 300
    a.free(100)
    assert a.blocks == [(0, 100), (200, 100)] and a.used == 200
    assert a.alloc(60, "w") == 100            # the hole, first fit
    assert a.alloc(60, "v") == 300            # 40 bytes left in the hole: after the last block
    a.free(555)                               # no block there: nothing changes
    assert a.blocks == [(0, 100), (100, 60), (200, 100), (300, 60)] and a.peak == 360


def test_full_partition_raises_with_the_free_bytes():
    a = PartitionAllocator("SBUF", 256, "trn2")
    a.alloc(200, "big")
    with pytest.raises(CapacityError) as e:
        a.alloc(100, "more")
    assert "56" in str(e.value)
