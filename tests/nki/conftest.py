"""Make ``nki`` (backend/) and ``neuron_sim`` importable when the package is not installed yet,
and this folder's helper (nki_examples.py) importable under pytest's --import-mode=importlib."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
for p in (ROOT, os.path.join(ROOT, "backend"), os.path.dirname(os.path.abspath(__file__))):
    if p not in sys.path:
        sys.path.insert(0, p)
