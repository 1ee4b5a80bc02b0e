"""nisa.nc_transpose is pure (its result depends on its operand only), so nki/reuse.py treats a
transpose of the same tile in every affine_range iteration like any other loop-invariant
instruction: run once on Trn1, named as the line to hoist on Trn2."""

import numpy as np

import nki
import nki.isa as nisa
import nki.language as nl
from nki_helpers import to_hbm

N = 4           # loop iterations


@nki.jit
def _transposed_in_loop(x, w):
    a = nl.load(x)
    acc = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
    nisa.memset(dst=acc, value=0.0)
    for i in nl.affine_range(N):
        t = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.nc_transpose(dst=t, data=a)        # the same tile each time: VectorE, 32 x 32
        wi = nl.ndarray((32, 1), dtype=nl.float32, buffer=nl.sbuf)
        nisa.dma_copy(dst=wi, src=w[:, i:i + 1])
        e = nl.ndarray(a.shape, dtype=nl.float32, buffer=nl.sbuf)
        nisa.tensor_scalar(dst=e, data=t, op0=nl.multiply, operand0=wi)
        nisa.tensor_tensor(dst=acc, data1=acc, data2=e, op=nl.add)
    return to_hbm(acc)[0]


def test_an_invariant_transpose_in_a_loop_runs_once_on_trn1():
    rng = np.random.default_rng(5)
    x = rng.uniform(-1, 1, (32, 32)).astype(np.float32)
    w = rng.uniform(-1, 1, (32, N)).astype(np.float32)
    expected = x.T * w.sum(axis=1, keepdims=True)
    for target, transposes in (("trn1", 1), ("trn2", N)):
        out = nki.simulate(_transposed_in_loop, platform_target=target,
                           check_semantics=True)(x, w)
        rep = nki.last_report()
        np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)
        assert sum(e.name == "nc_transpose" for e in rep.programs[0].emits) == transposes
        found = [f for f in rep.findings if f.kind == "loop-invariant"]
        assert len(found) == 1 and found[0].message.startswith("nisa.nc_transpose"), found
