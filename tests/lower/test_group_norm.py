"""Group norm forward (norm.group_norm): rows of [N * groups, C / groups * HW], the weight and
bias of each row's group held per partition. Every shape lowers to a program (the rule once
read its [N, groups] statistics and [C] weight as a layer norm's over the last dim, raised
ProgramError and left the op to the roofline estimate), its values are torch's, and its time
grows with the batch."""

import numpy as np
import pytest

from neuron_sim.lower import OpSpec, ProgramCache, TensorSpec, lower_op
from neuron_sim.lower.semantics import check_lowered

torch = pytest.importorskip("torch")

# (shape, groups): one and several groups a sample, a group a channel; rows fewer than the
# partitions, whole rounds of the groups over them, and not (3 and 24 groups: the weights of a
# block staged on one partition); rows of a few columns (several a partition) and long rows
SHAPES = [((8, 16, 32), 4), ((8, 16, 8, 4), 1), ((8, 16, 8, 4), 16), ((2, 32, 16, 16), 32),
          ((16, 256, 14, 14), 32), ((4, 512, 7, 7), 32), ((200, 12, 3), 3), ((48, 24, 5), 24),
          ((2, 6, 5, 7), 2), ((2, 64, 32, 32), 32), ((1, 64, 128, 128), 32)]


def group_norm(shape, groups, dtype="float32", affine=True):
    N, C, hw = shape[0], shape[1], int(np.prod(shape[2:]))
    p = TensorSpec((C,), dtype) if affine else None
    stats = TensorSpec((N, groups), dtype)
    return OpSpec("aten::native_group_norm", (TensorSpec(shape, dtype), p, p, N, C, hw, groups,
                                              1e-5), (TensorSpec(shape, dtype), stats, stats))


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("affine", [True, False])
@pytest.mark.parametrize("shape, groups", SHAPES)
def test_every_shape_is_a_program_not_an_estimate(shape, groups, affine, dtype, chip):
    t = ProgramCache().lower_op(group_norm(shape, groups, dtype, affine), chip)
    assert not t.estimated and t.total_ns > 0 and t.instructions > 0, t.note


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("weight, bias", [(True, True), (True, False), (False, True)])
@pytest.mark.parametrize("shape, groups", [s for s in SHAPES if np.prod(s[0][1:]) // s[1]
                                           <= 4096])
def test_values_match_torch(shape, groups, weight, bias, dtype):
    N, C, hw = shape[0], shape[1], int(np.prod(shape[2:]))
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 1).astype(np.float32)
    w, b = (rng.standard_normal(C).astype(np.float32) for _ in range(2))
    args = [TensorSpec(shape, dtype), TensorSpec((C,), dtype) if weight else None,
            TensorSpec((C,), dtype) if bias else None, N, C, hw, groups, 1e-5]
    op = OpSpec("aten::native_group_norm", tuple(args),
                (TensorSpec(shape, dtype), TensorSpec((N, groups), dtype),
                 TensorSpec((N, groups), dtype)))
    tdt = getattr(torch, dtype)
    arrays = [a for a, used in ((x, True), (w, weight), (b, bias)) if used]
    inputs = [torch.from_numpy(a).to(tdt).float() for a in arrays]     # (rounded to dtype)
    params = iter(inputs[1:])
    want = torch.native_group_norm(inputs[0], next(params) if weight else None,
                                   next(params) if bias else None, N, C, hw, groups, 1e-5)
    check_lowered(op, [t.numpy() for t in inputs], [t.numpy() for t in want])


@pytest.mark.parametrize("chip", ["trn2", "trn3"])
@pytest.mark.parametrize("shape, groups", [((8, 64, 32, 32), 32), ((16, 256, 14, 14), 32),
                                           ((32, 32, 8, 8), 8)])
def test_time_grows_with_the_batch(shape, groups, chip):
    times = [lower_op(group_norm((k * shape[0],) + shape[1:], groups), chip).total_ns
             for k in (1, 2, 4)]
    for small, big in zip(times, times[1:]):
        assert 1.3 * small < big < 2.1 * small, times
