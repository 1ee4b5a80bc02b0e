"""``nki``: the Neuron Kernel Interface, NKI 0.3 surface, running on neuron-sim.

``import nki; import nki.language as nl; import nki.isa as nisa`` work as with AWS's package.
``@nki.jit`` kernels, ``nki.execute(kernel, *arrays)`` and ``nki.simulate(kernel)(*arrays)`` run
on the simulator: NumPy (or CPU torch) in and out, plus the simulated time in
``nki.last_report()``. The implementation lives in ``neuron_sim.nki`` (torch-free); this package
is the import surface: ``nki.language`` and ``nki.isa`` *are* ``neuron_sim.nki.language`` and
``neuron_sim.nki.isa`` (the same module objects).
"""

import sys

from neuron_sim.nki import *  # noqa: F401,F403
from neuron_sim.nki import __all__ as _impl_all
from neuron_sim.nki import isa, language
from neuron_sim.nki.tracer import register_package_dir as _register

_register(__file__)
sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa

from . import _torch  # noqa: E402  (no torch import: it is imported when a torch tensor arrives)

_torch.install()

__version__ = "0.3.0+neuronsim"
__all__ = list(_impl_all) + ["isa", "language"]
