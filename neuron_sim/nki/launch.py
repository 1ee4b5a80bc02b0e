"""Running a kernel: ``jit``, ``simulate``, LNC/SPMD launches and the legacy ``benchmark``.

One call traces the kernel once per program instance (``kernel[2](...)`` gives two), plans
on-chip memory, builds one ISA program per NeuronCore and simulates it. The outputs come back
as NumPy arrays; the simulated time, engine utilisation and findings are in ``KernelReport``
(``sim.report`` / ``nki.last_report()``). Torch tensors are handled by a launch hook that the
``nki`` package installs (backend/nki/_torch.py): this package never imports torch. The
environment settings a launch reads are declared, with their help, in settings.py.
"""

from __future__ import annotations

import copy
import functools
import gc
import inspect
import math
import os
import threading
import time
import warnings
from types import SimpleNamespace

import numpy as np

from ..program.builder import paused_gc
from ..progress import Progress
from . import _blas, dtypes, reuse, settings
from .errors import NkiLaunchError, NkiUninitializedReadError, NkiUninitializedReadWarning
from .memory import plan_memory
from .report import KernelReport
from .target import get_target
from .tensor import NkiTensor
from .tracer import KernelTrace, Meetings, SharedHbm, active, tracing

_LAST_REPORT: list = [None]

# Front ends that own device tensors (the torch backend) register a hook here:
# hook(kernel, args, kwargs, options) -> result, or NotImplemented to let the plain path run.
# neuron_sim never imports them; they import us.
LAUNCH_HOOKS: list = []
# hook(kernel, args, kwargs) -> result or NotImplemented, consulted first by Kernel.__call__ (before
# anything a graph tracer such as torch.compile could not follow): the torch front end turns a
# kernel call it meets while tracing into one graph node.
CALL_HOOKS: list = []
# uid -> kernel as decorated (grid (1,)): graph nodes name a kernel by this number.
KERNELS: dict = {}


def last_report() -> KernelReport | None:
    """The report of the most recent kernel run in this process."""
    return _LAST_REPORT[0]


# ---- the kernel object -------------------------------------------------------------------------
class Kernel:
    """An ``@nki.jit`` kernel. ``kernel[lnc](...)`` or ``kernel[grid...](...)`` sets the launch."""

    def __init__(self, func, platform_target=None, mode="auto", grid=(1,), **options):
        self.func = func
        self.platform_target = platform_target
        self.mode = mode
        self.grid = tuple(grid)
        self.options = options
        self.uid = len(KERNELS)
        KERNELS[self.uid] = self
        functools.update_wrapper(self, func)
        # `sbuf`, `psum`, `hbm` are keywords inside NKI kernels (the quickstart's `sbuf.view(...)`).
        from . import language
        g = getattr(func, "__globals__", None)
        if g is not None:
            for kw in ("sbuf", "psum", "hbm", "shared_hbm", "private_hbm"):
                g.setdefault(kw, getattr(language, kw))

    def __getitem__(self, grid):
        launch = copy.copy(self)        # the same kernel (uid) and options, the new grid
        launch.grid = tuple(int(g) for g in (grid if isinstance(grid, tuple) else (grid,)))
        return launch

    def __call__(self, *args, **kwargs):
        for hook in CALL_HOOKS:
            res = hook(self, args, kwargs)
            if res is not NotImplemented:
                return res
        if active():
            # a kernel called from inside another kernel is inlined, as NKI specialisation does
            return self.func(*args, **kwargs)
        # With no Neuron device the only way to run a kernel is the simulator; NKI_SIMULATOR=1
        # says so explicitly. Either way the call runs here.
        return run(self, args, kwargs)

    def __repr__(self):
        return f"<nki kernel {self.func.__name__} grid={self.grid}>"


def jit(func=None, mode="auto", platform_target=None, **kwargs):
    """``@nki.jit``, ``@nki.jit()``, ``@nki.jit(platform_target="trn2")``."""
    if func is None:
        return lambda f: jit(f, mode=mode, platform_target=platform_target, **kwargs)
    if isinstance(func, Kernel):
        return func
    return Kernel(func, platform_target=platform_target, mode=mode, **kwargs)


