"""Instruction numerics: float32 inside the engines, rounding to the destination dtype."""

import numpy as np
import pytest

import nki
import nki.isa as nisa
import nki.language as nl
from nki_helpers import to_hbm


def run(kernel, *args, target="trn2", **kw):
    return nki.simulate(kernel, platform_target=target)(*args, **kw)


@nki.jit
def _unary(x, op, dst_dtype):
    t = nl.load(x)
    out = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.sbuf)
    nisa.activation(dst=out, op=op, data=t)
    res = nl.ndarray(x.shape, dtype=dst_dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=res, src=out)
    return res


@pytest.mark.parametrize("op,ref", [(nl.exp, np.exp), (nl.tanh, np.tanh), (nl.relu, lambda x: np.maximum(x, 0)),
                                    (nl.sigmoid, lambda x: 1 / (1 + np.exp(-x))), (nl.square, np.square)])
def test_activation_functions(op, ref):
    x = np.linspace(-3, 3, 128 * 64, dtype=np.float32).reshape(128, 64)
    np.testing.assert_allclose(run(_unary, x, op, nl.float32), ref(x), rtol=1e-5, atol=1e-6)


def test_bf16_output_rounds_to_nearest_even():
    x = np.array([[1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8]], dtype=np.float32)   # ties to even: 1.0, 1.015625
    out = run(_unary, x, nl.copy, nl.bfloat16)
    assert out.dtype == nl.bfloat16
    np.testing.assert_array_equal(out.astype(np.float32), [[1.0, 1.0 + 2 ** -6]])


def test_precise_fp_off_keeps_float32(monkeypatch):
    monkeypatch.setenv("NKI_PRECISE_FP", "0")
    x = np.array([[1.0 + 2 ** -8]], dtype=np.float32)
    out = run(_unary, x, nl.copy, nl.bfloat16)
    assert out.astype(np.float32)[0, 0] == np.float32(1.0 + 2 ** -8)


@nki.jit
def _ops(x, y):
    a, b = nl.load(x), nl.load(y)
    outs = []
    for f in (lambda: a + b, lambda: a * 2.0, lambda: nl.maximum(a, b), lambda: nl.sum(a, axis=1),
              lambda: nl.max(a, axis=1), lambda: nl.softmax(a), lambda: nl.transpose(a),
              lambda: nl.matmul(a, b, transpose_x=True)):
        r = f()
        o = nl.ndarray(r.shape, dtype=nl.float32, buffer=nl.shared_hbm)
        nl.store(o, r)
        outs.append(o)
    return tuple(outs)


