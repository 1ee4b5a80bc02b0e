"""``neuronxcc.nki``: the legacy name of the ``nki`` package (see ``neuronxcc/__init__.py``).

``neuronxcc.nki.language`` and ``neuronxcc.nki.isa`` *are* ``nki.language`` and ``nki.isa`` (the
same module objects, so dtypes, buffers and tile sizes are shared); ``neuronxcc.nki.typing`` holds
the legacy annotation names.
"""

import sys

from nki import *  # noqa: F401,F403
from nki import __all__ as _nki_all
from nki import isa, language

from . import typing  # noqa: F401

sys.modules[__name__ + ".language"] = language
sys.modules[__name__ + ".isa"] = isa

__all__ = list(_nki_all) + ["typing"]
