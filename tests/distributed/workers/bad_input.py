"""One rank of a bad-input scenario (argv[1]); prints `RESULT <json>` when it gets that far."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

scenario = sys.argv[1]
rank = int(os.environ["RANK"])
TIMEOUT = timedelta(seconds=20)


def init(**kw):
    dist.init_process_group(backend="neuron", timeout=TIMEOUT, **kw)


def error_of(fn):
    try:
        fn()
    except Exception as e:   # noqa: BLE001 - the test reads the type and message
        return {"type": type(e).__name__, "message": str(e)}
    return None


if scenario == "device_before_init":
    if rank == 0:
        torch.ones(2, device="neuron")      # touches the runtime before init_process_group
    init()
elif scenario == "rank_dies":
    init()
    if rank == 1:
        os._exit(3)
    time.sleep(1)
    start = time.monotonic()
    err = error_of(lambda: dist.all_reduce(torch.ones(2, device="neuron")))
    print("RESULT " + json.dumps({"error": err, "seconds": time.monotonic() - start}), flush=True)
    os._exit(0)
elif scenario == "in_job":
    init()
    dev = torch.device("neuron")
    seen = {}
    seen["shape"] = error_of(lambda: dist.all_reduce(torch.ones(4, 8 + rank, device=dev)))
    seen["dtype"] = error_of(lambda: dist.all_reduce(
        torch.ones(4, device=dev, dtype=torch.float32 if rank == 0 else torch.bfloat16)))
    seen["op"] = error_of(lambda: dist.all_reduce(torch.ones(4, device=dev)) if rank == 0
                          else dist.broadcast(torch.ones(4, device=dev), src=0))
    seen["mixed_devices"] = error_of(lambda: dist.all_gather(
        [torch.empty(2, device=dev), torch.empty(2)], torch.ones(2, device=dev)))
    t = torch.ones(3, device=dev)
    dist.all_reduce(t)                       # the group still works afterwards
    seen["after"] = t.cpu().tolist()
    print("RESULT " + json.dumps(seen), flush=True)
    dist.destroy_process_group()
