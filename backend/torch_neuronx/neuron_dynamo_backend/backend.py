"""`torch.compile(model, backend="neuron")`: Dynamo graph -> AOT Autograd (separate forward and
backward ATen graphs, no Inductor) -> one simulated program per graph, charged once per launch
(`_launcher`), with TorchNeuron's rules (static shapes, `mode`, the compile-failure policy, CPU
inputs). How a compiled graph runs and the rules: README.md.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import sys
import time

import torch
import torch._dynamo.config as dynamo_config
from functorch.compile import make_boxed_func
from torch._dynamo.backends.common import aot_autograd

from neuron_sim.explorer.summary import COMPILED_GRAPH_PREFIX

from .. import _C, _visible
from ..private_files import create_private, private_dir, user_temp_dir
from ..settings import get as setting
from . import cache, metrics
from .errors import CPUInputError, DynamicShapeError, NEFFCompilationError
from .graph_cost import GraphCost, Target, cost_graph, cost_model_version
from .options import CompileOptions

logger = logging.getLogger("torch_neuronx.neuron_dynamo_backend")

# Simulated compile time (named assumptions). neuronx-cc takes seconds for a small graph and
# "minutes for a large model" on the first call of a signature (compile-howto); model it as a
# fixed start-up cost plus a cost per ATen op. A cache hit only loads the entry.
SIM_COMPILE_BASE_S = 2.0
SIM_COMPILE_PER_OP_S = 0.01
SIM_CACHE_LOAD_S = 0.02

_model_name = {"value": None}


def set_model_name(name: str | None) -> None:
    """Names the graphs compiled from now on (metrics, launch names in traces)."""
    _model_name["value"] = name


def get_model_name() -> str:
    return _model_name["value"] or "model"


# ---- static shapes ------------------------------------------------------------------------

def _force_static_shapes() -> None:
    # TorchNeuron forces dynamic=False: with Dynamo's automatic dynamic shapes a second input
    # shape would produce a symbolic graph; with it off, each new shape recompiles statically.
    # This is a process-wide Dynamo setting (Dynamo decides before a backend is called).
    if dynamo_config.automatic_dynamic_shapes:
        dynamo_config.automatic_dynamic_shapes = False
        logger.info("neuron backend: static shapes only, automatic dynamic shapes turned off; "
                    "each new input shape compiles its own graph.")


def _symbols(example_inputs) -> list:
    found = []
    for x in example_inputs:
        if isinstance(x, torch.SymInt):
            found.append(str(x))
        elif isinstance(x, torch.Tensor):
            found.extend(str(s) for s in (*x.shape, *x.stride()) if isinstance(s, torch.SymInt))
    return sorted(set(found))


def _reject_dynamic(example_inputs) -> None:
    symbols = _symbols(example_inputs)
    asked = not dynamo_config.assume_static_by_default   # what dynamic=True sets while tracing
    if symbols or asked:
        why = "dynamic=True was passed to torch.compile" if asked else \
            "inputs were marked dynamic (torch._dynamo.mark_dynamic)"
        found = f" (SymInt within FX Graphs: {', '.join(symbols[:6])})" if symbols else ""
        raise DynamicShapeError(
            f"Unbounded dynamism is disabled: the neuron backend compiles static shapes only, but "
            f"{why}{found}. Fix: torch.compile(..., backend=\"neuron\", dynamic=False); each new "
            "input shape then compiles its own graph.")


# ---- CPU inputs -----------------------------------------------------------------------------

def _cpu_positions(example_inputs) -> list:
    # 0-dim CPU tensors stay where they are: device ops accept them as scalars (as in eager),
    # and state such as an optimizer's step count must be updated in place where it lives.
    return [i for i, x in enumerate(example_inputs)
            if isinstance(x, torch.Tensor) and x.device.type == "cpu" and x.dim() > 0]


def _retarget_devices(gm: torch.fx.GraphModule, device: torch.device) -> None:
    """Tensors the graph creates on the CPU are created on `device` instead."""
    def swap(a):
        return device if a == "cpu" or isinstance(a, torch.device) and a.type == "cpu" else a
    for node in gm.graph.nodes:
        if node.op in ("call_function", "call_method"):
            node.args = torch.fx.node.map_aggregate(node.args, swap)
            node.kwargs = {k: torch.fx.node.map_aggregate(v, swap) for k, v in node.kwargs.items()}
    gm.recompile()


def _move_inputs_to_device(gm, example_inputs, opts: CompileOptions):
    """(example inputs with the CPU ones moved to the device, their positions)."""
    positions = _cpu_positions(example_inputs)
    if not positions:
        return example_inputs, []
    if not opts.cpu_autocopy:
        shown = ", ".join(f"#{i} {tuple(example_inputs[i].shape)}" for i in positions[:4])
        raise CPUInputError(
            f"inputs {shown} of the compiled graph are on cpu, expected neuron, and "
            "TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1 turns off copying them. Move them with "
            ".to('neuron') or unset the variable.")
    device = torch.device("neuron", torch.neuron.current_device())
    _retarget_devices(gm.gm if isinstance(gm, torch._dynamo.utils.GmWrapper) else gm, device)
    moved = list(example_inputs)
    previous = _C._set_charging(False)   # tracing inputs, not work of the program
    try:
        for i in positions:
            x = example_inputs[i]
            fake = isinstance(x, torch._subclasses.FakeTensor)
            with x.fake_mode if fake else contextlib.nullcontext():
                moved[i] = x.to(device)
    finally:
        _C._set_charging(previous)
    return moved, positions


def _with_autocopy(compiled, positions, opts: CompileOptions, boxed: bool):
    # Dynamo calls the result the way it calls its graph: with one list of inputs when the
    # graph is a GmWrapper (boxed), else with the inputs as arguments.
    def run(*args):
        args = list(args[0]) if boxed else list(args)
        device = torch.device("neuron", torch.neuron.current_device())
        copies = []
        for i in positions:
            if isinstance(args[i], torch.Tensor) and args[i].device.type == "cpu":
                original, args[i] = args[i], args[i].to(device)
                copies.append((original, args[i], args[i]._version))
        out = compiled(args) if boxed else compiled(*args)
        for original, moved, version in copies:   # the graph mutated an input in place
            if moved._version != version:
                original.copy_(moved)
        if opts.retain_device:   # outputs go back where the inputs came from
            out = type(out)(o.cpu() if isinstance(o, torch.Tensor) else o for o in out)
        return out
    return run


# ---- where a graph comes from (to show graph breaks) -----------------------------------------

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in (\S+)')


def _source_range(gm: torch.fx.GraphModule) -> str:
    """`file:first-last` of the user lines a Dynamo graph covers."""
    lines = {}
    for node in gm.graph.nodes:
        trace = node.meta.get("stack_trace")
        if not trace:
            continue
        frames = _FRAME.findall(trace)
        if frames:
            path, line, _fn = frames[-1]
            lines.setdefault(path, set()).add(int(line))
    return "; ".join(f"{p.rsplit('/', 1)[-1]}:{min(ls)}-{max(ls)}" for p, ls in lines.items())


# ---- compiling one ATen graph ------------------------------------------------------------------

def _input_signature(example_inputs) -> str:
    return ";".join(f"{x.dtype}{tuple(x.shape)}{tuple(x.stride())}{x.device.type}"
                    if isinstance(x, torch.Tensor) else repr(x) for x in example_inputs)


def _graph_code(gm: torch.fx.GraphModule) -> str:
    """The code of the graph and of the subgraphs its higher-order ops run: a cond's branches
    are not in the graph's own code (two graphs differing only there are different graphs)."""
    return "".join(m.code for m in gm.modules() if isinstance(m, torch.fx.GraphModule))