class Simulated:
    """What ``nki.simulate(kernel)`` returns: call it like the kernel; ``.report`` after (and the
    legacy ``.benchmark_result``). With `trace_file` (legacy ``nki.profile``), each call writes
    the instruction timeline there as Chrome/Perfetto JSON."""

    def __init__(self, kernel, trace_file=None, **options):
        self.kernel = kernel if isinstance(kernel, Kernel) else jit(kernel)
        self.trace_file = trace_file
        self.options = options
        self.report = None

    def __getitem__(self, grid):
        launch = copy.copy(self)        # the same options, the new grid, not run yet
        launch.kernel, launch.report = self.kernel[grid], None
        return launch

    def __call__(self, *args, **kwargs):
        out = run(self.kernel, args, kwargs, **self.options)
        rep = self.report = last_report()
        if self.trace_file and rep is not None and rep.timing and rep.timing[0] is not None:
            os.makedirs(os.path.dirname(self.trace_file), exist_ok=True)
            rep.write_chrome_trace(self.trace_file)
        return out

    @property
    def benchmark_result(self):
        """The latency of the last call (None before one), as legacy ``nki.benchmark`` gives it:
        simulated time is deterministic, so every percentile is the simulated latency (µs)."""
        rep = self.report
        if rep is None:
            return None
        us = rep.total_ns / 1e3 if rep.total_ns is not None else float("nan")
        return SimpleNamespace(nc_latency=SimpleNamespace(get_latency_percentile=lambda p: us),
                               report=rep)


def simulate(kernel, **options):
    """``nki.simulate(kernel)(*args)``: run on the simulator, NumPy in and out.

    Options (ours): ``numerics=False`` traces shapes only (timing of kernels too large to compute),
    ``timing=False`` skips the timing model, ``on_uninitialized="error"|"warn"|"ignore"``,
    ``platform_target=`` overrides the kernel's target, ``check_semantics=True`` runs the built
    program through the ISA modules' NumPy semantics and raises if it differs (debug mode;
    unset: the NEURON_SIM_CHECK_SEMANTICS setting, so every launch can be checked).
    """
    return Simulated(kernel, **_run_options("simulate", options))


# ---- one launch --------------------------------------------------------------------------------
def run(kernel: Kernel, args, kwargs, numerics=True, timing=True, on_uninitialized=None,
        platform_target=None, lnc=None, check_semantics=None):
    opts = dict(numerics=numerics, timing=timing, on_uninitialized=on_uninitialized,
                platform_target=platform_target, lnc=lnc, check_semantics=check_semantics)
    for hook in LAUNCH_HOOKS:
        res = hook(kernel, args, kwargs, opts)
        if res is not NotImplemented:
            return res
    t0 = time.perf_counter()
    _blas.single_thread()
    target = get_target(platform_target or kernel.platform_target)
    precise = settings.get("NKI_PRECISE_FP")
    if check_semantics is None:
        check_semantics = settings.get("NEURON_SIM_CHECK_SEMANTICS")
    mode = on_uninitialized or settings.get("NKI_SIM_ON_UNINITIALIZED")
    grid = kernel.grid
    lnc = lnc if lnc is not None else (grid[0] if len(grid) == 1 and grid[0] in (1, 2) else 1)
    env_lnc = settings.get("NEURON_LOGICAL_NC_CONFIG")
    if env_lnc and len(grid) == 1 and grid[0] in (1, 2) and int(env_lnc) != grid[0]:
        raise NkiLaunchError(f"kernel launched with LNC={grid[0]} (kernel[{grid[0]}]) but "
                             f"NEURON_LOGICAL_NC_CONFIG={env_lnc}; they must match")
    if lnc > 1 and not target.has_lnc2:
        raise NkiLaunchError(f"LNC={lnc} needs Trn2 or Trn3; {target.name} has no logical "
                             "NeuronCores (launch kernel[1] or pick platform_target='trn2')")

    # long simulations show a bar after DELAY_S (NEURON_SIM_PROGRESS): instructions traced,
    # then the stage (planning memory, building and timing the programs). The garbage collector
    # waits until the launch is done (see paused_gc): its traces and plans are many live objects
    with Progress(f"NKI {kernel.func.__name__}", unit=" instructions") as bar, paused_gc():
        out = _launch(kernel, target, lnc, precise, mode, args, kwargs, numerics, timing,
                      check_semantics, t0, bar)
        _promote_young_objects()
    return out


