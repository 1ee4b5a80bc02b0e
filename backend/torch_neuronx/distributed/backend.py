"""backend="neuron": the process group torch.distributed creates for 'neuron' tensors.

gloo moves the bytes between processes on host memory; the C++ `_NeuronBackend`
(backend/csrc/distributed) hands it zero-copy CPU aliases of the device tensors and, before each
operation, calls `Collectives.__call__` here, which

1. checks the call locally (every tensor on this rank's neuron device, one dtype, contiguous),
2. compares it across the group (op, shapes, dtypes; one small gloo all-gather that also carries
   each rank's simulated clock) so a mismatch raises on every rank instead of hanging, and
3. charges the simulated time to the current stream in issue order: the wait for the last rank
   to arrive ("neuron::collective_wait") and the collective itself ("neuron::<op>", from
   neuron_sim.collectives on the simulated instance's NeuronLink fabric).
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from datetime import timedelta

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import AllgatherOptions, ProcessGroupGloo

from neuron_sim.collectives import estimate, fabric_for

from .. import _C, settings
from . import placement as _placement
from .errors import (CollectiveDeviceError, CollectiveMismatchError, DistributedSetupError,
                     PeerLostError)

# Per op: what neuron_sim.collectives calls it, which buffer is its "full" size, and which
# tensors ("in"/"out"; None: none) must match across ranks. gather/scatter hold the full list on
# the root only: every rank counts its own part x p.
_OPS = {
    "all_reduce": ("all_reduce", "in", "in"), "all_reduce_coalesced": ("all_reduce", "in", "in"),
    "broadcast": ("broadcast", "in", "in"), "reduce": ("reduce", "in", "in"),
    "all_gather": ("all_gather", "out", "in"),
    "all_gather_into_tensor": ("all_gather", "out", "in"),
    "all_gather_into_tensor_coalesced": ("all_gather", "out", "in"),
    "reduce_scatter": ("reduce_scatter", "in", "out"),
    "reduce_scatter_tensor": ("reduce_scatter", "in", "in"),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter", "in", "in"),
    "gather": ("all_gather", "in*p", "in"), "scatter": ("all_gather", "out*p", "out"),
    "all_to_all": ("all_to_all", "in", None), "all_to_all_single": ("all_to_all", "in", None),
    "send": ("send_recv", "in", None), "recv": ("send_recv", "out", None),
    "barrier": ("barrier", None, None),
}
_OP_CODES = {name: i for i, name in enumerate(sorted(_OPS))}
_DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int32,
           torch.int16, torch.int8, torch.uint8, torch.bool, torch.complex64,
           torch.float8_e4m3fn, torch.float8_e5m2]
# One rank's fingerprint of a call, exchanged before the data moves: what must match across the
# group, then the rank's simulated clock, then the first compared tensor's dims (-1 padded).
_FIELDS = ("op", "reduce_op", "peer", "count", "dtype", "ndim", "numel")
_CLOCK = len(_FIELDS)
_MAX_DIMS = 6
_FINGERPRINT = _CLOCK + 1 + _MAX_DIMS


@dataclass
class CollectiveRecord:
    """One collective as this rank issued it (torch_neuronx.distributed.collective_log())."""
    op: str
    model_op: str
    nbytes: int            # the full buffer (see neuron_sim.collectives.estimate)
    group: tuple           # global ranks of the group
    algorithm: str
    ns: int
    wait_ns: int


_LOG: list = []
_STATE = {"placement": None, "cores": {}}   # cores: global rank -> global logical core id


def _describe(t) -> str:
    return f"{str(t.dtype).replace('torch.', '')}{list(t.shape)} on {t.device}"


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


# Collective checks that failed: kept until exit (see Collectives._check_group).
_FAILED_CHECKS: list = []


class Collectives:
    """The Python half of one neuron process group (see the module docstring)."""

    def __init__(self, host, group_rank: int, group_size: int, global_ranks, fabric=None,
                 cores=None, device=None, check=None):
        """Defaults: this rank's torchrun placement (`_STATE`); spmd.py gives its own."""
        p = _STATE["placement"]
        self.host, self.rank, self.size = host, group_rank, group_size
        self.global_ranks = tuple(global_ranks)
        self.fabric = fabric or fabric_for(p.instance, p.lnc)
        self.cores = cores or [_STATE["cores"][r] for r in self.global_ranks]
        self.device = p.local_rank if device is None else device
        self.algorithm = settings.get("NEURON_SIM_CC_ALGORITHM")
        self.check = settings.get("NEURON_SIM_CHECK_COLLECTIVES") if check is None else check

    # ---- called by _NeuronBackend before every operation -----------------------------------
    def __call__(self, op, inputs, outputs, reduce_op, peer):
        self._check_local(op, inputs, outputs)
        clocks = None
        if self.check and op not in ("send", "recv"):
            clocks = self._check_group(op, inputs, outputs, reduce_op, peer)
        self._charge(op, inputs, outputs, peer, clocks)

    def _who(self) -> str:
        return f"rank {self.global_ranks[self.rank]}"

    def _check_local(self, op, inputs, outputs):
        owned = self.device
        dtype = None
        for kind, tensors in (("input", inputs), ("output", outputs)):
            for i, t in enumerate(tensors):
                where = f"{op}: {self._who()}, {kind} tensor {i} ({_describe(t)})"
                if t.device.type != "neuron":
                    raise CollectiveDeviceError(
                        f"{where} is not on a neuron device. The neuron process group moves "
                        f"neuron tensors only; move it with .to('neuron') first (or use a gloo "
                        f"group for CPU tensors).")
                if t.device.index != owned:
                    raise CollectiveDeviceError(
                        f"{where} is on another rank's device: this process owns "
                        f"neuron:{owned}. Put the tensors of a collective on "
                        f"torch.device('neuron', LOCAL_RANK).")
                if not t.is_contiguous():
                    raise CollectiveDeviceError(
                        f"{where} is not contiguous; call .contiguous() before the collective.")
                if dtype is None:
                    dtype = t.dtype
                elif t.dtype != dtype and op not in ("all_to_all", "all_to_all_single"):
                    raise CollectiveDeviceError(
                        f"{where} has dtype {t.dtype} but the first tensor has {dtype}; all "
                        f"tensors of one collective share a dtype.")

    def _fingerprint(self, op, inputs, outputs, reduce_op, peer, clock):
        side = _OPS[op][2]
        compared = list(inputs if side == "in" else outputs if side == "out" else [])
        first = compared[0] if compared else None
        dims = list(first.shape)[:_MAX_DIMS] if first is not None else []
        dtype = (_DTYPES.index(first.dtype) if first is not None and first.dtype in _DTYPES
                 else -1)
        numel = sum(t.numel() for t in compared)
        row = [_OP_CODES[op], reduce_op, peer, len(compared), dtype,
               first.dim() if first is not None else -1, numel]
        return row + [clock] + dims + [-1] * (_MAX_DIMS - len(dims))

    def _check_group(self, op, inputs, outputs, reduce_op, peer):
        stream = torch.neuron.current_stream(self.device)
        clock = int(_C._stream_clock_ns(self.device, stream.stream_id))
        mine = torch.tensor(self._fingerprint(op, inputs, outputs, reduce_op, peer, clock),
                            dtype=torch.int64)
        everyone = torch.empty(self.size * _FINGERPRINT, dtype=torch.int64)
        work = self.host._allgather_base(everyone, mine, AllgatherOptions())
        # gloo's worker thread drops its reference to the work after waking us. Were that the
        # last one, it would free these tensors there, taking the GIL: during interpreter exit
        # that ends the thread inside a noexcept destructor, and the process aborts (SIGABRT
        # after a collective timeout). Holding the last work (and a failed one for good) makes
        # their release happen on this thread.
        self._last_check = (work, everyone, mine)
        try:
            work.wait()
        except RuntimeError as e:
            _FAILED_CHECKS.append(self._last_check)
            raise PeerLostError(
                f"{op}: {self._who()} could not reach the other ranks of its group "
                f"{list(self.global_ranks)} ({str(e).splitlines()[0]}). Another rank probably "
                "failed or stopped calling collectives; see its error.") from None
        rows = everyone.view(self.size, _FINGERPRINT).tolist()
        names = {v: k for k, v in _OP_CODES.items()}
        def call(row):   # everything but the clock
            return row[:_CLOCK] + row[_CLOCK + 1:]

        for r, row in enumerate(rows):   # against the group's first rank, so all ranks agree
            if call(row) == call(rows[0]):
                continue
            a, b = self._render(rows[0], names), self._render(row, names)
            ra, rb = self.global_ranks[0], self.global_ranks[r]
            raise CollectiveMismatchError(
                f"collective mismatch in group {list(self.global_ranks)}: rank {ra} called "
                f"{a} but rank {rb} called {b}. Every rank must call the same collectives in "
                f"the same order, with the same shapes and dtypes (reported by "
                f"{self._who()}).")
        return [row[_CLOCK] for row in rows]

    @staticmethod
    def _render(row, names) -> str:
        op, reduce_op, peer, count, dtype, ndim, numel = row[:_CLOCK]
        text = names[op]
        if count > 0:
            dims = row[_CLOCK + 1:_CLOCK + 1 + max(ndim, 0)]
            dt = str(_DTYPES[dtype]).replace("torch.", "") if dtype >= 0 else "?"
            text += f" on {count} tensor(s), the first {dt}{dims}, {numel} elements in all"
        if reduce_op >= 0:
            text += f", reduce op {dist.ReduceOp.RedOpType(reduce_op).name}"
        if peer >= 0:
            text += f", root {peer}"
        return text

    def _charge(self, op, inputs, outputs, peer, clocks):
        model_op, side, _compared = _OPS[op]
        nbytes = _nbytes(inputs if side.startswith("in") else outputs) if side else 0
        if side and side.endswith("*p"):
            nbytes *= self.size
        cores = self.cores
        if model_op == "send_recv":     # no peer: the next rank's core
            cores = [cores[self.rank], cores[peer if peer >= 0 else (self.rank + 1) % self.size]]
        algorithm = None if self.algorithm == "auto" else self.algorithm
        # Inside a compiled graph (its ops run uncharged: the graph is charged as one program)
        # the collective is one of the graph's instructions: no stand-alone runtime launch
        # (neuron_sim.collectives.estimate).
        charging = _C._set_charging(False)
        _C._set_charging(charging)
        in_graph = not charging
        try:
            est = estimate(model_op, nbytes, cores, self.fabric, algorithm, in_graph=in_graph)
        except ValueError:   # e.g. rdh on a group that is not a power of two
            est = estimate(model_op, nbytes, cores, self.fabric, None, in_graph=in_graph)
        wait = 0
        if clocks is not None:
            wait = max(clocks) - clocks[self.rank]
            if wait > 0:
                _C._enqueue_timed("neuron::collective_wait", self.device, int(wait))
        _C._enqueue_timed(f"neuron::{op}", self.device, est.ns)
        _LOG.append(CollectiveRecord(op, model_op, nbytes, self.global_ranks, est.algorithm,
                                     est.ns, int(wait)))


