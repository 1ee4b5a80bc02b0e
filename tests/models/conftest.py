"""The model tests import hf_tiny.py from this folder (pytest's importlib mode does not put
test folders on sys.path)."""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