_RUN_OPTIONS = tuple(inspect.signature(run).parameters)[3:]    # simulate's options


def _promote_young_objects() -> None:
    """Hand what the launch made to the collector's oldest generation without a collection.

    With the collector paused, every object the launch made is still counted as young: the first
    allocation after it resumes started a collection that walked all of them (the report's
    programs, ~0.6M objects for matmul_fully_optimized: 1.4 s of a 5 s launch on a loaded
    machine), only to find them alive. gc.freeze() + gc.unfreeze() moves every young object of
    the process to the oldest generation as is (two list splices) and resets the young count;
    they are examined at the next full collection instead. Garbage cycles made meanwhile are
    freed then, not at the next young collection; the launch's own traces are not among them
    (`_release`). A process that froze objects itself (gc.freeze before forking workers) keeps
    them frozen: then nothing is done."""
    if gc.get_freeze_count():
        return
    gc.freeze()
    gc.unfreeze()


def _release(traces) -> None:
    """Break the trace <-> storage cycles once the launch is done, so a dropped report and
    trace are freed by reference counting, not left to the collector."""
    for tr in traces:
        for st in tr.storages:
            st.trace = None


def _launch(kernel, target, lnc, precise, mode, args, kwargs, numerics, timing, check_semantics,
            t0, bar):
    """`run` past its checks: trace every program, plan memory, build and time. `args` and
    `kwargs` hold no torch tensors (the launch hook converted them)."""
    grid = kernel.grid
    n_prog = math.prod(grid)
    inputs = {}          # id(user array) -> Storage, shared by all program instances (shared HBM)
    barrier = Meetings(n_prog) if n_prog > 1 else None
    shared = SharedHbm() if n_prog > 1 else None
    traces, calls = [], []
    for pid_flat in range(n_prog):
        pid = tuple(int(x) for x in np.unravel_index(pid_flat, grid))
        tr = KernelTrace(target=target, numerics=numerics, precise_fp=precise,
                         on_uninitialized=mode, program_id=pid, grid=grid,
                         kernel_name=kernel.func.__name__, barrier=barrier, shared=shared,
                         progress=bar)
        with tracing(tr):
            a = [_wrap_input(tr, x, inputs, i, lnc) for i, x in enumerate(args)]
            kw = {k: _wrap_input(tr, v, inputs, k, lnc) for k, v in kwargs.items()}
        traces.append(tr)
        calls.append((a, kw))
    from . import language
    language._sync_tile_size(target)
    if n_prog == 1:
        with tracing(traces[0]):
            results = [kernel.func(*calls[0][0], **calls[0][1])]
    else:
        results = _run_programs(kernel, traces, calls)
    t_trace = time.perf_counter() - t0

    bar.tick(0, note="planning memory")
    for tr in traces:
        reuse.apply(tr)
    plans = [plan_memory(tr) for tr in traces]
    t_plan = time.perf_counter() - t0 - t_trace

    timing_result = None
    if timing:
        from .program import simulate_programs
        bar.tick(0, note="building and timing")
        timing_result = simulate_programs(traces, plans, lnc=lnc, check=check_semantics)
    t_total = time.perf_counter() - t0

    report = KernelReport.build(kernel.func.__name__, target, traces, plans, timing_result,
                                wall_s={"trace": t_trace, "plan": t_plan, "total": t_total})
    _LAST_REPORT[0] = report

    _copy_back_inputs(inputs)
    out = _collect(results, traces)
    _release(traces)
    return out