def _graph_name(model_name: str, kind: str) -> str:
    try:
        from torch._functorch._aot_autograd.logging_utils import get_aot_graph_name
        aot_name = get_aot_graph_name()              # e.g. "model__0_forward_1"
    except Exception:                                # naming only: never fail a compile on it
        aot_name = f"model__{kind}"
    suffix = aot_name.split("__", 1)[-1]
    return f"{model_name}_{suffix}"


def _device_index(example_inputs) -> int:
    for x in example_inputs:
        if isinstance(x, torch.Tensor) and x.device.type == "neuron":
            return x.device.index or 0
    return torch.neuron.current_device()


def _compile_or_load(gm, example_inputs, opts: CompileOptions):
    """(GraphCost, cache hit?, key) for an ATen graph; raises NEFFCompilationError."""
    target = Target.of(_visible())
    key = cache.make_key(_graph_code(gm), _input_signature(example_inputs), target.key(),
                         setting("NEURON_CC_FLAGS"), cost_model_version())
    if opts.use_cache:
        try:
            payload = cache.load(key)
            if payload is not None:
                cost = GraphCost.from_json(payload["cost"])
                metrics.count("cache_hit")
                logger.info("[NEFF_CACHE] Cache HIT for key: %s", key)
                return cost, True, key
        except (cache.CorruptedEntry, KeyError, TypeError, ValueError):
            metrics.count("cache_corrupted")
        metrics.count("cache_miss")
        logger.info("[NEFF_CACHE] Cache MISS for key: %s", key)
    cost = cost_graph(gm, target)
    if opts.use_cache:
        cache.store(key, {"cost": cost.to_json(), "target": target.key(),
                          "graph_node_count": len(gm.graph.nodes)})
    return cost, False, key


