"""``neuronxcc`` on neuron-sim: only the legacy NKI import path of the Neuron compiler package.

Most published NKI kernels start with ``from neuronxcc import nki`` or
``import neuronxcc.nki.language as nl``; here those names are the ``nki`` package (NKI 0.3 on the
simulator), so such kernels run unchanged. The compiler itself (``neuronx-cc``) is not simulated:
``torch.compile(backend="neuron")`` is the way to compile here.
"""

from . import nki  # noqa: F401

__version__ = "2.0.0+neuronsim"
