"""The NeuronCore timing model: reference.py (plain Python, the specification) and simulate.py
(orchestration around the numba kernel in neuron_sim/kernels/timing.py)."""

from .simulate import simulate, timing_params

__all__ = ["simulate", "timing_params"]
