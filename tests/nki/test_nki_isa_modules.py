"""One definition per instruction: every nisa call is its ISA module (neuron_sim/isa/<engine>/),
costed by the module's documented formula, and the built program run through the modules' NumPy
semantics gives what the traced kernel computed (check_semantics=True)."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from neuron_sim.hardware import get_chip
from neuron_sim.isa import instruction_names, module_for
from nki_helpers import to_hbm


def _run(kernel, *args, target="trn2", check=False):
    out = nki.simulate(kernel, platform_target=target, check_semantics=check)(*args)
    return out, nki.last_report()


def _rows(rep, name):
    """ii (engine cycles) of the program rows named `name`."""
    prog = rep.programs[0]
    return [e.ii_cycles for e in prog.emits if e.name == name]


@nki.jit
def _vector_family(x, y, m):
    a, b, mask = nl.load(x), nl.load(y), nl.load(m)
    top = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=a)
    stt = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=stt, data=a, op0=nl.multiply, operand0=2.0, op1=nl.add, operand1=b)
    tsr = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=tsr, data=a, op0=nl.subtract, operand0=1.0, reduce_op=nl.add,
                              reduce_res=rs)
    sel = nl.ndarray((128, 512), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=sel, src=b)
    nisa.tensor_copy_predicated(dst=sel, src=a, predicate=mask)
    return to_hbm(top, stt, tsr, rs, sel)


def _inputs():
    rng = np.random.default_rng(3)
    x = rng.standard_normal((128, 512)).astype(np.float32)
    y = rng.standard_normal((128, 512)).astype(np.float32)
    m = (rng.random((128, 512)) > 0.5).astype(np.uint8)
    return x, y, m


def test_nki_only_instructions_compute_their_documented_results():
    x, y, m = _inputs()
    (top, stt, tsr, rs, sel), _ = _run(_vector_family, x, y, m)
    np.testing.assert_array_equal(top, -np.sort(-x, axis=1)[:, :8])
    np.testing.assert_allclose(stt, x * 2 + y, rtol=1e-6)
    np.testing.assert_allclose(tsr, x - 1, rtol=1e-6)
    np.testing.assert_allclose(rs[:, 0], (x - 1).sum(axis=1), rtol=1e-4, atol=1e-3)
    np.testing.assert_array_equal(sel, np.where(m != 0, x, y))


@nki.jit
def _reversed_stt(x, y):
    a, b = nl.load(x), nl.load(y)
    o = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    nisa.scalar_tensor_tensor(dst=o, data=a, op0=nl.subtract, operand0=1.0, op1=nl.divide, operand1=b,
                              reverse0=True, reverse1=True)
    r = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=r, src=o)
    return r


def test_reversed_operands_in_the_module_and_the_program():
    rng = np.random.default_rng(1)
    x, y = rng.uniform(2, 3, (128, 64)).astype(np.float32), rng.uniform(1, 2, (128, 64)).astype(np.float32)
    out, _ = _run(_reversed_stt, x, y, check=True)
    np.testing.assert_allclose(out, y / (1 - x), rtol=1e-6)


@nki.jit
def _accumulate_two_calls(x, y):
    a, b = nl.load(x), nl.load(y)
    t = nl.ndarray((128, 64), dtype=nl.float32, buffer=nl.sbuf)
    rs = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar_reduce(dst=t, data=a, op0=nl.multiply, operand0=2.0, reduce_op=nl.add, reduce_res=rs)
    nisa.tensor_scalar_reduce(dst=t, data=b, op0=nl.subtract, operand0=1.0, reverse0=True, reduce_op=nl.add,
                              reduce_res=rs, reduce_cmd=nisa.reduce_cmd.reduce)
    r = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=r, src=rs)
    return r


def test_reduce_commands_accumulate_across_instructions():
    """reduce_cmd=reduce adds to VectorE's accumulator instead of resetting it, in the nisa call
    and in the program run through the module (the interpreter keeps the registers too)."""
    rng = np.random.default_rng(2)
    x, y = rng.standard_normal((128, 64)).astype(np.float32), rng.standard_normal((128, 64)).astype(np.float32)
    out, _ = _run(_accumulate_two_calls, x, y, check=True)
    np.testing.assert_allclose(out[:, 0], (2 * x).sum(axis=1) + (1 - y).sum(axis=1), rtol=1e-4, atol=1e-4)


@nki.jit
def _dropout(x):
    a = nl.load(x)                                   # instruction 0
    o = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.dropout(dst=o, data=a, prob=0.25)           # instruction 1: its draw is seeded with 1
    r = nl.ndarray(x.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=r, src=o)
    return r


def test_dropout_draw_is_deterministic_per_instruction():
    x = np.random.default_rng(4).uniform(1, 2, (128, 256)).astype(np.float32)
    out, _ = _run(_dropout, x, check=True)
    keep = np.random.default_rng(1).random(x.shape, dtype=np.float32) >= 0.25
    np.testing.assert_array_equal(out, np.where(keep, x, 0))
    assert 0.7 < keep.mean() < 0.8


def test_nki_only_instructions_cost_their_documented_cycles():
    """[ISAcost]: max8 N; scalar_tensor_tensor 2N (two SBUF inputs); tensor_scalar_reduce N + 64;
    tensor_copy_predicated 2N (src and predicate in SBUF); N = 512 elements per partition."""
    x, y, m = _inputs()
    _, rep = _run(_vector_family, x, y, m)
    n, lo = 512, get_chip("trn2").min_ii_cycles
    assert _rows(rep, "max8") == [n]
    assert _rows(rep, "scalar_tensor_tensor") == [2 * n]
    assert _rows(rep, "tensor_scalar_reduce") == [n + lo]
    assert _rows(rep, "tensor_copy_predicated") == [2 * n]


def test_every_nisa_instruction_is_an_isa_module():
    """The registry is the list: each nisa instruction has a core module, and registry
    instructions without a hand-written adapter (nc_matmul_mx, quantize_mx, local_gather ...)
    get a nisa function made from their module."""
    enums_and_helpers = {"dge_mode", "dma_engine", "engine", "get_nc_version", "gpsimd_engine",
                         "matmul_perf_mode", "nc_version", "oob_mode", "reduce_cmd", "scalar_engine",
                         "tensor_engine", "unknown_engine", "vector_engine"}
    for name in set(nisa.__all__) - enums_and_helpers:
        assert module_for(name) is not None, name
    for name in instruction_names():
        if module_for(name).NAME == name:
            assert callable(getattr(nisa, name)), name


def test_every_instruction_module_has_its_numpy_reference():
    """README: each module's `reference` is the NumPy definition of its result (core_barrier, a
    wait, computes none); memset's and dma_transpose's against NumPy, every rank NKI documents."""
    no_reference = {n for n in instruction_names()
                    if not callable(getattr(module_for(n), "reference", None))}
    assert no_reference == {"core_barrier"}
    np.testing.assert_array_equal(module_for("memset").reference((4, 3), 2.5),
                                  np.full((4, 3), 2.5, np.float32))
    for shape, axes in (((64, 128), (1, 0)), ((64, 4, 32), (2, 1, 0)),
                        ((32, 2, 3, 16), (3, 1, 2, 0))):
        x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape)
        want = np.transpose(x, axes)
        got = module_for("dma_transpose").reference(x.reshape(shape[0], -1), shape[-1])
        np.testing.assert_array_equal(got.reshape(want.shape), want)


@nki.jit
def _generic_ops(x, width):
    """The 8 largest of 1 / x[:, :width] per row: reciprocal and max8 have no hand-written
    adapter; max8 refuses fewer than 8 elements."""
    a = nl.load(x[:, 0:width])
    r = nl.ndarray((128, width), dtype=nl.float32, buffer=nl.sbuf)
    nisa.reciprocal(dst=r, data=a)
    top = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.max8(dst=top, src=r)   # here:max8
    return to_hbm(top)[0]


def test_generic_adapter_checks_with_the_module_and_points_at_the_kernel_line():
    x = np.random.default_rng(0).uniform(1, 2, (128, 64)).astype(np.float32)
    out, _ = _run(_generic_ops, x, 64)
    np.testing.assert_allclose(out, -np.sort(-(1 / x), axis=1)[:, :8], rtol=1e-6)
    with pytest.raises(nki.NkiValidationError, match="8 to 16384 elements") as e:
        _run(_generic_ops, x, 4)
    assert "nisa.max8" in str(e.value)
    assert e.value.loc is not None and e.value.loc[0] == __file__


@pytest.mark.parametrize("example", ["softmax", "attention"])
def test_semantics_check_mode_agrees_on_examples(example):
    from nki_examples import load_example
    rng = np.random.default_rng(7)
    mod = load_example(example)
    if example == "softmax":
        _run(mod.softmax_kernel, rng.standard_normal((256, 512)).astype(np.float32), check=True)
    else:
        args = [rng.standard_normal(s).astype(nl.bfloat16) for s in ((64, 256), (64, 256), (256, 64))]
        _run(mod.attention_kernel, *args, check=True)
    assert not [f for f in nki.last_report().findings if f.kind == "semantics check"]


def test_semantics_check_mode_on_nki_only_instructions():
    _run(_vector_family, *_inputs(), check=True)
    assert not [f for f in nki.last_report().findings if f.kind == "semantics check"]


def test_semantics_check_mode_finds_a_divergence(monkeypatch):
    """A program whose semantics disagree with what the nisa calls computed is reported (here
    the interpreter's dma_copy writes nothing)."""
    from neuron_sim import interpreter
    module_for = interpreter.module_for
    monkeypatch.setattr(interpreter, "module_for", lambda name: None if name == "dma_copy"
                        else module_for(name))
    with pytest.raises(nki.NkiValidationError, match="differs from the traced kernel"):
        _run(_vector_family, *_inputs(), check=True)


@nki.jit
def _copy_on(x, eng):
    a = nl.load(x)
    o = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.sbuf)
    nisa.tensor_copy(dst=o, src=a, engine=eng)
    out = nl.ndarray(a.shape, dtype=nl.bfloat16, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=out, src=o)
    return out


