"""neuron_sim/kernels/indexing.py: the timing kernels' modules compile array indexes without
numba's negative-index wraparound; every other module keeps it."""

import importlib.util
import sys
import types

import numpy as np
import numba
import pytest
from numba import njit

from neuron_sim.kernels import indexing

SOURCE = '''
def last(a):
    return a[-1]

def at(a, i):
    return a[i]
'''


def _module(name: str):
    """A module `name` holding SOURCE's functions, jitted (numba names their code after it)."""
    mod = types.ModuleType(name)
    sys.modules[name] = mod
    exec(compile(SOURCE, f"<{name}>", "exec"), mod.__dict__)
    for f in ("last", "at"):
        fn = mod.__dict__[f]
        fn.__module__ = name
        mod.__dict__[f] = njit(fn)
    return mod


@pytest.fixture(scope="module")
def modules():
    if numba.config.DISABLE_JIT:
        pytest.skip("NUMBA_DISABLE_JIT: nothing is compiled, indexes wrap as in Python")
    if not indexing.skip_wraparound("neuron_sim.kernels._test_unwrapped"):
        pytest.skip("this numba's index lowering has another shape: the kernels keep the wraparound")
    yield _module("neuron_sim.kernels._test_unwrapped"), _module("neuron_sim.kernels._test_wrapped")
    for name in ("neuron_sim.kernels._test_unwrapped", "neuron_sim.kernels._test_wrapped"):
        sys.modules.pop(name, None)


def _wraps(fn) -> bool:
    """Whether fn's code adds the array's length to a negative index (a select or add on the
    sign of the index before the load)."""
    ir = next(iter(fn.inspect_llvm().values()))
    return "icmp slt i64" in ir


def test_only_registered_modules_skip_the_wraparound(modules):
    unwrapped, wrapped = modules
    a = np.arange(5.0)
    for m in modules:
        assert m.at(a, 3) == 3.0
    assert wrapped.last(a) == 4.0              # numba's behaviour kept outside the kernels
    assert _wraps(wrapped.at) and not _wraps(unwrapped.at)


def test_the_timing_kernels_are_registered():
    import neuron_sim.kernels.schedule  # noqa: F401  (registers on import)
    import neuron_sim.kernels.timing  # noqa: F401
    for name in ("neuron_sim.kernels.timing", "neuron_sim.kernels.schedule"):
        assert indexing._mangled(name) in indexing.registered()


def test_a_second_copy_of_the_module_registers_into_the_same_patch():
    """A copy loaded under another name (as a benchmark's scratch copy of the kernels is) must
    register where the installed patch reads, or its kernels silently keep the wraparound."""
    if indexing.registered() is None:
        pytest.skip("this numba's index lowering has another shape: nothing is patched")
    spec = importlib.util.spec_from_file_location("_indexing_copy", indexing.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    assert copy.skip_wraparound("scratch_copy.schedule")
    assert "12scratch_copy8schedule" in indexing.registered()


def test_the_registered_modules_index_with_no_negative_literal():
    """In a registered module a[-1] would read before the array instead of its last element: none
    may be written there (a computed negative index is ruled out by the kernels' invariants)."""
    import ast
    from pathlib import Path

    import neuron_sim.kernels as kernels
    for name in ("timing.py", "schedule.py"):
        tree = ast.parse((Path(kernels.__file__).parent / name).read_text())
        bad = [n.lineno for n in ast.walk(tree) if isinstance(n, ast.Subscript)
               and isinstance(n.slice, ast.UnaryOp) and isinstance(n.slice.op, ast.USub)]
        assert not bad, f"{name}: negative index at lines {bad}"
