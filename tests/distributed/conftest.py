"""The tests here import their launcher (dist_launch.py) by name; with pytest's importlib import
mode the folder is not on sys.path by itself."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