def test_engine_rules_of_a_generated_adapter_come_from_its_module():
    """nisa.tensor_copy is made from its module: the engines it lists (ENGINES), the ScalarE rule
    of NC-v2 its `build` checks, the cast its semantics does."""
    x = np.random.default_rng(5).standard_normal((128, 64)).astype(np.float32)
    for eng, unit in ((nisa.vector_engine, "VectorE"), (nisa.scalar_engine, "ScalarE"),
                      (nisa.gpsimd_engine, "GpSimd")):
        out, rep = _run(_copy_on, x, eng)
        np.testing.assert_array_equal(out, x.astype(nl.bfloat16))
        assert rep.instructions_per_engine.get(unit) == 1
    with pytest.raises(nki.NkiValidationError, match="ScalarE copies need NeuronCore-v3"):
        _run(_copy_on, x, nisa.scalar_engine, target="trn1")
    with pytest.raises(nki.NkiValidationError, match="expected one of VectorE, ScalarE, GpSimd, "
                       "found TensorE"):
        _run(_copy_on, x, nisa.tensor_engine)


@nki.jit
def _predicate_too_short(x, m):
    a, mask = nl.load(x), nl.load(m)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy_predicated(dst=o, src=a, predicate=mask[:, 0:256])
    return x


def test_predicated_copy_checks_the_predicate_shape():
    x, _, m = _inputs()
    with pytest.raises(nki.NkiValidationError, match="expected 512 elements per partition like dst, found 256"):
        _run(_predicate_too_short, x, m)