# ---- creating the process group -------------------------------------------------------------

def _handshake(store, p, timeout: timedelta) -> dict:
    """Every rank posts its placement (or why it has none) and reads everyone's, so a setup
    error on one rank stops all of them with the same message instead of a hang."""
    store.set(f"neuron_init/{p['rank']}", json.dumps(p))
    deadline = time.monotonic() + timeout.total_seconds()
    seen = {}
    while True:
        for r in range(p["world_size"]):
            if r not in seen and store.check([f"neuron_init/{r}"]):
                seen[r] = json.loads(store.get(f"neuron_init/{r}"))
        for r, q in sorted(seen.items()):
            if q.get("error"):
                raise DistributedSetupError(q["error"] if r == p["rank"] else
                                            f"rank {r} failed to set up: {q['error']}")
            if q["world_size"] != p["world_size"]:
                raise DistributedSetupError(
                    f"mismatched world size: rank {p['rank']} was started with world_size="
                    f"{p['world_size']} but rank {r} with world_size={q['world_size']}. Start "
                    "every rank with the same WORLD_SIZE (torchrun sets it from --nnodes x "
                    "--nproc_per_node).")
        if len(seen) == p["world_size"]:
            break
        if time.monotonic() > deadline:
            missing = sorted(set(range(p["world_size"])) - set(seen))
            raise DistributedSetupError(
                f"rank {p['rank']}: ranks {missing} did not join init_process_group(backend="
                f"'neuron') within {timeout.total_seconds():.0f} s (world_size="
                f"{p['world_size']}). Start as many processes as world_size, or pass a "
                "smaller world_size.")
        time.sleep(0.02)
    cores = {}
    for r, q in sorted(seen.items()):
        key = (q["node"], q["core"])
        if key in cores:
            raise DistributedSetupError(
                f"ranks {cores[key]} and {r} both own NeuronCore {q['core']} of node "
                f"{q['node']}: NEURON_RT_VISIBLE_CORES gives every process the same core. "
                "Unset it (each rank then takes core LOCAL_RANK) or give each rank its own.")
        cores[key] = r
    return {r: q["node"] * q["cores_per_node"] + q["core"] for r, q in seen.items()}


