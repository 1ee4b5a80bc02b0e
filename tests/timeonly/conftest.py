"""Makes tests/shared (device_time.py) importable; tests/ itself stays off sys.path, where its
folders would shadow packages of the same name (nki)."""

import os
import sys

SHARED = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "shared")
if SHARED not in sys.path:
    sys.path.insert(0, SHARED)
