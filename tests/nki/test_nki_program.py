"""Lowering a trace to program rows (neuron_sim/nki/program.py): DMAs split by operand, and the
write-after-read order on reused buffers."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl


def _dma_rows(prog):
    return [i for i in range(len(prog)) if prog.opname(i) == "dma_copy"]


def _matmul_rows(prog):
    return [i for i in range(len(prog)) if prog.opname(i) == "nc_matmul"]


@nki.jit
def column_reads(lhsT, rhs, cuts):
    """Load lhsT [128, 256] in one DMA per iteration, then read the columns `cuts` as matmul
    stationaries (one PSUM tile and one store each)."""
    out = nl.ndarray((len(cuts), 128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=b, src=rhs)
    for it in range(3):
        a = nl.ndarray((128, 256), dtype=lhsT.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT[:, it * 256:(it + 1) * 256])
        for j, (c0, c1) in enumerate(cuts):
            ps = nl.ndarray((c1 - c0, 512), dtype=nl.float32, buffer=nl.psum)
            nisa.nc_matmul(dst=ps, stationary=a[:, c0:c1], moving=b)
            if it == 2:
                r = nl.ndarray((c1 - c0, 512), dtype=nl.float32, buffer=nl.sbuf)
                nisa.tensor_copy(dst=r, src=ps)
                nisa.dma_copy(dst=out[j, 0:c1 - c0, :], src=r)
    return out


def _run(cuts, numerics=False):
    rng = np.random.default_rng(0)
    lhsT = rng.standard_normal((128, 768)).astype(np.float32)
    rhs = rng.standard_normal((128, 512)).astype(np.float32)
    out = nki.simulate(column_reads, platform_target="trn2", numerics=numerics)(lhsT, rhs, cuts)
    return lhsT, rhs, out, nki.last_report().programs[0]


def test_dma_is_split_into_the_operands_its_readers_take():
    lhsT, rhs, out, prog = _run(((0, 128), (128, 256)), numerics=True)
    # rhs is read whole by every matmul: one DMA; each lhsT tile is read in two halves: two DMAs
    assert len(_dma_rows(prog)) == 1 + 3 * 2 + 2
    for j, c0 in enumerate((0, 128)):
        np.testing.assert_allclose(out[j], lhsT[:, 512 + c0:640 + c0].T @ rhs, rtol=1e-4, atol=1e-3)


def test_dma_is_not_split_when_reads_do_not_partition_it():
    # one read, reads that leave columns out, overlapping reads that cover all columns
    for cuts in (((0, 128),), ((0, 64), (128, 256)), ((0, 128), (96, 224), (128, 256))):
        assert len(_dma_rows(_run(cuts)[3])) == 1 + 3 + len(cuts), cuts


def test_reused_buffer_piece_waits_only_for_its_own_readers(monkeypatch):
    """Iteration 2's tile reuses iteration 0's bytes (two buffers per allocation site); each of
    its pieces waits for the matmul that read those columns, not for the other one."""
    from neuron_sim.nki import memory
    monkeypatch.setattr(memory, "BUFFERS_PER_SITE", 2)
    _, _, _, prog = _run(((0, 128), (128, 256)))
    dma, mm = _dma_rows(prog), _matmul_rows(prog)
    piece0, piece1 = dma[5], dma[6]           # after the rhs load and iterations 0 and 1
    read0, read1 = mm[0], mm[1]               # iteration 0's matmuls, columns 0:128 and 128:256
    assert read0 in prog.deps_of(piece0) and read1 not in prog.deps_of(piece0)
    assert read1 in prog.deps_of(piece1) and read0 not in prog.deps_of(piece1)


def _program_key(prog):
    op, oi = prog.order_edges()
    return ({k: prog.cols[k].tobytes() for k in prog.cols}, prog.dep_ptr.tobytes(),
            prog.dep_idx.tobytes(), op.tobytes(), oi.tobytes(), list(prog.opnames))


@nki.jit
def partial_accumulations(lhsT, rhs):
    """nc_matmul into untouched, whole, partly written and explicitly accumulated PSUM tiles:
    every way its accumulate flag is decided."""
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
    b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
    nisa.dma_copy(dst=a, src=lhsT)
    nisa.dma_copy(dst=b, src=rhs)
    ps = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.memset(dst=ps[:, 0:256], value=0.0, engine=nisa.vector_engine)      # partly written
    nisa.nc_matmul(dst=ps, stationary=a, moving=b)
    nisa.nc_matmul(dst=ps, stationary=a, moving=b)                            # whole
    q = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=q, stationary=a, moving=b)                             # untouched
    nisa.nc_matmul(dst=q, stationary=a, moving=b, accumulate=True)
    nisa.nc_matmul(dst=q, stationary=a, moving=b, accumulate=False)
    r = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=r, src=q)
    nisa.tensor_tensor(dst=r, data1=ps, data2=r, op=nl.add)
    nisa.dma_copy(dst=out, src=r)
    return out


def test_timing_only_trace_builds_the_program_numerics_build():
    """numerics=False takes its own path through the nisa calls (no values, no masks): the
    program, rows, dependencies and order edges, is byte for byte the one of the full trace,
    for the matmul tutorial's kernels and every way a matmul's accumulate flag is decided."""
    from nki_examples import load_example
    mt = load_example("matmul_tutorial")
    rng = np.random.default_rng(1)
    lhsT = rng.standard_normal((1024, 2048)).astype(nl.bfloat16)
    rhs = rng.standard_normal((1024, 1024)).astype(nl.bfloat16)
    small = (rng.standard_normal((128, 128)).astype(np.float32),
             rng.standard_normal((128, 512)).astype(np.float32))
    cases = [(mt.matmul_fully_optimized, (lhsT, rhs)), (mt.matmul_block_free, (lhsT, rhs)),
             (partial_accumulations, small)]
    for kernel, args in cases:
        keys, times = [], []
        for numerics in (True, False):
            nki.simulate(kernel, platform_target="trn1", numerics=numerics)(*args)
            rep = nki.last_report()
            acc = [e.params["accumulate"] for e in rep.programs[0].emits if e.name == "nc_matmul"]
            keys.append((_program_key(rep.programs[0]), acc))
            times.append(rep.total_ns)
        assert keys[0] == keys[1], kernel.__name__
        assert times[0] == times[1]
    assert acc == [True, True, False, True, False]


def test_memoised_matmul_checks_still_reject_a_bad_geometry():
    """nc_matmul's checks are kept by operand geometry; a call that differs only in where the
    destination lives (SBUF, not PSUM) is still refused after a good one."""
    import pytest

    @nki.jit
    def k(lhsT, rhs):
        out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
        a = nl.ndarray((128, 128), dtype=lhsT.dtype, buffer=nl.sbuf)
        b = nl.ndarray((128, 512), dtype=rhs.dtype, buffer=nl.sbuf)
        nisa.dma_copy(dst=a, src=lhsT)
        nisa.dma_copy(dst=b, src=rhs)
        for buf in (nl.psum, nl.sbuf):
            d = nl.ndarray((128, 512), dtype=nl.float32, buffer=buf)
            nisa.nc_matmul(dst=d, stationary=a, moving=b)
        return out

    x, y = np.zeros((128, 128), np.float32), np.zeros((128, 512), np.float32)
    for numerics in (True, False):
        with pytest.raises(nki.NkiValidationError, match="'dst'.*expected TensorE to access PSUM"):
            nki.simulate(k, platform_target="trn1", numerics=numerics)(x, y)


@nki.jit
def aliased_operands(x):
    """Views of one tile as several operands of an instruction, in different combinations of
    one geometry (one pattern named twice must not be taken for the other argument's), a pattern
    in an instruction's parameters (activation's scale), and arguments equal but for their sign
    (memset of 0.0 and -0.0)."""
    t = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    u = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=t, src=x)
    nisa.dma_copy(dst=u, src=x)
    for i in range(3):
        nisa.memset(dst=u[:, 0:8], value=0.0)
        nisa.memset(dst=u[:, 8:16], value=-0.0)
        nisa.tensor_tensor(dst=t, data1=t, data2=u, op=nl.add)
        nisa.tensor_tensor(dst=t, data1=u, data2=u, op=nl.add)
        nisa.tensor_tensor(dst=u, data1=t, data2=u[:, 0:512], op=nl.add)
        nisa.tensor_scalar(dst=t[:, 0:256], data=t[:, 256:512], op0=nl.multiply, operand0=2.0)
        nisa.activation(dst=t, op=nl.exp, data=u, scale=t[:, 0:1])
    out = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=t)
    return out


@nki.jit
def spilled_tiles(x):
    """More live SBUF tiles than Trn2's SBUF holds: the plan spills some between their uses
    (stored and reloaded, or fetched again from HBM when the tile is a plain copy of it), so
    the bulk emission hands its rows over in several runs around the spill DMAs."""
    tiles = [nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.sbuf) for _ in range(12)]
    for i, t in enumerate(tiles):
        if i % 2:
            nisa.dma_copy(dst=t, src=x)
        else:
            nisa.memset(dst=t, value=float(i))
    for t in tiles[1:]:
        nisa.tensor_tensor(dst=tiles[0], data1=tiles[0], data2=t, op=nl.add)
    out = nl.ndarray((128, 8192), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=tiles[0])
    return out


def _operand(ap):
    return (ap.tensor.name, ap.p_start, ap.p_size, ap.offset, ap.dims, ap.p_stride)


def _records(prog):
    """Every row's record, patterns by their tensor's name and position (the two builds make
    their own Tensor objects)."""
    def op(v):
        if isinstance(v, float):
            return repr(v)          # -0.0 == 0.0, but not as a memset value
        return _operand(v) if hasattr(v, "p_stride") else v
    return [(e.name, e.engine, e.kind, e.ii_cycles, e.lat_cycles, e.flops, e.dma,
             [_operand(a) for a in e.reads], [_operand(a) for a in e.writes],
             {k: op(v) for k, v in e.params.items()}) for e in prog.emits]


def test_records_built_once_per_geometry_equal_the_plain_build(monkeypatch):
    """build_programs copies a compute instruction's records from the first build of its
    geometry (_Records) and hands the rows to the builder in bulk (_BulkRows); the programs
    (columns, dependencies, order edges, every record and operand) and their times equal those
    of building every instruction through its module and appending it row by row, and those of
    the records appended row by row."""
    from neuron_sim.calibrate import mamba
    from neuron_sim.nki import program
    from neuron_sim.timing.simulate import simulate
    from nki_examples import load_example
    mt, at = load_example("matmul_tutorial"), load_example("attention")
    seen = []
    real = program.simulate_programs

    def grab(traces, plans, lnc=1, check=False):
        seen.append((traces, plans, lnc))
        return real(traces, plans, lnc=lnc, check=check)

    monkeypatch.setattr(program, "simulate_programs", grab)
    bf = nl.bfloat16
    cases = [(mt.matmul_fully_optimized, "trn1", (np.zeros((1024, 2048), bf), np.zeros((1024, 1024), bf))),
             (mt.matmul_kopt_v5, "trn2", (np.zeros((1024, 2048), bf), np.zeros((1024, 1024), bf))),
             (mamba.mamba_v1, "trn1", mamba.inputs(128, 512)),
             (mamba.mamba_v2, "trn1", mamba.inputs(128, 1024)),
             (mamba.mamba_v3, "trn1", mamba.inputs(128, 512)),
             (at.attention_kernel, "trn2", (np.zeros((128, 512), bf), np.zeros((128, 512), bf),
                                            np.zeros((512, 128), bf))),
             (aliased_operands, "trn2", (np.zeros((128, 512), np.float32),)),
             (spilled_tiles, "trn2", (np.zeros((128, 8192), np.float32),))]
    for kernel, target, args in cases:
        nki.simulate(kernel, platform_target=target, numerics=False)(*args)
        traces, plans, lnc = seen[-1]
        assert plans[0].spills or kernel is not spilled_tiles
        plain = program.build_programs(traces, plans, lnc=lnc, records=False)
        for fast in (program.build_programs(traces, plans, lnc=lnc, bulk=False),
                     program.build_programs(traces, plans, lnc=lnc)):
            for f, p in zip(fast, plain):
                assert _program_key(f.program) == _program_key(p.program), kernel.__name__
                assert _records(f.program) == _records(p.program), kernel.__name__
                assert f.source_index == p.source_index
                assert simulate(f.program).total_ns == simulate(p.program).total_ns
