"""Loop-invariant instructions run once on Trn1, as the compiler that built its published kernels
hoisted them (nki/reuse.py, assumption `reuse_loop_invariant`): an instruction that computes in
every iteration what its previous iteration computed is timed once, its readers read the first
result, and the values stay those of the kernel as written. On Trn2 a kernel runs as written and
the report names the line to hoist."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl

N = 8           # loop iterations


def _run(kernel, *args, target="trn1"):
    out = nki.simulate(kernel, platform_target=target, check_semantics=True)(*args)
    return out, nki.last_report()


def _count(rep, name):
    return sum(e.name == name for e in rep.programs[0].emits)


def _store(t):
    o = nl.ndarray(t.shape, dtype=t.dtype, buffer=nl.shared_hbm)
    nisa.dma_copy(dst=o, src=t)
    return o


def _scaled_sum(a, b, w, i, acc, hoisted=None):
    """acc += (a * b) * w[i]; a * b computed here unless given."""
    d = hoisted
    if d is None:
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.multiply)
    wi = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
    nisa.dma_copy(dst=wi, src=w[:, i:i + 1])
    e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_scalar(dst=e, data=d, op0=nl.multiply, operand0=wi)
    nisa.tensor_tensor(dst=acc, data1=acc, data2=e, op=nl.add)


def _start(x, y):
    a, b = nl.load(x), nl.load(y)
    acc = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    return a, b, acc


def _summed(loop):
    @nki.jit
    def kernel(x, y, w):
        a, b, acc = _start(x, y)
        for i in loop(N):
            _scaled_sum(a, b, w, i, acc)
        return _store(acc)
    return kernel


_in_loop = _summed(nl.affine_range)
# a sequential_range keeps its body as written ("much more conservative loop-level
# optimizations" than affine_range, the NKI API says)
_sequential = _summed(nl.sequential_range)


@nki.jit
def _before_loop(x, y, w):
    a, b, acc = _start(x, y)
    d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.multiply)
    for i in nl.affine_range(N):
        _scaled_sum(a, b, w, i, acc, hoisted=d)
    return _store(acc)


def _inputs():
    rng = np.random.default_rng(3)
    x, y = (rng.uniform(-1, 1, (128, 512)).astype(np.float32) for _ in range(2))
    w = rng.uniform(-1, 1, (128, N)).astype(np.float32)
    return x, y, w


def _expected(x, y, w):
    acc = np.zeros_like(x)
    for i in range(N):
        acc += (x * y) * w[:, i:i + 1]
    return acc


def test_an_invariant_instruction_in_a_loop_runs_once():
    x, y, w = _inputs()
    out, rep = _run(_in_loop, x, y, w)
    np.testing.assert_allclose(out, _expected(x, y, w), rtol=1e-5, atol=1e-6)
    # a * b once, the N accumulations: N + 1 tensor_tensor rows instead of 2N
    assert _count(rep, "tensor_tensor") == N + 1
    found = [f for f in rep.findings if f.kind == "loop-invariant"]
    assert len(found) == 1 and f"{N - 1} later executions reuse its result" in found[0].message
    assert found[0].loc[0].endswith("test_loop_invariant.py")
    # timed as the kernel with the product computed before the loop
    hoisted, ref = _run(_before_loop, x, y, w)
    np.testing.assert_allclose(hoisted, out, rtol=1e-6)
    assert _count(ref, "tensor_tensor") == N + 1
    assert abs(rep.total_ns - ref.total_ns) <= 0.02 * ref.total_ns, (rep.total_ns, ref.total_ns)
    # the NKI compiler of Trn2 keeps the kernel's instructions; the report says what to hoist
    out, rep = _run(_in_loop, x, y, w, target="trn2")
    np.testing.assert_allclose(out, _expected(x, y, w), rtol=1e-5, atol=1e-6)
    assert _count(rep, "tensor_tensor") == 2 * N
    found = [f for f in rep.findings if f.kind == "loop-invariant"]
    assert len(found) == 1 and found[0].message.endswith("compute it once before the loop")
    assert f"{N - 1} later executions are timed" in found[0].message


@nki.jit
def _input_changes(x, y, w):
    a, b, acc = _start(x, y)
    for i in nl.affine_range(N):
        _scaled_sum(a, b, w, i, acc)
        nisa.tensor_scalar(dst=a, data=a, op0=nl.add, operand0=1.0)     # a differs next time
    return _store(acc)


@nki.jit
def _inner_index(x, y, w):
    """v3 of the Mamba tutorial: the product depends on the inner loop's column block, so the
    outer loop's iterations repeat it, but not the previous execution of the line."""
    a, b, acc = _start(x, y)
    for i in nl.affine_range(2):
        for j in nl.affine_range(4):
            cols = slice(j * 128, (j + 1) * 128)
            d = nl.ndarray((128, 128), dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_tensor(dst=d, data1=a[:, cols], data2=b[:, cols], op=nl.multiply)
            nisa.tensor_tensor(dst=acc[:, cols], data1=acc[:, cols], data2=d, op=nl.add)
    return _store(acc)


@nki.jit
def _result_written_again(x, y, w):
    a, b, acc = _start(x, y)
    outs = []
    for i in nl.affine_range(2):
        d = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_tensor(dst=d, data1=a, data2=b, op=nl.multiply)
        nisa.tensor_scalar(dst=d, data=d, op0=nl.add, operand0=float(i))  # holds another value
        outs.append(_store(d))
    return tuple(outs)


@nki.jit
def _same_load(x, y, w):
    a, b, acc = _start(x, y)
    for i in nl.affine_range(N):
        t = nl.load(x)          # a load of the same bytes is a DMA each time
        nisa.tensor_tensor(dst=acc, data1=acc, data2=t, op=nl.add)
    return _store(acc)


def test_what_depends_on_the_iteration_runs_every_time():
    x, y, w = _inputs()
    out, rep = _run(_sequential, x, y, w)
    np.testing.assert_allclose(out, _expected(x, y, w), rtol=1e-5, atol=1e-6)
    assert _count(rep, "tensor_tensor") == 2 * N

    out, rep = _run(_input_changes, x, y, w)
    acc, a = np.zeros_like(x), x.copy()
    for i in range(N):
        acc += (a * y) * w[:, i:i + 1]
        a += 1
    np.testing.assert_allclose(out, acc, rtol=1e-5, atol=1e-5)
    assert _count(rep, "tensor_tensor") == 2 * N

    out, rep = _run(_inner_index, x, y, w)
    np.testing.assert_allclose(out, 2 * x * y, rtol=1e-6)
    assert _count(rep, "tensor_tensor") == 16

    outs, rep = _run(_result_written_again, x, y, w)
    np.testing.assert_allclose(outs[0], x * y, rtol=1e-6)
    np.testing.assert_allclose(outs[1], x * y + 1, rtol=1e-6)
    assert _count(rep, "tensor_tensor") == 2
    assert not [f for f in rep.findings if f.kind == "loop-invariant"]

    out, rep = _run(_same_load, x, y, w)
    np.testing.assert_allclose(out, N * x, rtol=1e-6)
    assert _count(rep, "tensor_tensor") == N


# instructions whose ISA module declares PURE = True, each with its tile's shape and NumPy value
_PURE = {
    "reciprocal": ((128, 512), lambda d, a, b: nisa.reciprocal(dst=d, data=a),
                   lambda x, y: 1 / x),
    "select": ((128, 512), lambda d, a, b: nisa.select(dst=d, predicate=a, on_true=b, on_false=a),
               lambda x, y: np.where(x != 0, y, x)),
    "max8": ((128, 8), lambda d, a, b: nisa.max8(dst=d, src=a),
             lambda x, y: -np.sort(-x, axis=1)[:, :8]),
    # an explicit idle reduce_cmd (the enum, not its value) touches no accumulator either
    "activation": ((128, 512), lambda d, a, b: nisa.activation(
        dst=d, op=nl.exp, data=a, reduce_cmd=nisa.reduce_cmd.idle), lambda x, y: np.exp(x)),
}


def _pure_in_loop(name):
    shape, body, _ = _PURE[name]

    @nki.jit
    def kernel(x, y, w):
        a, b = nl.load(x), nl.load(y)
        acc = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.memset(dst=acc, value=0.0)
        for i in nl.affine_range(N):
            d = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
            body(d, a, b)
            wi = nl.ndarray((128, 1), dtype=nl.float32, buffer=nl.sbuf)
            nisa.dma_copy(dst=wi, src=w[:, i:i + 1])
            e = nl.ndarray(shape, dtype=nl.float32, buffer=nl.sbuf)
            nisa.tensor_scalar(dst=e, data=d, op0=nl.multiply, operand0=wi)
            nisa.tensor_tensor(dst=acc, data1=acc, data2=e, op=nl.add)
        return _store(acc)
    return kernel


def test_the_instructions_a_module_declares_pure_are_hoisted():
    """max8, reciprocal, select and an activation with reduce_cmd idle read nothing but their
    operands (PURE in their modules): on Trn1 one execution serves the loop, on Trn2 each runs, and the values are the kernel's."""
    x, y, w = _inputs()
    for name, (_, _, value) in _PURE.items():
        want = sum(value(x, y) * w[:, i:i + 1] for i in range(N))
        for target, runs in (("trn1", 1), ("trn2", N)):
            out, rep = _run(_pure_in_loop(name), x, y, w, target=target)
            np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
            assert _count(rep, name) == runs, (name, target)
