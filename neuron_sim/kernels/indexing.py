"""Array indexing without negative-index wraparound in the timing kernels (timing.py, schedule.py).

numba compiles `a[i]` with a signed i as `a[i + (i < 0) * len(a)]`, as Python's `a[-1]` needs.
The timing kernels never index with a negative number, yet that wraparound is their largest
avoidable cost: the scheduling pass's loop reads ~50 arrays, and keeping each one's length at hand
for it spills registers, so that nearly every array access reloads a pointer and a length from
the stack. Without it the pass runs 15-20% faster (CPU time, old and new alternating in one
process, on bench/sim_throughput.py's two programs). An unsigned index (`a[np.uint64(i)]`) skips
it too, but would be needed at every one of the loop's ~150 accesses.

numba has no option for this, so `skip_wraparound(module)` patches numba's index lowering for
the functions of the modules registered: their code is compiled, and cached, without the
wraparound; every other function, in this package or elsewhere, keeps numba's behaviour. A
numba release whose index lowering has another shape is left alone (the kernels then give the
same answers, only slower). A negative index in a registered module reads outside its array:
they have none (their indexes are instruction, stream, slot and engine numbers, and -1 sentinels
are tested before use)."""

from __future__ import annotations

import inspect


def _mangled(module: str) -> str:
    """How numba's symbol names start for functions of `module` (Itanium-style: length, name)."""
    return "".join(f"{len(part)}{part}" for part in module.split("."))


def registered() -> set | None:
    """The symbol prefixes whose functions skip the wraparound, installing the patch on first use;
    one set per process, shared by every copy of this module (a second copy, as a test's or a
    benchmark's, would otherwise register into a set the installed patch never reads). None:
    this numba's index lowering has another shape, left alone."""
    try:
        from numba.core import types
        from numba.np import arrayobj
        numba_fix = arrayobj.fix_integer_index
    except (ImportError, AttributeError):
        return None
    prefixes = getattr(numba_fix, "neuron_sim_prefixes", None)
    if prefixes is not None:
        return prefixes
    if list(inspect.signature(numba_fix).parameters) != ["context", "builder", "idxty", "idx",
                                                         "size"]:
        return None
    prefixes = set()

    def fix_integer_index(context, builder, idxty, idx, size):
        if idxty.signed:
            name = builder.function.name
            if any(p in name for p in prefixes):
                return context.cast(builder, idx, idxty, types.intp)
        return numba_fix(context, builder, idxty, idx, size)

    fix_integer_index.neuron_sim_prefixes = prefixes
    arrayobj.fix_integer_index = fix_integer_index
    return prefixes


def skip_wraparound(module: str) -> bool:
    """Compile the functions of `module` (its __name__) without negative-index wraparound.
    Returns whether this numba could be patched."""
    prefixes = registered()
    if prefixes is None:
        return False
    prefixes.add(_mangled(module))
    return True
