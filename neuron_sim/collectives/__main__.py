"""`python -m neuron_sim.collectives`: the C32 calibration table and a trn2.48xlarge sweep."""

from .algorithms import estimate
from .calibration import table
from .fabric import fabric_for

print(table())
print()
fabric = fabric_for("trn2.48xlarge")
print("trn2.48xlarge all_reduce (LNC=2), microseconds, algorithm chosen")
print(f"{'bytes':>12} " + " ".join(f"{p:>14}" for p in ("2 ranks", "4 (1 chip)", "16 (1/chip)", "64")))
for nbytes in (1 << 10, 1 << 16, 1 << 22, 1 << 26, 1 << 30):
    cells = []
    for cores in ([0, 1], [0, 1, 2, 3], list(range(0, 64, 4)), list(range(64))):
        e = estimate("all_reduce", nbytes, cores, fabric)
        cells.append(f"{e.seconds * 1e6:>9.1f} {e.algorithm:>4}")
    print(f"{nbytes:>12} " + " ".join(cells))