def _host_backend(store, rank, size, timeout):
    addr = os.environ.get("MASTER_ADDR", "")
    if not os.environ.get("GLOO_SOCKET_IFNAME") and addr in ("127.0.0.1", "localhost"):
        opts = ProcessGroupGloo._Options()
        opts._timeout = timeout
        opts._devices = [ProcessGroupGloo.create_device(hostname="127.0.0.1")]
        return ProcessGroupGloo(store, rank, size, opts)
    return ProcessGroupGloo(store, rank, size, timeout)


def _setup_default_group(store, rank, size, timeout):
    error = None
    info = {"rank": rank, "world_size": size}
    if _C._memory_placed():
        error = (f"rank {rank}: the Neuron runtime should not be initialized before "
                 "init_process_group: this process used a 'neuron' device (created a tensor or "
                 "moved a module there) before dist.init_process_group(backend='neuron'). Call "
                 "init_process_group first; each rank then owns neuron:LOCAL_RANK.")
    else:
        try:
            p = _placement.from_environment(rank, size)
            info.update(asdict(p))
        except DistributedSetupError as e:
            error = str(e)
    info["error"] = error
    cores = _handshake(store, info, timeout)
    _placement.apply(p)
    _STATE["placement"] = p
    _STATE["cores"] = cores


def create(opts, pg_options=None):
    """The creator registered with dist.Backend.register_backend (extended API)."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    timeout = opts.timeout
    global_ranks = list(opts.global_ranks_in_group) or list(range(size))
    if _STATE["placement"] is None:
        _setup_default_group(store, rank, size, timeout)
    host = _host_backend(store, rank, size, timeout)
    _C._init_distributed()
    hook = Collectives(host, rank, size, global_ranks)
    return _C._NeuronBackend(host, hook)


def register(name: str = "neuron", creator=create) -> None:
    """Makes `backend=name` create a neuron process group with `creator` (once)."""
    if name.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(name, creator, extended_api=True, devices=["neuron"])


def collective_log() -> list:
    """Every collective this process issued, in order (CollectiveRecord)."""
    return list(_LOG)


def clear_collective_log() -> None:
    _LOG.clear()


def rank_placement():
    """This rank's Placement (None before init_process_group(backend='neuron'))."""
    return _STATE["placement"]
