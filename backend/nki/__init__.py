"""``nki``: the Neuron Kernel Interface, NKI 0.3 surface, running on neuron-sim.

``import nki; import nki.language as nl; import nki.isa as nisa`` work as with AWS's package.
``@nki.jit`` kernels, ``nki.execute(kernel, *arrays)`` and ``nki.simulate(kernel)(*arrays)`` run
on the simulator: NumPy (or CPU torch) in and out, plus the simulated time in
``nki.last_report()``. The implementation lives in ``neuron_sim.nki`` (torch-free); this package
is the import surface.
"""

from neuron_sim.nki import (Kernel, KernelReport, NkiCapacityError, NkiError, NkiLaunchError,
                            NkiOverlapError, NkiPartitionError, NkiUninitializedReadError,
                            NkiUninitializedReadWarning, NkiValidationError, baremetal, benchmark,
                            execute, jit, last_report, profile, simulate, simulate_kernel)
from neuron_sim.nki.tracer import register_package_dir as _register

_register(__file__)

from . import isa, language  # noqa: E402  (after the package dir is registered)
from . import _torch  # noqa: E402  (no torch import: it is imported when a torch tensor arrives)

_torch.install()

__version__ = "0.3.0+neuronsim"
__all__ = ["Kernel", "KernelReport", "NkiCapacityError", "NkiError", "NkiLaunchError", "NkiOverlapError",
           "NkiPartitionError", "NkiUninitializedReadError", "NkiUninitializedReadWarning",
           "NkiValidationError", "baremetal", "benchmark", "execute", "profile", "isa", "jit", "language", "last_report", "simulate",
           "simulate_kernel"]
