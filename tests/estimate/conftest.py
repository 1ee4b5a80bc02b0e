"""Makes this folder's helper (estimate_helpers.py) importable under pytest's
--import-mode=importlib."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