@nki.jit
def _int_ops(x, y):
    a, b = nl.load(x), nl.load(y)
    s = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=s, data1=a, data2=b, op=nl.bitwise_and)
    outs = nl.ndarray(a.shape, dtype=nl.int32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=outs, src=s)
    return outs


def test_tensor_tensor_engine_choice_and_exact_integer_bits():
    """The module's default_engine: int32 operands go to GpSimd; bit-vector operators work on the
    integer values exactly (beyond FP32's 2^24), in the trace and in the program's semantics."""
    rng = np.random.default_rng(7)
    x = rng.integers(2**25, 2**31 - 1, (128, 64), dtype=np.int32)
    y = rng.integers(2**25, 2**31 - 1, (128, 64), dtype=np.int32)
    out, rep = _run(_int_ops, x, y, check=True)
    np.testing.assert_array_equal(out, x & y)
    assert rep.instructions_per_engine.get("GpSimd") == 1


@nki.jit
def _tt_short_operand(x):
    a = nl.load(x)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=o, data1=a, data2=a[:, 0:32], op=nl.add)
    return x


def test_tensor_tensor_operands_have_one_shape():
    x = np.zeros((128, 64), np.float32)
    with pytest.raises(nki.NkiValidationError,
                       match="'data2'.*expected 64 elements per partition like data1, found 32"):
        _run(_tt_short_operand, x)


