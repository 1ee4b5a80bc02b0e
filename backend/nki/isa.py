"""``nki.isa`` (``nisa``): this module is ``neuron_sim.nki.isa``."""

import sys

from neuron_sim.nki import isa as _impl

sys.modules[__name__] = _impl
