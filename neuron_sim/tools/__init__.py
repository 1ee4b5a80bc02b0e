"""Command-line tools of the simulated instance, laid out as AWS's Neuron system tools.

    neuron-ls    the instance's devices (cores, memory, links) and the processes using them
    neuron-top   memory and simulated device time of the processes using the devices, refreshed

Both read `procs.py`'s registry: each process that uses the `neuron` device publishes what it
holds there (torch_neuronx does it), so the tools need neither torch nor the process itself.
"""

import os
import sys


def console_script(main):
    """`main` as a console script: a closed pipe (`| head`) ends the output quietly, as for ls."""
    def entry() -> int:
        try:
            return main()
        except BrokenPipeError:
            sys.stdout = open(os.devnull, "w")
            return 0
    return entry