def _save_artifacts(gm, name: str, cost: GraphCost) -> None:
    """With TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS=1, keep the ATen graph and its
    simulated program summary under TORCH_NEURONX_DEBUG_DIR (default neuron_backend-<uid> in the
    temporary directory: TorchNeuron's /tmp/neuron_backend, made per user), in TorchNeuron's
    layout: fx_graphs/proc_{rank}/, neff/. Directories must be private to this user and files
    are created exclusively without following links (private_files)."""
    if not setting("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS"):
        return
    root = setting("TORCH_NEURONX_DEBUG_DIR") or user_temp_dir("neuron_backend")
    rank = os.environ.get("RANK", "0")
    stamp = time.strftime("%Y%m%d_%H%M%S")
    what = "compilation artifacts (TORCH_NEURONX_DEBUG_DIR)"
    if private_dir(root, what) is None:      # checked before anything is created inside it
        return
    fx_dir = private_dir(os.path.join(root, "fx_graphs", f"proc_{rank}"), what)
    neff_dir = private_dir(os.path.join(root, "neff"), what)
    if fx_dir is None or neff_dir is None:
        return
    try:
        create_private(_unused_name(fx_dir, f"{name}_{stamp}", ".fx.txt"),
                       gm.print_readable(print_output=False))
        create_private(_unused_name(neff_dir, f"{name}_{stamp}", ".program.json"),
                       json.dumps(cost.to_json(), indent=1, sort_keys=True))
    except OSError as e:
        logger.warning("cannot save compilation artifacts to %s (%s)", root, e)


def _unused_name(directory: str, stem: str, suffix: str) -> str:
    """directory/stem+suffix, or stem_1, stem_2... when taken (two graphs in the same second)."""
    for i in range(1000):
        path = os.path.join(directory, f"{stem}{f'_{i}' if i else ''}{suffix}")
        if not os.path.lexists(path):
            return path
    return path      # create_private then fails on it: reported, never overwritten


def _checking():
    """torch_neuronx.check_semantics while it checks compiled graphs, else None. Whoever turns
    checking on imported it; a launch does not import it (~0.4 s: the ISA semantics)."""
    checks = sys.modules.get("torch_neuronx.check_semantics")
    return checks if checks is not None and checks.active() else None


