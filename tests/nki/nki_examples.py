"""The example kernels (examples/nki) as ``nki_examples.<name>`` modules, so their generic
file names (add.py, softmax.py) never shadow anything else on sys.path."""

import importlib.util
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def load_example(name):
    key = f"nki_examples.{name}"
    if key in sys.modules:
        return sys.modules[key]
    path = os.path.join(ROOT, "examples", "nki", f"{name}.py")
    spec = importlib.util.spec_from_file_location(key, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[key] = mod
    spec.loader.exec_module(mod)
    return mod
