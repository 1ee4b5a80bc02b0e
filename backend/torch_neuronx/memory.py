"""Memory statistics of 'neuron' devices, with torch.cuda's names and return shapes."""

from __future__ import annotations

import torch

from . import _C
from .streams import _index


def memory_stats(device=None) -> dict:
    """Nested `{"allocated_bytes": {"current", "peak", "allocated", "freed"}, ...}` plus
    flat `"allocated_bytes.all.current"`-style keys, as torch.cuda.memory_stats returns."""
    flat = torch._C._accelerator_getDeviceStats(_index(device))
    nested = {key: dict(flat[key]["all"]) for key in (   # current, peak, allocated, freed
        "allocated_bytes", "reserved_bytes", "active_bytes", "requested_bytes", "allocation",
        "active", "segment")}
    for key in ("num_alloc_retries", "num_ooms"):
        nested[key] = flat.get(key, 0)
    nested["num_tensor_frees"] = nested["allocation"]["freed"]
    nested["allocation_requests"] = nested["allocation"]["allocated"]
    for key, entry in list(nested.items()):
        if isinstance(entry, dict):
            for k, v in entry.items():
                nested[f"{key}.all.{k}"] = v
    return nested


def memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes"]["current"]


def max_memory_allocated(device=None) -> int:
    return memory_stats(device)["allocated_bytes"]["peak"]


def memory_reserved(device=None) -> int:
    # No caching pool: device memory is reserved exactly while it is allocated.
    return memory_stats(device)["reserved_bytes"]["current"]


def max_memory_reserved(device=None) -> int:
    return memory_stats(device)["reserved_bytes"]["peak"]


def reset_peak_memory_stats(device=None) -> None:
    torch._C._accelerator_resetPeakStats(_index(device))


def reset_accumulated_memory_stats(device=None) -> None:
    torch._C._accelerator_resetAccumulatedStats(_index(device))


def empty_cache() -> None:
    """Nothing is cached: freed tensors return their bytes at once."""


def mem_get_info(device=None) -> tuple[int, int]:
    return torch._C._accelerator_getMemoryInfo(_index(device))


def memory_summary(device=None, abbreviated: bool = False) -> str:
    s = memory_stats(device)
    index = _index(device)
    free, total = mem_get_info(index)
    columns = ("current", "peak", "allocated", "freed")
    lines = [f"neuron:{index} memory summary ({_C._instance_name()}, simulated HBM {total} bytes)",
             f"{'metric':<20}" + "".join(f"{c:>16}" for c in columns)]
    for key in ("allocated_bytes", "active_bytes", "allocation"):
        lines.append(f"{key:<20}" + "".join(f"{s[key][c]:>16}" for c in columns))
    if not abbreviated:
        lines.append(f"free bytes: {free}   OOMs: {s['num_ooms']}")
    return "\n".join(lines)