@nki.jit
def _ts_forms(x, v, i):
    a, s, n = nl.load(x), nl.load(v), nl.load(i)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=r, data=a, op0=nl.subtract, operand0=s, reverse0=True, op1=nl.divide,
                       operand1=2.0, reverse1=True)
    m = nl.ndarray(n.shape, dtype=nl.int32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=m, data=n, op0=nl.bitwise_and, operand0=0x7FFFFF0F, op1=nl.right_shift,
                       operand1=4)
    return to_hbm(r, m)


def test_tensor_scalar_reversed_operands_and_integer_bits():
    """Reversed operands (operand0 - data, then 2 / that) with a per-partition operand0, and
    bit-vector operators on int32 values beyond 2^24, in the trace and in the program."""
    rng = np.random.default_rng(11)
    x = rng.uniform(1, 2, (128, 64)).astype(np.float32)
    v = rng.uniform(3, 4, (128, 1)).astype(np.float32)
    i = rng.integers(2**25, 2**31 - 1, (128, 64), dtype=np.int32)
    (r, m), _ = _run(_ts_forms, x, v, i, check=True)
    np.testing.assert_allclose(r, 2.0 / (v - x), rtol=1e-6)
    np.testing.assert_array_equal(m, (i & 0x7FFFFF0F) >> 4)


@nki.jit
def _ts_mixed_kinds(x):
    a = nl.load(x)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=o, data=a, op0=nl.add, operand0=1.0, op1=nl.bitwise_and, operand1=3)
    return x


def test_tensor_scalar_operators_of_one_kind():
    with pytest.raises(nki.NkiValidationError, match="both bit-vector or both arithmetic"):
        _run(_ts_mixed_kinds, np.zeros((128, 8), np.float32))


@nki.jit
def _scan(x, y, v):
    a, b, s = nl.load(x), nl.load(y), nl.load(v)
    r = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=r, data0=a, data1=b, initial=s, op0=nl.multiply, op1=nl.subtract,
                            reverse1=True)
    o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=r)
    return o


def test_scan_with_per_partition_initial_and_reversed_operator():
    """r[i] = data1[i] - data0[i] * r[i-1] from a [P, 1] initial, in the trace and the program."""
    rng = np.random.default_rng(13)
    x = rng.uniform(-1, 1, (128, 16)).astype(np.float32)
    y = rng.uniform(-1, 1, (128, 16)).astype(np.float32)
    v = rng.uniform(-1, 1, (128, 1)).astype(np.float32)
    out, _ = _run(_scan, x, y, v, check=True)
    r, want = v[:, 0].copy(), np.empty_like(x)
    for i in range(x.shape[1]):
        r = y[:, i] - x[:, i] * r
        want[:, i] = r
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


