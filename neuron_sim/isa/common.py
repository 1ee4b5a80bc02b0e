"""The shared vocabulary of the instruction modules: the record an instruction emits, the legality
checks, and the cost pieces every engine uses. An instruction module is then mostly data: which
engine, which operands, which formula.

Cost terms (engine cycles; [ArchV2] [ISAcost] unless noted):
- `ii`: initiation interval, what the documented formulas give (max(64, N) ...): how long the
  instruction occupies its engine when instructions run back to back.
- `lat`: extra cycles until a dependent instruction may use the result: the ~100-cycle dependent
  overhead plus ~60 cycles per tensor access (see hardware/assumptions.json)."""

from __future__ import annotations

from dataclasses import dataclass, field
from math import ceil
from typing import NamedTuple

from ..engines import ENGINE_NAMES, Engine, Kind
from ..errors import CapabilityError, FreeSizeError, MemoryAccessError, PartitionError
from ..numerics.formats import SIXTEEN_BIT_FLOATS
from ..program.ap import AccessPattern, Memory
from . import build_params, module_for


@dataclass(slots=True)
class DmaCost:
    bytes: float
    hbm_bytes: float
    descriptors: int
    engines: int
    engine0: int
    queue: int
    dge: int
    direction: int
    engine_ns: float      # time on each engine of the spread
    hbm_ns: float         # time on the core's HBM share
    issue_ns: float       # minimum interval to the next trigger on this queue


@dataclass(slots=True)
class Emit:
    name: str
    engine: int
    kind: int
    ii_cycles: float
    lat_cycles: float
    reads: tuple
    writes: tuple
    params: dict = field(default_factory=dict)
    flops: float = 0.0
    dma: DmaCost | None = None


# ---- legality ---------------------------------------------------------------------------------

class Operand(NamedTuple):
    """A tensor operand as its module declares it in OPERANDS: read or written (READ, WRITE where
    nothing else is said); the memories it may be in where the instruction narrows its engine's
    reach (REACH), and what to do when it is elsewhere; `own_start` where the module checks where
    the operand starts itself (not the engines' start rule)."""
    role: str               # "read" or "write"
    memories: tuple = ()
    hint: str = ""
    own_start: bool = False


READ, WRITE = Operand("read"), Operand("write")


# Which memories each engine's ports reach [ArchV2][ISA]: TensorE reads SBUF and writes PSUM
# (_PORTS, by role); GpSimd has no PSUM port; DMA moves between HBM and SBUF (no DMA path
# into PSUM).
REACH = {Engine.TENSOR: (Memory.SBUF, Memory.PSUM), Engine.VECTOR: (Memory.SBUF, Memory.PSUM),
         Engine.SCALAR: (Memory.SBUF, Memory.PSUM), Engine.GPSIMD: (Memory.SBUF,),
         Engine.DMA: (Memory.HBM, Memory.SBUF)}
# what to do when an engine reaches for a memory it has no port to (GpSimd: [ISA]'s words)
_REACH_HINTS = {Engine.GPSIMD: "GpSimd cannot access PSUM: run it on VectorE or ScalarE, or copy "
                               "through them first",
                Engine.DMA: "DMA cannot access PSUM: copy PSUM to SBUF with tensor_copy first"}
# An operand that declares no memories of its own: what its engine's port for its role reaches
_PORTS = {e: {role: Operand(role, m, _REACH_HINTS.get(e, "compute engines reach only SBUF and "
                                                        "PSUM: load from HBM with dma_copy"))
              for role in ("read", "write")} for e, m in REACH.items()}
_PORTS[Engine.TENSOR] = {
    "read": Operand("read", (Memory.SBUF,), "TensorE reads its operands from SBUF"),
    "write": Operand("write", (Memory.PSUM,), "TensorE writes only PSUM; copy the result to SBUF "
                     "with tensor_copy")}


def partition_starts(n: int, chip) -> tuple:
    """Where an access of n partitions may start [ArchV2]: the engines' lanes come in quadrants
    (chip.partition_quadrant_size), so more than half the partitions start at 0, more than a
    quadrant at 0 or the half, and up to a quadrant at any quadrant boundary."""
    parts, quadrant = chip.sbuf_partitions, chip.partition_quadrant_size
    half = parts // 2
    return (0,) if n > half else (0, half) if n > quadrant else tuple(range(0, parts, quadrant))


def _start_rule(n: int, chip) -> str:
    """`partition_starts` in words: '33-64 partitions must start at partition 0 or 64'."""
    parts, quadrant = chip.sbuf_partitions, chip.partition_quadrant_size
    half, allowed = parts // 2, partition_starts(n, chip)
    span = f"more than {half}" if n > half else f"{quadrant + 1}-{half}" if n > quadrant \
        else f"1-{quadrant}"
    starts = " or ".join(filter(None, (", ".join(map(str, allowed[:-1])), str(allowed[-1]))))
    return f"{span} partitions must start at partition {starts}"


