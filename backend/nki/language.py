"""``nki.language`` (``nl``): this module is ``neuron_sim.nki.language``."""

import sys

from neuron_sim.nki import language as _impl

sys.modules[__name__] = _impl