@nki.jit
def _exp_sums(x, v):
    a, m = nl.load(x), nl.load(v)
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.exponential(dst=e, src=a, max_value=m, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reset_reduce)
    nisa.exponential(dst=e, src=a, max_value=m)                        # idle: the sums stay
    nisa.exponential(dst=e, src=a, reduce_res=s, reduce_cmd=nisa.reduce_cmd.reduce)
    return to_hbm(e, s)


def test_exponential_folds_row_sums_by_reduce_cmd():
    """NC-v4 VectorE exp with a [P, 1] max_value; reduce_cmd resets, leaves (idle) and adds to
    the accumulator registers, in the trace and in the program."""
    rng = np.random.default_rng(17)
    x = rng.uniform(-1, 1, (128, 32)).astype(np.float32)
    v = rng.uniform(0, 1, (128, 1)).astype(np.float32)
    (e, s), _ = _run(_exp_sums, x, v, target="trn3", check=True)
    np.testing.assert_allclose(e, np.exp(x), rtol=1e-6)
    np.testing.assert_allclose(s[:, 0], np.exp(x - v).sum(1) + np.exp(x).sum(1), rtol=1e-5)
    with pytest.raises(nki.NkiValidationError, match="VectorE exponential"):
        _run(_exp_sums, x, v, target="trn2")


@nki.jit
def _act_sums(x, v):
    a, b = nl.load(x), nl.load(v)
    y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    s = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation_reduce(dst=y, op=nl.exp, data=a, reduce_op=nl.add, reduce_res=s, bias=b)
    nisa.activation(dst=y, op=nl.square, data=a, scale=2.0, reduce_op=nl.add, reduce_res=s,
                    reduce_cmd=nisa.reduce_cmd.reduce)
    return to_hbm(y, s)


@nki.jit
def _act_immediate_bias(x):
    a = nl.load(x)
    y = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.activation(dst=y, op=nl.exp, data=a, bias=1.0)
    return x


def test_activation_accumulates_by_reduce_cmd_and_checks_nc_v2_rules():
    """activation_reduce resets ScalarE's accumulators with its row sums, a later activation adds
    to them (reduce_cmd=reduce), with a [P, 1] bias, in the trace and the program; NC-v2 takes no
    immediate bias."""
    rng = np.random.default_rng(19)
    x = rng.uniform(-1, 1, (128, 32)).astype(np.float32)
    v = rng.uniform(-1, 1, (128, 1)).astype(np.float32)
    for target in ("trn1", "trn2"):
        (y, s), _ = _run(_act_sums, x, v, target=target, check=True)
        np.testing.assert_allclose(y, (2 * x) ** 2, rtol=1e-6)
        np.testing.assert_allclose(s[:, 0], np.exp(x + v).sum(1) + ((2 * x) ** 2).sum(1), rtol=1e-5)
    _run(_act_immediate_bias, x)
    with pytest.raises(nki.NkiValidationError, match="immediate biases need NC-v3"):
        _run(_act_immediate_bias, x, target="trn1")


@nki.jit
def _iota_mask(x):
    a = nl.load(x)
    i = nl.ndarray((128, 4, 8), dtype=nl.int32, buffer=nl.sbuf)
    nisa.iota(dst=i, pattern=[[100, 4], [-1, 8]], offset=2**26, channel_multiplier=3)
    m = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=m, pattern=[[-1, 32]], channel_multiplier=1, on_true_tile=a,
                       on_false_value=-9.0, cmp_op=nl.greater_equal)
    return to_hbm(i, m)


@nki.jit
def _iota_short_pattern(x):
    i = nl.ndarray((128, 32), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=i, pattern=[[1, 16]])
    return x