def check_partitions(instr: str, name: str, ap: AccessPattern, chip) -> None:
    """At most the core's partitions, starting where `partition_starts` allows."""
    if ap.memory == Memory.HBM:
        return
    n, p0, parts = ap.p_size, ap.p_start, chip.sbuf_partitions
    if n < 1 or n > parts or p0 + n > parts:
        raise PartitionError(instr, name, f"1..{parts} partitions inside 0..{parts - 1}",
                             f"{n} partitions from {p0}", chip.name,
                             f"split the tile along the partition dimension (<= {parts})")
    allowed = partition_starts(n, chip)
    if p0 not in allowed:
        raise PartitionError(instr, name, f"an access of {n} partitions to start at one of "
                             f"{allowed}", f"start partition {p0}", chip.name,
                             f"{_start_rule(n, chip)}: move the tile to an allowed start "
                             f"partition")


COMPUTE_ENGINES = (Engine.VECTOR, Engine.SCALAR, Engine.GPSIMD)


def engines_of(module) -> tuple:
    """The engines an instruction's `engine` argument may name: its module's ENGINES, else any
    compute engine."""
    return getattr(module, "ENGINES", COMPUTE_ENGINES)


def check_engine(instr: str, engine: int, allowed: tuple, chip) -> None:
    """The engine asked for is one that runs the instruction (`allowed`: engines_of its module)."""
    if engine not in allowed:
        names = ", ".join(ENGINE_NAMES[e] for e in allowed)
        raise CapabilityError(instr, "engine", f"one of {names}", ENGINE_NAMES[Engine(engine)],
                              chip.name,
                              "pick one of those engines, or leave the choice to the compiler")


def check_pattern_dims(instr: str, name: str, ap: AccessPattern, chip) -> None:
    """An engine access pattern has at most chip.ap_free_dims_max free dimensions (after
    merging the ones contiguous with each other)."""
    if len(ap.dims) > chip.ap_free_dims_max:
        raise FreeSizeError(instr, name, f"at most {chip.ap_free_dims_max} free dimensions in an "
                            f"access pattern", f"{len(ap.dims)} free dimensions "
                            f"{[list(d) for d in ap.dims]} (size, stride)", chip.name,
                            "copy it to a contiguous tile first")


def check_free(instr: str, name: str, n: int, limit: int, chip, what: str = "free size",
               hint: str = "") -> None:
    if n > limit:
        raise FreeSizeError(instr, name, f"{what} <= {limit}", n, chip.name,
                            hint or "tile the free dimension")


def check_same_partitions(instr: str, a_name: str, a: AccessPattern, b_name: str,
                          b: AccessPattern, chip) -> None:
    if a.p_size != b.p_size:
        raise PartitionError(instr, b_name, f"{a.p_size} partitions like {a_name}",
                             f"{b.p_size}", chip.name)


def check_same_shape(instr: str, a_name: str, a: AccessPattern, b_name: str, b: AccessPattern,
                     chip) -> None:
    """Element-wise operands: as many partitions and elements per partition as each other."""
    check_same_partitions(instr, a_name, a, b_name, b, chip)
    if a.free_size != b.free_size:
        raise FreeSizeError(instr, b_name, f"{a.free_size} elements per partition like {a_name}",
                            b.free_size, chip.name)


def check_not_both_psum(instr: str, a_name: str, a: AccessPattern, b_name: str, b: AccessPattern,
                        chip) -> None:
    """Two inputs of one element-wise instruction: at most one in PSUM [ISA]."""
    if a.memory == b.memory == Memory.PSUM:
        raise MemoryAccessError(instr, b_name, f"{a_name} and {b_name} not both in PSUM",
                                "both in PSUM", chip.name, "copy one of them to SBUF first")


# operands already found legal, by everything the checks read (the instruction and operand name
# say which declaration): a program asks about a few geometries thousands of times. Bounded.
_LEGAL: set = set()


def check_operands(instr, chip, engine, **operands):
    """The tensor operands of instruction `instr` on `engine`, by its module's OPERANDS (an
    operand left out, None, or a number in place of a tensor is skipped): the engine runs the
    instruction (check_engine, when its `build` takes an engine), the partition rules, the
    memories the operand may be in (its declared ones, else what its engine reaches for its
    role), and on the compute engines the free size its memory allows."""
    limits = (chip.sbuf_partitions, chip.sbuf_free_elems_max, chip.psum_free_elems_max)
    for name, ap in operands.items():
        if ap is None or isinstance(ap, (int, float)):
            continue
        key = (instr, name, engine, ap.geometry(), limits)
        if key in _LEGAL:
            continue
        module = module_for(instr)
        if "engine" in build_params(module):
            check_engine(instr, engine, engines_of(module), chip)
        declared = module.OPERANDS[name]
        if not declared.own_start:
            check_partitions(instr, name, ap, chip)
        if not declared.memories:
            declared = _PORTS[engine][declared.role]
        if ap.memory not in declared.memories:
            raise MemoryAccessError(instr, name, f"{ENGINE_NAMES[Engine(engine)]} to access "
                                    f"{'/'.join(m.name for m in declared.memories)}",
                                    f"a {ap.memory.name} tensor {ap.tensor.name!r}", chip.name,
                                    declared.hint)
        if engine in COMPUTE_ENGINES:
            psum = ap.memory == Memory.PSUM
            check_free(instr, name, ap.free_size,
                       chip.psum_free_elems_max if psum else chip.sbuf_free_elems_max, chip,
                       f"free elements per partition in {ap.memory.name}")
        if len(_LEGAL) > 4096:
            _LEGAL.clear()
        _LEGAL.add(key)


