"""python -m neuron_sim.calibrate: simulate every single-core published workload and print
target, published, simulated and error, regenerated from the code."""

from . import format_table, run

if __name__ == "__main__":
    print(format_table(run()))
