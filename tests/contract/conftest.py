"""The contract tests launch ranks with tests/distributed's launcher (importlib import mode
does not put that folder on sys.path by itself)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "distributed"))