# ---- cost pieces ------------------------------------------------------------------------------

def access_latency(chip, n_tensors: int) -> float:
    """Cycles from issue-complete to a dependent instruction seeing the result."""
    return chip.dependent_latency_cycles + chip.tensor_access_latency_cycles * n_tensors


def stride_factor(chip, *aps: AccessPattern) -> float:
    """Innermost stride above 16 B halves that port's bandwidth [ArchV2]."""
    limit = chip.sbuf_stride_penalty_threshold_bytes
    return 2.0 if any(ap.inner_stride_bytes > limit for ap in aps) else 1.0


def is16(ap: AccessPattern) -> bool:
    return ap.dtype in SIXTEEN_BIT_FLOATS


def contiguous(ap: AccessPattern) -> bool:
    return ap.dims[-1][1] == 1 or ap.dims[-1][0] == 1


def vector_perf_divisor(chip, dst: AccessPattern, *srcs: AccessPattern) -> float:
    """NC-v3+ VectorE performance modes for one-input ops [ArchV3]: 4x when input and output are
    BF16/FP16 in SBUF and contiguous; 2x when not contiguous or one side is in PSUM."""
    if not chip.has_vector_perf_modes:
        return 1.0
    aps = (dst,) + srcs
    if not all(is16(a) for a in aps):
        return 1.0
    if all(a.memory == Memory.SBUF for a in aps) and all(contiguous(a) for a in aps):
        return 4.0
    return 2.0


def one_input_cycles(chip, n: int, divisor: float = 1.0) -> float:
    """max(64, N / perf-mode) [ISAcost][ArchV3]."""
    return max(float(chip.min_ii_cycles), ceil(n / divisor))


def one_input_engine_cycles(chip, dst: AccessPattern, src: AccessPattern, engine) -> float:
    """A one-input element-wise op (tensor_copy, tensor_scalar) on its engine: GpSimd 150 + N;
    ScalarE max(64, N), N/2 for 16-bit in and out where ScalarE runs these ops (NC-v4); VectorE
    with its perf modes. Strided operands pay the stride factor [ISAcost][ArchV3][ArchV4]."""
    n = dst.free_size
    if engine == Engine.GPSIMD:
        return chip.gpsimd_start_cycles + n
    if engine == Engine.SCALAR:
        div = 2.0 if (chip.has_scalar_tensor_scalar and is16(dst) and is16(src)) else 1.0
    else:
        div = vector_perf_divisor(chip, dst, src)
    return one_input_cycles(chip, n, div) * stride_factor(chip, dst, src)


def check_scalar_operand(instr, name, operand, data: AccessPattern, chip) -> bool:
    """An operand that is a number or a per-partition [P, 1] tensor beside `data` (the tensor
    checked by check_operands); True when it is a tensor (one more read)."""
    if isinstance(operand, (int, float)):
        return False
    if operand.p_size != data.p_size or operand.free_size != 1:
        raise FreeSizeError(instr, name, f"a scalar or shape [{data.p_size}, 1]",
                            list(operand.shape), chip.name)
    return True


def per_partition(state, value, ap, like):
    """A scalar operand's value in `semantics`, beside the values `like` (check_scalar_operand):
    the number, or the [P, 1] tile `ap` read and shaped to broadcast over like's free dims."""
    if isinstance(value, (int, float)):
        return value
    return state.read(ap).reshape((like.shape[0],) + (1,) * (like.ndim - 1))


def semantics_of(reference):
    """The `semantics` of an instruction whose one output is `reference` of its inputs' values
    (FP32, in the order of its reads)."""
    def semantics(state, emit):
        (dst,) = emit.writes
        state.write(dst, reference(*(state.read(r) for r in emit.reads)).reshape(dst.shape))
    return semantics


def make(name, engine, ii, lat, reads, writes, params=None, kind=Kind.GENERIC, flops=0.0,
         dma=None) -> Emit:
    return Emit(name, int(engine), int(kind), float(ii), float(lat), tuple(reads), tuple(writes),
                params or {}, float(flops), dma)
