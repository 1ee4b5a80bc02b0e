"""Progress display for long host work: lowering a cold model's programs, calibration, benchmarks.

A bar goes to stderr through tqdm when NEURON_SIM_PROGRESS allows it (auto: stderr is a
terminal) and only once the work has lasted `delay_s`, so short work prints nothing and logs and
tests stay clean. Without tqdm installed nothing is shown. The bar reads the host's wall clock
for its rate; no simulated time depends on it."""

from __future__ import annotations

import sys

from .config import get

DELAY_S = 1.0


def enabled() -> bool:
    mode = get("NEURON_SIM_PROGRESS")
    if mode == "off":
        return False
    return mode == "on" or sys.stderr.isatty()


def _tqdm():
    try:
        from tqdm import tqdm
    except ImportError:     # optional: the simulator depends on NumPy and numba only
        return None
    return tqdm


class Progress:
    """A bar opened on the first tick (work that never ticks, such as a drain whose programs are
    all cached, costs one attribute test) and closed by `close()` or the `with` block."""

    def __init__(self, desc: str, unit: str = "it", total: int | None = None,
                 delay_s: float | None = None):
        self.desc, self.unit, self.total, self.delay_s = desc, unit, total, delay_s
        self._bar = None
        self._off = False

    def tick(self, n: int = 1, note: str | None = None) -> None:
        if self._bar is None:
            if self._off:
                return
            tqdm = _tqdm() if enabled() else None
            if tqdm is None:
                self._off = True
                return
            self._bar = tqdm(desc=f"neuron-sim: {self.desc}", total=self.total, unit=self.unit,
                             delay=DELAY_S if self.delay_s is None else self.delay_s,
                             leave=False, file=sys.stderr,
                             dynamic_ncols=True)
        if note is not None:       # a stage (no work counted) is shown at once
            self._bar.set_postfix_str(note[:40], refresh=not n)
        self._bar.update(n)

    def stage(self, note: str) -> None:
        """Names the work now running (shown at once, nothing counted); `tick()` when it ends."""
        self.tick(0, note)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
        self._bar = None
        self._off = False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def progress(iterable, desc: str, unit: str = "it", total: int | None = None):
    """Iterate `iterable` with a bar (see Progress)."""
    if total is None and hasattr(iterable, "__len__"):
        total = len(iterable)
    with Progress(desc, unit, total) as bar:
        for item in iterable:
            yield item
            bar.tick()
