"""`python -m neuron_sim.collectives`: the C32 calibration table, a trn2.48xlarge sweep and a
two-instance (EFA) sweep, with the algorithm the runtime would choose."""

from .algorithms import estimate
from .calibration import table, two_instance_table
from .fabric import fabric_for


def sweep(title, fabric, groups):
    print(title)
    print(f"{'bytes':>12} " + " ".join(f"{name:>20}" for name in groups))
    for nbytes in (4, 1 << 10, 1 << 16, 1 << 20, 1 << 22, 1 << 26, 1 << 30):
        cells = []
        for cores in groups.values():
            e = estimate("all_reduce", nbytes, cores, fabric)
            g = estimate("all_reduce", nbytes, cores, fabric, in_graph=True)
            cells.append(f"{e.seconds * 1e6:>8.1f} {g.seconds * 1e6:>7.1f} {e.algorithm[:4]:>4}")
        print(f"{nbytes:>12} " + " ".join(cells))
    print()


print(table())
print()
print(two_instance_table())
print()
print("all_reduce, microseconds: stand-alone, in a compiled graph, algorithm chosen")
sweep("trn2.48xlarge (LNC=2)", fabric_for("trn2.48xlarge"),
      {"2 ranks": [0, 1], "4 (1 chip)": [0, 1, 2, 3], "16 (1/chip)": list(range(0, 64, 4)),
       "64": list(range(64))})
sweep("2 x trn2.48xlarge over EFA", fabric_for("trn2.48xlarge", nodes=2),
      {"2 (1/instance)": [0, 64], "32 (16+16)": list(range(0, 64, 4)) + list(range(64, 128, 4)),
       "64 (32+32)": list(range(0, 64, 2)) + list(range(64, 128, 2)), "128": list(range(128))})
sweep("2 x trn1.32xlarge over EFA", fabric_for("trn1.32xlarge", nodes=2),
      {"64 (32+32)": list(range(64))})
