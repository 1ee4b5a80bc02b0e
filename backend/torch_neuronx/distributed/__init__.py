"""torch.distributed on simulated NeuronCores: backend="neuron" (see docs/distributed.md).

Importing torch_neuronx registers it; `dist.init_process_group(backend="neuron")` then gives
each rank one logical NeuronCore, moves collective data with gloo on host memory and charges
each collective's simulated NeuronLink time to the stream."""

from .backend import (CollectiveRecord, clear_collective_log, collective_log, rank_placement,
                      register)
from .errors import (CollectiveDeviceError, CollectiveMismatchError, DistributedSetupError,
                     NeuronDistributedError, PeerLostError)

register()

__all__ = ["CollectiveDeviceError", "CollectiveMismatchError", "CollectiveRecord",
           "DistributedSetupError", "NeuronDistributedError", "PeerLostError",
           "clear_collective_log", "collective_log", "rank_placement"]
