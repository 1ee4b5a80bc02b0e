"""Private @njit kernels (flat: arrays and scalars in and out). Each has a plain-Python
specification it is tested against (timing: neuron_sim/timing/reference.py)."""