def _launcher(gm: torch.fx.GraphModule, name: str, cost: GraphCost, device: int):
    """Runs the graph's ops uncharged, then charges the graph as one launch. Work of known
    duration the graph issues (NKI kernels of custom ops) is captured and becomes part of the
    launch, in place of the roofline estimate the compile used for those ops."""
    launch_name = f"{COMPILED_GRAPH_PREFIX}{name}"
    ns, engines, dma = cost.total_ns, dict(cost.engine_busy_ns), cost.dma_bytes
    without_custom = ns - cost.custom_ops_ns
    from ..profiling.hook import register_graph   # profiler lanes + Explorer summary (issue 7)
    register_graph(launch_name, cost)

    def run(*args):
        previous = _C._set_charging(False)
        if previous:
            _C._take_captured_ns()           # start from zero on this thread
        try:
            checks = _checking()
            out = checks.run_graph(gm, args, name) if checks is not None else gm(*args)
        finally:
            _C._set_charging(previous)
        kernels = _C._take_captured_ns() if previous else 0   # nested: the outer run takes them
        charged = without_custom + kernels if kernels else ns
        _C._enqueue_timed(launch_name, device, charged)
        metrics.count_launch(charged, engines, dma)
        return out
    return make_boxed_func(run)


def _compile_graph(gm, example_inputs, kind: str, opts: CompileOptions, source: str,
                   model_name: str):
    """AOT Autograd's compiler of the `kind` (forward, backward, inference) ATen graph of a
    Dynamo graph covering the user lines `source`."""
    start = time.perf_counter()
    name = _graph_name(model_name, kind)
    record = metrics.NeuronCompilationMetrics(
        graph_id="", graph_name=name, model_name=model_name, kind=kind,
        graph_node_count=len(gm.graph.nodes), source=source,
        has_collectives="_c10d_functional" in _graph_code(gm))
    try:
        cost, hit, key = _compile_or_load(gm, example_inputs, opts)
    except NEFFCompilationError as e:
        if not opts.fallback_execution:
            raise NEFFCompilationError(f"Neuron backend could not compile graph {name}: {e}") \
                from None
        logger.warning("Neuron backend could not compile graph %s (%s); running it eagerly "
                       "(fallback execution is on).", name, e)
        record.fell_back = True
        record.wall_compile_s = time.perf_counter() - start
        metrics.record(record)
        return make_boxed_func(gm.forward)   # ops charged one by one, as eager
    record.graph_id, record.cache_hit, record.cost = key, hit, cost
    record.sim_compile_ns = int(1e9 * (SIM_CACHE_LOAD_S if hit else
                                       SIM_COMPILE_BASE_S + SIM_COMPILE_PER_OP_S * cost.ops))
    record.wall_compile_s = time.perf_counter() - start
    metrics.record(record)
    logger.info("compiled %s (%s, %d ops%s): %.1f us per launch, simulated compile %.2f s "
                "(%s)", name, kind, cost.ops, f", user lines {source}" if source else "",
                cost.total_ns / 1e3, record.sim_compile_ns / 1e9,
                "cache hit" if hit else "cache miss")
    _save_artifacts(gm, name, cost)
    return _launcher(gm, name, cost, _device_index(example_inputs))


def neuron_backend(gm: torch.fx.GraphModule, example_inputs, *, options=None, mode=None):
    """The Dynamo backend registered as "neuron"."""
    opts = CompileOptions.resolve(options, mode)
    _force_static_shapes()
    _reject_dynamic(example_inputs)
    boxed = isinstance(gm, torch._dynamo.utils.GmWrapper)
    source = _source_range(gm.gm if boxed else gm)
    example_inputs, cpu_positions = _move_inputs_to_device(gm, example_inputs, opts)
    model_name = opts.model_name or get_model_name()   # now: the backward compiles later

    def compiler(kind):
        return lambda gm, inputs: _compile_graph(gm, inputs, kind, opts, source, model_name)
    compiled = aot_autograd(fw_compiler=compiler("forward"), bw_compiler=compiler("backward"),
                            inference_compiler=compiler("inference"),
                            keep_inference_input_mutations=True)(gm, example_inputs)
    if cpu_positions:
        return _with_autocopy(compiled, cpu_positions, opts, boxed)
    return compiled


def create_neuron_backend():
    """TorchNeuron's factory name; the backend holds no per-instance state."""
    return neuron_backend