def test_language_ops():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((128, 128)).astype(np.float32)
    y = rng.standard_normal((128, 128)).astype(np.float32)
    add, dbl, mx, s, m, sm, tr, mm = run(_ops, x, y)
    np.testing.assert_allclose(add, x + y, rtol=1e-6)
    np.testing.assert_allclose(dbl, 2 * x, rtol=1e-6)
    np.testing.assert_allclose(mx, np.maximum(x, y))
    np.testing.assert_allclose(s[:, 0], x.sum(1), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(m[:, 0], x.max(1))
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(sm, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(tr, x.T)
    np.testing.assert_allclose(mm, x.T @ y, rtol=1e-4, atol=1e-4)


@nki.jit
def _stats(x):
    t = nl.load(x)
    st = nl.ndarray((128, 6), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_stats(dst=st, data=t)
    mv = nl.ndarray((128, 2), dtype=nl.float32, buffer=nl.sbuf)
    nisa.bn_aggr(dst=mv, data=st)
    io = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.iota(dst=io, pattern=[[1, 8]], offset=3, channel_multiplier=10)
    sel = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.affine_select(dst=sel, pattern=[[-1, 8]], channel_multiplier=1, on_true_tile=io,
                       on_false_value=-1.0, cmp_op=nl.greater_equal)
    scan = nl.ndarray((128, 8), dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor_scan(dst=scan, data0=io, data1=io, initial=0.0, op0=nl.multiply, op1=nl.add)
    return to_hbm(mv, io, sel, scan)


def test_bn_stats_iota_affine_select_scan():
    x = np.random.default_rng(0).standard_normal((128, 300)).astype(np.float32)
    mv, io, sel, scan = run(_stats, x)
    np.testing.assert_allclose(mv[:, 0], x.mean(1), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(mv[:, 1], x.var(1), rtol=1e-4)
    expect = 3 + 10 * np.arange(128)[:, None] + np.arange(8)[None, :]
    np.testing.assert_array_equal(io, expect)
    p, f = np.arange(128)[:, None], np.arange(8)[None, :]
    np.testing.assert_array_equal(sel, np.where(p - f >= 0, expect, -1.0))
    ref = np.zeros_like(io)
    prev = np.zeros(128)
    for i in range(8):
        prev = io[:, i] * prev + io[:, i]
        ref[:, i] = prev
    np.testing.assert_allclose(scan, ref, rtol=1e-6)


@nki.jit
def _legacy_style(lhsT, rhs):
    """The pre-0.3 tutorial style: index grids, nl.load/nl.matmul/nl.copy/nl.store."""
    result = nl.ndarray((64, 512), dtype=lhsT.dtype, buffer=nl.shared_hbm)
    i_lhsT_p, i_lhsT_f = nl.mgrid[0:128, 0:64]
    i_rhs_p, i_rhs_f = nl.mgrid[0:128, 0:512]
    i_out_p, i_out_f = nl.mgrid[0:64, 0:512]
    lhs_tile = nl.load(lhsT[i_lhsT_p, i_lhsT_f])
    rhs_tile = nl.load(rhs[i_rhs_p, i_rhs_f])
    result_psum = nl.matmul(lhs_tile, rhs_tile, transpose_x=True)
    result_sbuf = nl.copy(result_psum, dtype=result.dtype)
    nl.store(result[i_out_p, i_out_f], value=result_sbuf)
    return result


def test_legacy_language_style_kernel():
    rng = np.random.default_rng(3)
    lhsT = rng.standard_normal((128, 64)).astype(np.float32)
    rhs = rng.standard_normal((128, 512)).astype(np.float32)
    np.testing.assert_allclose(run(_legacy_style, lhsT, rhs), lhsT.T @ rhs, rtol=1e-4, atol=1e-4)


@nki.jit
def _rmw(x):
    t = nl.load(x)
    t[:, 0:4] = 7.0                 # memset through __setitem__
    t += 1.0                        # in-place tensor_scalar
    o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    o[...] = t                      # dma through __setitem__
    return o


def test_setitem_and_inplace_sugar():
    x = np.zeros((128, 8), np.float32)
    out = run(_rmw, x)
    np.testing.assert_array_equal(out[:, :4], 8.0)
    np.testing.assert_array_equal(out[:, 4:], 1.0)


@nki.jit
def _where(x):
    t = nl.load(x)
    pos = nl.greater(t, 0.0)
    w = nl.where(pos, t, -1.0)
    o = nl.ndarray(x.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nl.store(o, w)
    return o


def test_where_uses_select():
    x = np.random.default_rng(4).standard_normal((128, 64)).astype(np.float32)
    np.testing.assert_array_equal(run(_where, x), np.where(x > 0, x, -1.0))
    assert "select" in nki.last_report().programs[0].opnames


@nki.jit
def _dma_t(x):
    t = nl.ndarray((x.shape[-1],) + x.shape[1:-1] + (x.shape[0],), dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x)
    o = nl.ndarray(t.shape, dtype=x.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


@pytest.mark.parametrize("shape,axes", [((64, 128), (1, 0)), ((64, 4, 32), (2, 1, 0)),
                                        ((32, 2, 3, 16), (3, 1, 2, 0))])
def test_dma_transpose(shape, axes):
    """Every rank NKI documents, through the module's semantics at the call and in the program
    (nki.simulate's semantics check)."""
    x = np.arange(np.prod(shape), dtype=np.float32).reshape(shape).astype(nl.bfloat16)
    out = nki.simulate(_dma_t, platform_target="trn2", check_semantics=True)(x)
    np.testing.assert_array_equal(out, np.transpose(x, axes))
    with pytest.raises(nki.NkiValidationError, match="NeuronCore-v3 or newer"):
        run(_dma_t, x, target="trn1")


@nki.jit
def _dma_t_axes(x, axes):
    t = nl.ndarray(x.shape[::-1], dtype=x.dtype, buffer=nl.sbuf)
    nisa.dma_transpose(dst=t, src=x, axes=axes)   # here:axes
    return x


def test_dma_transpose_axes_must_be_documented():
    x = np.zeros((64, 4, 32), nl.bfloat16)
    with pytest.raises(nki.NkiValidationError, match=r"axes=\(1, 2, 0\) for a 3-D src"):
        run(_dma_t_axes, x, (1, 2, 0))


@pytest.mark.parametrize("example", ["softmax", "matmul_tutorial", "attention"])
def test_core_interpreter_reproduces_traced_numerics(example):
    """Executing the built ISA program with the core's instruction semantics (neuron_sim's
    interpreter) gives what the traced kernel returned: the program is the kernel."""
    from neuron_sim.interpreter import State
    from neuron_sim.isa import module_for
    from nki_examples import load_example
    mod = load_example(example)
    rng = np.random.default_rng(7)
    if example == "softmax":
        args = (rng.standard_normal((256, 512)).astype(np.float32),)
        kern = mod.softmax_kernel
    elif example == "attention":
        args = tuple(rng.standard_normal(s).astype(nl.bfloat16) for s in ((64, 256), (64, 256), (256, 64)))
        kern = mod.attention_kernel
    else:
        args = (rng.standard_normal((256, 128)).astype(nl.bfloat16), rng.standard_normal((256, 512)).astype(nl.bfloat16))
        kern = mod.matmul_tiled
    out = nki.simulate(kern, platform_target="trn2")(*args)
    prog = nki.last_report().programs[0]
    hbm = {}
    for e in prog.emits:
        for ap in e.reads + e.writes:
            if ap.tensor.memory == 0:
                hbm[ap.tensor.name] = ap.tensor
    state = State()
    for i, a in enumerate(args):
        state.load(hbm[f"arg{i}"], a)
    unknown = set()
    for e in prog.emits:
        m = module_for(e.name)
        if m is None:
            unknown.add(e.name)
            continue
        m.semantics(state, e)
    assert not unknown - {"load_stationary"}, unknown
    outs = [t for n, t in hbm.items() if not n.startswith("arg")]
    got = state.buffer(outs[-1]).astype(np.float32)
    np.testing.assert_allclose(got, out.astype(np.float32), rtol=2e-2, atol=2e-2)


@nki.jit
def _fp8_double_row(a, b):
    # a: [128, 2, 64] FP8 stationary, b: [128, 2, 256] FP8 moving -> [64, 256], contraction 256
    at = nl.load(a)
    bt = nl.load(b)
    ps = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.psum)
    nisa.nc_matmul(dst=ps, stationary=at, moving=bt, perf_mode=nisa.matmul_perf_mode.double_row)
    o = nl.ndarray((64, 256), dtype=nl.float32, buffer=nl.shared_hbm)
    nl.store(o, ps)
    return o


def test_fp8_double_row_matmul():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((128, 2, 64)).astype(nl.float8_e4m3)
    b = rng.standard_normal((128, 2, 256)).astype(nl.float8_e4m3)
    out = run(_fp8_double_row, a, b)
    a2 = np.concatenate([a[:, 0], a[:, 1]]).astype(np.float32)
    b2 = np.concatenate([b[:, 0], b[:, 1]]).astype(np.float32)
    np.testing.assert_allclose(out, a2.T @ b2, rtol=1e-5, atol=1e-4)
    with pytest.raises(nki.NkiValidationError, match="double_row needs NeuronCore-v3"):
        run(_fp8_double_row, a, b, target="trn1")
