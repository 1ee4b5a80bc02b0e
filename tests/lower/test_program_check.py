"""Program.validate runs once per program: the builder checks what it built and simulate()
checks again, so the second check is kept from the first (a cold eager step simulates ~170
programs). Replacing a column or a dependency array must still be caught, and so must an index
edited in place (the timing kernels compile without bounds checks), or a DMA queue the chip
does not have (it segfaulted the kernels)."""

import numpy as np
import pytest

from neuron_sim import ProgramError, get_chip, simulate
from neuron_sim.engines import Engine, Kind
from neuron_sim.program.program import Program


def _program():
    return Program.from_columns(get_chip("trn2"), engine=np.array([0, 1, 0], np.int8),
                                ii_ns=np.full(3, 100.0),
                                deps=(np.array([0, 0, 1, 2]), np.array([0, 1])))


def test_a_checked_program_is_simulated_without_a_second_full_check(monkeypatch):
    p = _program()                  # from_columns checks it
    calls = []
    monkeypatch.setattr(Program, "_check_kinds", staticmethod(lambda *a: calls.append(a)))
    assert simulate(p).total_ns > 0
    assert not calls                # the kind/engine check did not run again
    p.dep_idx = p.dep_idx.copy()    # the same values in a new array: checked again
    simulate(p)
    assert len(calls) == 1


def test_indexes_edited_in_place_are_caught_on_every_call():
    # the timing kernels compile without bounds checks: an index out of range must not reach them
    p = _program()
    simulate(p)
    p.dep_idx[1] = -1
    with pytest.raises(ProgramError, match="outside the program"):
        simulate(p)
    p.dep_idx[1] = 1
    p.dep_ptr[1:3] = [2, 1]
    with pytest.raises(ProgramError, match="never decrease"):
        simulate(p)
    p.dep_ptr[1:3] = [0, 1]
    p.cols["stream"][0] = 40
    with pytest.raises(ProgramError, match=r"instruction 0 is on stream 40; trn2 has streams "
                                           r"0\.\.20 .* dma_queue in 0\.\.15"):
        simulate(p)
    p.cols["stream"][0] = 0
    assert simulate(p).total_ns > 0


@pytest.mark.parametrize("queue", [16, -1])
def test_a_dma_queue_the_chip_does_not_have_is_refused(queue):
    with pytest.raises(ProgramError, match=rf"dma_queue {queue} of instruction 1 is not one of "
                                           r"trn2's DMA queues: give 0\.\.15"):
        Program.from_columns(get_chip("trn2"), engine=np.array([0, int(Engine.DMA)], np.int8),
                             ii_ns=np.ones(2), dma_queue=np.array([99, queue]))


def test_a_replaced_column_is_checked_again():
    p = _program()
    simulate(p)
    p.cols["kind"] = np.array([0, int(Kind.MULTIPLY_MOVING), 0], np.int8)
    with pytest.raises(ProgramError, match="instruction 1 is a MULTIPLY_MOVING on VectorE"):
        simulate(p)
    p.cols["kind"] = np.zeros(3, np.int8)
    simulate(p)
    p.dep_idx = np.array([0, 7])
    with pytest.raises(ProgramError, match="outside the program"):
        simulate(p)
    p.dep_idx = np.array([0, 1])
    p.cols["engine"] = np.array([0, int(Engine.VECTOR), 0, 0], np.int8)
    with pytest.raises(ProgramError, match="column 'engine'"):
        simulate(p)
