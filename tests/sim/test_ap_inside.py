"""ProgramBuilder refuses an access pattern that reaches outside its tensor (program.ap's
check_inside, run once per pattern where its footprint is made), naming the tensor, its shape and
the pattern's reach; a partition-broadcast view (partition step 0) reads one partition, and empty
or sliced patterns always pass."""

import pytest

from neuron_sim import ProgramError
from neuron_sim.program import ProgramBuilder
from neuron_sim.program import builder as B
from neuron_sim.program.ap import AccessPattern, Memory, Tensor


@pytest.mark.parametrize("reference", [False, True])
def test_the_builder_refuses_a_pattern_past_the_end_of_its_hbm_tensor(reference, monkeypatch):
    monkeypatch.setattr(B, "_reference_default", lambda: reference)
    b = ProgramBuilder("trn2")
    w = b.hbm("w", (256,), "float32")
    tile = b.sbuf("tile", (1, 512), "float32")
    with pytest.raises(ProgramError, match=r"reaches elements \[0, 512\), outside its tensor 'w' "
                                           r"\(HBM, shape \(256,\)\), which holds elements "
                                           r"\[0, 256\)"):
        b.dma_copy(tile, AccessPattern(w, 0, 1, 0, ((512, 1),), 512))
    b.dma_copy(tile[:, 0:256], AccessPattern(w, 0, 1, 0, ((256, 1),), 256))
    assert len(b) == 1


def test_an_on_chip_pattern_past_its_partitions_or_its_row_is_refused():
    a = Tensor("a", Memory.SBUF, (64, 512), "float32", 0, 32)
    with pytest.raises(ProgramError, match=r"reaches partitions \[32, 160\) x elements \[0, 512\) "
                                           r"of each, outside its tensor 'a' \(SBUF, shape "
                                           r"\(64, 512\)\), which holds partitions \[32, 96\)"):
        AccessPattern(a, 32, 128, 0, ((512, 1),)).record()
    with pytest.raises(ProgramError, match=r"partitions \[0, 64\) x"):
        AccessPattern(a, 0, 64, 0, ((512, 1),)).box()           # starts before the tensor
    with pytest.raises(ProgramError, match=r"elements \[256, 768\) of each"):
        AccessPattern(a, 32, 64, 256, ((512, 1),)).record()     # past each partition's row
    ps = Tensor("acc", Memory.PSUM, (128, 512), "float32")
    with pytest.raises(ProgramError, match=r"'acc' \(PSUM, shape \(128, 512\)\)"):
        AccessPattern(ps, 0, 128, 0, ((2, 512), (512, 1))).record()


def test_a_partition_broadcast_view_reads_one_partition():
    """NKI's [1, n] tile read as [128, n] (partition step 0): legal, one partition is read."""
    one = Tensor("one", Memory.SBUF, (1, 512), "float32", 0, 5)
    assert AccessPattern(one, 5, 128, 0, ((512, 1),), 0).record()[:4] == (5, 133, 0, 512)
    with pytest.raises(ProgramError):
        AccessPattern(one, 5, 2, 0, ((512, 1),), 1).record()     # two partitions: one too many
    w = Tensor("w", Memory.HBM, (512,), "float32")
    assert AccessPattern(w, 0, 128, 0, ((512, 1),), 0).record()[:4] == (0, 1, 0, 512)


def test_empty_and_sliced_patterns_pass():
    a = Tensor("a", Memory.SBUF, (64, 512), "float32")
    AccessPattern(a, 0, 0, 600, ((512, 1),)).record()       # no partitions
    AccessPattern(a, 0, 64, 0, ((0, 1), (512, 1))).record()   # an empty free dimension
    h = Tensor("h", Memory.HBM, (8, 0, 4), "float32")
    AccessPattern(h, 0, 8, 0, ((0, 4), (4, 1)), 0).record()
    for t in (a, Tensor("x", Memory.HBM, (16, 10), "float32")):
        for ap in (t.ap(), t[3:9, 2:7], t[-1, ::3], t[5:2]):
            object.__setattr__(ap, "_rec", None)    # recomputed (and checked) from the fields
            ap.record()
