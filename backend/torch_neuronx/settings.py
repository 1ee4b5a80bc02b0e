"""Every environment variable torch_neuronx reads, declared once with type, default, valid
values and help, with the project's one `Setting` class (`neuron_sim.config`; the simulator, the
NKI front end and NEURON_SIM_INSTANCE, which the torch-free tools read too, are declared there).

Names are TorchNeuron's and the Neuron runtime's where they exist, so scripts written for
real Trainium keep their meaning; `NEURON_SIM_*` are the simulator's own. The README's
settings table is generated from these declarations (`python -m torch_neuronx.settings`).
`validate()` checks them all; a bad value becomes an error at first device use (never at
`import torch`), naming the variable and its valid values.
"""

from __future__ import annotations

from neuron_sim.config import Setting, SettingError, check_all, declare, declared, get

__all__ = ["Setting", "SettingError", "SETTINGS", "get", "validate", "markdown_table"]

_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")

SETTINGS = list(declare(
    "device",
    Setting("NEURON_RT_VISIBLE_CORES", str, None,
            "Logical cores this process sees: one index or a range such as 0-3."),
    Setting("NEURON_RT_NUM_CORES", int, 0, "Number of logical cores to use; 0 means all.",
            minimum=0),
    Setting("NEURON_RT_ENABLE_HOST_CC", bool, False,
            "New streams are real streams (otherwise they alias the default stream)."),
    Setting("TORCH_NEURONX_FALLBACK_ONLY_FOR_UNIMPLEMENTED_OPS", bool, False,
            "Ops that fail on Neuron raise instead of running on CPU."),
    Setting("TORCH_NEURONX_ENABLE_CONCATENATION", bool, True,
            "Adaptive Eager Execution: fuse queued eager ops between sync points."),
    Setting("NEURON_LAUNCH_BLOCKING", bool, False,
            "Time every op as soon as it is issued (synchronous execution, for debugging)."),
    Setting("TORCH_NEURONX_NEFF_CACHE_DIR", str, None,
            "Directory of the compiled-program cache (default: $XDG_CACHE_HOME/torch_neuronx/neff, "
            "else ~/.cache/torch_neuronx/neff, created 0700). A directory owned by another user "
            "or writable by group/others is refused: compiles then run uncached, with a warning."),
    Setting("TORCH_NEURONX_LOG_LEVEL", str, "WARNING", "Log level of the torch_neuronx logger.",
            choices=_LOG_LEVELS, case_insensitive=True),
    Setting("TORCH_NEURONX_DEBUG_DIR", str, None,
            "Where debug artifacts are written (default: neuron_backend-<uid> in the temporary "
            "directory, created 0700; refused like the cache directory when not private)."),
    Setting("TORCH_NEURONX_PRESERVE_COMPILATION_ARTIFACTS", bool, False,
            "Keep intermediate compilation artifacts."),
    Setting("NEURON_CC_FLAGS", str, "",
            "Compiler flags (accepted; recorded in the compile cache key)."),
    Setting("NEURON_SIM_TIME_ONLY", bool, False,
            "Time-only execution for the whole process: ops are timed as usual but compute no "
            "values, so models larger than host memory run (`torch_neuronx.time_only()`)."),
).values())

declare(
    "torch.compile",
    Setting("TORCH_NEURONX_DISABLE_FALLBACK_EXECUTION", bool, True,
            "A graph that fails to compile raises (True, the 2.33 default) instead of running "
            "eagerly; the `fallback_execution` option overrides it."),
    Setting("TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY", bool, False,
            "CPU tensors passed to a compiled function raise instead of being copied to neuron."),
    Setting("TORCH_NEURONX_RETAIN_DEVICE_MODE", bool, False,
            "Outputs of a compiled function go back to the device its CPU inputs came from."),
    Setting("TORCH_NEURONX_NEFF_DISABLE_CACHE", bool, False,
            "Do not read or write the persistent compile cache."),
)

PROFILING_SETTINGS = list(declare(
    "profiling",
    Setting("NEURON_SIM_PROFILE_LANES", bool, True,
            "Attach per-engine lanes (TensorE, VectorE, ScalarE, GpSimd, DMA queues) to "
            "profiled ops."),
    Setting("NEURON_SIM_PROFILE_MAX_SPANS_PER_LANE", int, 4,
            "Busy spans per engine lane and op; smaller gaps are merged (labels keep the busy %).",
            minimum=1),
    Setting("NEURON_SIM_PROFILE_MAX_SPANS_PER_OP", int, 24,
            "Lane spans per op in total (compute lanes first, then the busiest DMA queues).",
            minimum=1),
    Setting("NEURON_SIM_PROFILE_DMA_LANES", str, "queues",
            "'queues': one lane per DMA queue ('DMA q3'); 'one': all queues in one 'DMA' lane.",
            choices=("queues", "one")),
    Setting("NEURON_SIM_PROFILE_MAX_LANE_ROWS", int, 50_000,
            "Lane rows per profiling session (about 9 MB of trace; the demo GPT training step "
            "has about 5,000); later ops keep their device row and their summary record but get "
            "no lanes.", minimum=0),
).values())

declare(
    "distributed",
    Setting("NEURON_SIM_CC_ALGORITHM", str, "auto",
            "Collective algorithm the timing model uses: auto (the runtime's choice by size and "
            "topology), mesh, rdh (recursive halving/doubling), kangaring, ring or hierarchical.",
            choices=("auto", "mesh", "rdh", "kangaring", "ring", "hierarchical")),
    Setting("NEURON_SIM_CHECK_COLLECTIVES", bool, True,
            "Before each collective, ranks compare op, shapes, dtypes and simulated clocks (one "
            "small gloo all-gather): mismatches raise on every rank, and a rank that arrives "
            "later in simulated time makes the others wait. 0 skips both."),
)


def validate(environ=None) -> None:
    """Raises SettingError listing every declared setting whose value is invalid."""
    errors = check_all(environ)
    if errors:
        raise SettingError("invalid neuron settings: " + " ".join(errors))


# The README table's order; parts declared elsewhere follow.
_PART_ORDER = ("device", "device, NKI", "torch.compile", "profiling", "distributed", "NKI",
               "simulator")


def markdown_table() -> str:
    parts = dict(declared())
    order = [p for p in _PART_ORDER if p in parts] + [p for p in parts if p not in _PART_ORDER]
    rows = ["| variable | read by | type | default | valid values | meaning |",
            "|---|---|---|---|---|---|"]
    for part in order:
        for s in parts[part]:
            valid = s.valid_values() if (s.kind is not str or s.choices) else "text"
            rows.append(f"| `{s.name}` | {part} | {s.kind.__name__} | {s.default!r} | {valid} "
                        f"| {s.help} |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(markdown_table())
