"""Ops TorchNeuron has no Neuron kernel for: they run on CPU with one warning per op.

The op-coverage table of torch-neuronx could not be retrieved, so this list is the
simulator's assumption, by reason. Everything else runs as a (simulated) Neuron op.
Ops that CUDA runs for more dtypes than their CPU kernel (integer histc, bool abs, half
avg_pool3d, ...) are computed in a dtype the CPU kernel has and converted back, as CUDA
would return them: that list and its mechanism are in csrc/aten/DtypeWidening.cpp.
"""

from . import _C

_NEURON, _CPU_FALLBACK, _NOT_IMPLEMENTED = 0, 1, 2

# Output shape depends on the data in a way static-shape kernels cannot express (nonzero
# and masked_select are kept on Neuron: printing and boolean indexing use them).
DATA_DEPENDENT_SHAPE = [
    "aten::_unique2", "aten::unique_dim", "aten::unique_consecutive",
    "aten::unique_dim_consecutive", "aten::bincount", "aten::histc", "aten::histc.out",
]
# Dense linear-algebra factorizations and FFTs have no NeuronCore kernels.
NO_NEURON_KERNEL = [
    "aten::linalg_eigh", "aten::_linalg_eigh", "aten::_linalg_eigh.eigenvalues",
    "aten::linalg_eig", "aten::_linalg_svd", "aten::_linalg_svd.U", "aten::linalg_qr",
    "aten::linalg_qr.out", "aten::linalg_cholesky_ex", "aten::linalg_cholesky_ex.L",
    "aten::_linalg_solve_ex", "aten::_linalg_solve_ex.result", "aten::linalg_lu_factor_ex",
    "aten::linalg_lu_factor_ex.out", "aten::linalg_lu", "aten::linalg_lu.out",
    "aten::_linalg_det", "aten::_linalg_det.result", "aten::_linalg_slogdet",
    "aten::_linalg_slogdet.sign", "aten::linalg_inv_ex", "aten::linalg_inv_ex.inverse",
    "aten::triangular_solve", "aten::triangular_solve.X", "aten::linalg_solve_triangular",
    "aten::linalg_solve_triangular.out", "aten::geqrf", "aten::ormqr",
    "aten::linalg_householder_product", "aten::lu_unpack", "aten::lu_unpack.out",
    "aten::linalg_lstsq", "aten::linalg_ldl_factor_ex", "aten::_fft_r2c", "aten::_fft_c2r",
    "aten::_fft_c2c", "aten::_fft_r2c.out", "aten::_fft_c2r.out", "aten::_fft_c2c.out",
]


def install():
    for name in DATA_DEPENDENT_SHAPE + NO_NEURON_KERNEL:
        _C._set_op_status(name, _CPU_FALLBACK)