def test_iota_and_affine_select_follow_the_flattened_pattern():
    """NKI's (step, count) pairs over the flattened free elements, exact int32 values beyond
    2^24, a causal mask (keep column j <= partition p); a pattern that does not cover dst fails."""
    x = np.random.default_rng(23).standard_normal((128, 32)).astype(np.float32)
    (i, m), _ = _run(_iota_mask, x, check=True)
    p, j = np.arange(128)[:, None], np.arange(32)[None, :]
    want = 2**26 + 3 * p + (100 * (j // 8) - (j % 8))
    np.testing.assert_array_equal(i.reshape(128, 32), want)
    np.testing.assert_array_equal(m, np.where(p - j >= 0, x, -9.0))
    with pytest.raises(nki.NkiValidationError, match="expected 32 elements per partition like dst, found 16"):
        _run(_iota_short_pattern, x)


@nki.jit
def _reduce_last(x):
    a = nl.load(x)
    r = nl.ndarray((128, 4), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_reduce(dst=r, op=nl.maximum, data=a.reshape((128, 4, 8)), axis=2, negate=True)
    return to_hbm(r)[0]


def test_tensor_reduce_of_trailing_axis_keeps_the_leading_ones():
    """axis=2 of [128, 4, 8] leaves 4 values per partition, in the trace and in the program's
    semantics (the module groups by dst's free size)."""
    x = np.random.default_rng(29).standard_normal((128, 32)).astype(np.float32)
    out, _ = _run(_reduce_last, x, check=True)
    np.testing.assert_array_equal(out, -x.reshape(128, 4, 8).max(axis=2))


@nki.jit
def _repeated_calls(x):
    a = nl.load(x)
    outs = []
    for operand in (0.0, -0.0, 0.0, 1.0, 1.0):      # equal calls, and zeros of either sign
        o = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=o, data=a, op0=nl.multiply, operand0=operand)
        outs.append(o)
    inplace = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_copy(dst=inplace, src=a)
    for _ in range(2):                               # in place, then the same geometry out of place
        nisa.tensor_scalar(dst=inplace, data=inplace, op0=nl.add, operand0=1.0)
    nisa.tensor_scalar(dst=outs[0], data=inplace, op0=nl.add, operand0=1.0)
    errors = 0
    for _ in range(2):                               # an illegal call fails every time
        try:
            nisa.tensor_scalar(dst=a[0:64, :], data=a, op0=nl.add, operand0=1.0)
        except nki.NkiValidationError:
            errors += 1
    assert errors == 2
    return to_hbm(*outs, inplace)


def test_generic_adapter_builds_once_per_operand_geometry(monkeypatch):
    """The adapter keeps a call's checks and build for the calls of equal operand geometry and
    arguments (a kernel's loop repeats a few thousands of times); everything else still differs:
    the sign of a zero operand, an operand that is also the destination, the values computed."""
    from neuron_sim.nki import tracer
    ts = module_for("tensor_scalar")
    builds = []                         # the adapter's, not the program build's
    real = ts.build
    monkeypatch.setattr(ts, "build", lambda *a, **k: builds.append(tracer.active()) or real(*a, **k))
    x = np.random.default_rng(2).uniform(1, 2, (128, 16)).astype(np.float32)
    (out_of_place, nz, z, one, one2, inplace), rep = _run(_repeated_calls, x, check=True)
    assert np.all(z == 0) and not np.signbit(z).any() and np.all(nz == 0) and np.signbit(nz).all()
    np.testing.assert_array_equal(one, x)
    np.testing.assert_array_equal(one2, x)
    np.testing.assert_array_equal(inplace, x + 2)
    np.testing.assert_array_equal(out_of_place, x + 3)
    # 0.0, -0.0, 1.0, in place, out of place (equal view geometry, another storage): 5 builds
    # for 8 calls (the illegal one fails its checks before the build)
    assert sum(builds) == 5
    assert len(_rows(rep, "tensor_scalar")) == 8
