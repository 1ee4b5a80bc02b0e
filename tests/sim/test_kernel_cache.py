"""The on-disk numba cache of neuron_sim.kernels never serves code compiled from old sources.

numba keys a cached function on its own file only; a kernel that inlines a helper from another
file would keep the helper's old logic after the helper's file changed. The package's
drop_stale_caches runs in a throw-away package laid out the same way (helper in one file,
cached caller in another) and the caller must see the helper's edit, while an edit to a file the
caller takes nothing from leaves its cache alone (recompiling the timing kernels costs ~1 min)."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import neuron_sim.kernels as kernels

HELPER = """
from numba import njit
from . import drop_stale_caches

@njit(cache=True, inline="always")
def _value():
    return {value}

drop_stale_caches(globals())
"""

CALLER = """
from numba import njit
from . import drop_stale_caches
from .helper import _value

@njit(cache=True)
def answer():
    return _value()

drop_stale_caches(globals())
"""


def _run(root: Path) -> tuple:
    """(answer(), whether it came from the on-disk cache) in a fresh process."""
    code = ("import pkg.other; from pkg.caller import answer; "
            "print(answer(), sum(answer.stats.cache_hits.values()))")
    # the package's own __pycache__, whatever the caller's NUMBA_CACHE_DIR: a shared cache folder
    # could hold another run's entries for "pkg"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_CACHE_DIR"}
    out = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True,
                         timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    value, hits = out.stdout.split()
    return int(value), int(hits) > 0


def _answer(root: Path) -> int:
    return _run(root)[0]


def _package(tmp_path) -> Path:
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    shutil.copy(kernels.__file__, pkg / "__init__.py")
    (pkg / "caller.py").write_text(textwrap.dedent(CALLER))
    (pkg / "helper.py").write_text(textwrap.dedent(HELPER.format(value=1)))
    (pkg / "other.py").write_text(textwrap.dedent(HELPER.format(value=3)))
    return pkg


def test_a_cached_caller_sees_its_inlined_helper_change(tmp_path):
    pkg = _package(tmp_path)
    assert _answer(tmp_path) == 1
    assert any((pkg / "__pycache__").glob("caller.answer-*.nbi"))  # cached on disk
    (pkg / "helper.py").write_text(textwrap.dedent(HELPER.format(value=2)))
    assert _answer(tmp_path) == 2
    assert _answer(tmp_path) == 2  # and the new code is cached again


def test_an_edit_elsewhere_in_the_package_keeps_the_callers_cache(tmp_path):
    pkg = _package(tmp_path)
    assert _run(tmp_path) == (1, False)       # compiled
    assert _run(tmp_path) == (1, True)        # then loaded from disk
    (pkg / "other.py").write_text(textwrap.dedent(HELPER.format(value=4)))
    assert _run(tmp_path) == (1, True)        # other.py is not inlined into caller.py