def _run_programs(kernel, traces, calls):
    """The programs of one launch, each in its own thread (nisa.core_barrier synchronises them)."""
    results, errors = [None] * len(traces), [None] * len(traces)

    def work(k):
        try:
            with tracing(traces[k]):
                results[k] = kernel.func(*calls[k][0], **calls[k][1])
            if traces[k].barrier is not None:
                traces[k].barrier.end(traces[k])     # no meeting can happen without it now
        except BaseException as e:          # re-raised in the caller's thread below
            errors[k] = e
            if traces[k].barrier is not None:
                traces[k].barrier.abort()    # release the other program if it waits at a barrier

    threads = [threading.Thread(target=work, args=(k,), name=f"nki-program-{k}")
               for k in range(len(traces))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    raised = [e for e in errors if e is not None]
    if raised:      # a broken barrier only when it is all that went wrong
        raise next((e for e in raised if not isinstance(e, threading.BrokenBarrierError)),
                   raised[0])
    return results


# Trainium has no 64-bit types: such inputs are computed in 32 bits
_NARROWED = {np.dtype(np.float64): dtypes.float32, np.dtype(np.int64): dtypes.int32}


def _wrap_input(tr, x, inputs, key, lnc):
    if not isinstance(x, np.ndarray):
        return x
    if id(x) not in inputs:
        dt = dtypes.normalize(x.dtype)
        dt = _NARROWED.get(dt, dt)
        data = None
        if tr.numerics:
            data = np.ascontiguousarray(x, dtype=dtypes.storage_dtype(dt, tr.precise_fp)).copy()
        name = key if isinstance(key, str) else f"arg{key}"
        st = tr.new_storage("shared_hbm" if lnc > 1 else "hbm", x.shape, dt, name=name,
                            role="input", data=data)
        inputs[id(x)] = (st, x)
    return NkiTensor(inputs[id(x)][0])


def _copy_back_inputs(inputs):
    """Kernels may write their HBM inputs in place (legacy kernels take their outputs as
    arguments); the caller's arrays see every element the kernel wrote [SimDoc]. (An input
    starts fully written, so its data is the caller's where the kernel did not write; an input
    no instruction wrote is not compared at all.)"""
    for st, user in inputs.values():
        if st.data is None or not user.flags.writeable or st.write_count == 0:
            continue
        vals = st.data.astype(user.dtype, copy=False).reshape(user.shape)
        try:
            if not np.array_equal(vals, user):
                np.copyto(user, vals, casting="unsafe")
        except (TypeError, ValueError):
            pass


def _collect(results, traces):
    """Turn the returned tensors into arrays; merge the SPMD instances' writes to shared outputs.
    An output with elements no program wrote (NaN-filled) is reported per
    NKI_SIM_ON_UNINITIALIZED."""
    def conv(t, others, index):
        if not isinstance(t, NkiTensor):
            return t
        st = t.storage
        if st.data is None:
            return np.zeros(t.shape, dtype=dtypes.storage_dtype(st.dtype, True))
        arr = np.array(t.np(), copy=True)
        mask = np.array(t.written_mask(), copy=True)
        for o in others:
            if (isinstance(o, NkiTensor) and o.storage is not st and o.shape == t.shape
                    and o.storage.data is not None):
                m = o.written_mask()
                arr[m & ~mask] = o.np()[m & ~mask]
                mask |= m
        _check_output_written(t, mask, index, traces[0])
        return arr

    first = results[0]
    rest = results[1:]
    if isinstance(first, (tuple, list)):
        return type(first)(conv(v, [r[i] for r in rest if isinstance(r, (tuple, list))], i)
                           for i, v in enumerate(first))
    return conv(first, rest, None)


def _check_output_written(t: NkiTensor, mask, index, trace) -> None:
    mode = trace.on_uninitialized
    if mode == "ignore" or mask.all():
        return
    missing = int(mask.size - np.count_nonzero(mask))
    which = "output" if index is None else f"output {index}"
    what = ("was never written" if missing == mask.size
            else f"has {missing} of {mask.size} elements that were never written")
    msg = (f"kernel {trace.kernel_name!r}: returned {which} {t.storage.describe()} {what} (the "
           f"simulator filled them with NaN). Write every element before returning it "
           f"(nl.store / nisa.dma_copy), or set NKI_SIM_ON_UNINITIALIZED=warn or ignore.")
    if mode == "error":
        raise NkiUninitializedReadError(msg)
    warnings.warn(NkiUninitializedReadWarning(msg), stacklevel=4)


_PLAIN_KERNELS: dict = {}     # plain function -> its Kernel, so repeated execute calls reuse one


def execute(kernel, *args, **kwargs):
    """``nki.execute(kernel, *args, **kwargs)``: specialise the kernel for these arguments and run
    it once, NumPy in and out, returning what the kernel returns. ``kernel`` is an ``@nki.jit``
    kernel (``kernel[2]`` for LNC=2) or a plain function. On hardware this builds and runs a
    NEFF; here it runs on the simulator, and ``nki.last_report()`` holds the simulated time."""
    if not isinstance(kernel, Kernel):
        if not callable(kernel):
            raise TypeError(f"nki.execute: kernel must be an @nki.jit kernel or a function, got "
                            f"{type(kernel).__name__}")
        kernel = _PLAIN_KERNELS.get(kernel) or _PLAIN_KERNELS.setdefault(kernel, jit(kernel))
    return run(kernel, args, kwargs)


# ---- legacy helpers ----------------------------------------------------------------------------
# what the legacy helpers document only for hardware (the NEFF and NTFF files written, compiler
# flags): taken, with nothing to do on the simulator
_ARTIFACTS = ("save_neff_name", "save_trace_name", "additional_compile_opt")


def _run_options(helper: str, options: dict, ignored=()) -> dict:
    """`options` for run(), without the `ignored` ones; NkiLaunchError for one `helper` does not
    take."""
    known = _RUN_OPTIONS + tuple(ignored)
    for k in options:
        if k not in known:
            raise NkiLaunchError(f"nki.{helper}: unknown option {k!r}; it takes "
                                 f"{', '.join(known)}")
    return {k: v for k, v in options.items() if k not in ignored}


def _legacy(helper, kernel, options, ignored=(), **simulated):
    """`Simulated(kernel, ...)` with the `options` run() takes, or the decorator that makes it."""
    make = functools.partial(Simulated, **simulated, **_run_options(helper, options, ignored))
    return make if kernel is None else make(kernel)


def benchmark(kernel=None, warmup=5, iters=10, **options):
    """Legacy ``nki.benchmark``: simulates once. Simulated time is deterministic: each of the
    `iters` runs after the `warmup` ones would take it, so it is every latency percentile."""
    return _legacy("benchmark", kernel, options, _ARTIFACTS)


def simulate_kernel(kernel, *args, **kwargs):
    """Legacy ``nki.simulate_kernel(kernel, *args)``."""
    return Simulated(kernel)(*args, **kwargs)


def profile(func=None, working_directory=None, save_neff_name=None, save_trace_name="profile.json",
            additional_compile_opt=None, overwrite=False, profile_nth=1, **options):
    """Legacy ``nki.profile``: simulates and writes the instruction timeline as Chrome/Perfetto
    JSON (``<working_directory>/<save_trace_name>.json``) instead of an NTFF."""
    name = os.path.splitext(save_trace_name or "profile")[0] + ".json"
    return _legacy("profile", func, options,
                   trace_file=os.path.join(working_directory or ".", name))


def baremetal(kernel=None, **options):
    """Legacy ``nki.baremetal``: NumPy in and out, run on the simulator (options: `simulate`'s,
    and the NEFF/NTFF file names and compiler flags it documents for hardware, unused here)."""
    return _legacy("baremetal", kernel, options, _ARTIFACTS)
