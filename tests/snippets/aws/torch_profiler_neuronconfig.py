# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/tools/neuron-explorer/how-to-profile-pytorch.html
# ("Capture PyTorch profiles with Neuron Explorer": torch.profiler.profile with the two activities
# ProfilerActivity.CPU and ProfilerActivity.PrivateUse1, a NeuronConfig passed as
# experimental_config, NeuronProfiler(config).export_trace as on_trace_ready). Not a copy of the
# page's text: the stored copy of the page is cut before its example, so this file makes those
# calls on a small MLP training step written for this test (the warm-up step and the
# torch.neuron.synchronize() closing the profiled step are ours), and checks (not from the page)
# that the trace written under profile_output_dir has device activity and the loss equals CPU's.
import glob
import json
import os

import torch
from torch.profiler import ProfilerActivity, profile
from torch_neuronx.profiling import NeuronConfig, NeuronProfiler, ProfileMode

torch.manual_seed(0)
mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
cpu_mlp = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.Linear(128, 8))
cpu_mlp.load_state_dict(mlp.state_dict())
mlp = mlp.to("neuron")
x = torch.randn(32, 64)


def step(model, inp):
    loss = model(inp).square().mean()
    loss.backward()
    return loss


step(mlp, x.to("neuron"))                          # warm-up outside the profile
torch.neuron.synchronize()
mlp.zero_grad()

config = NeuronConfig(modes=[ProfileMode.DEVICE, ProfileMode.RUNTIME], profile_output_dir="./profile_output")
exporter = NeuronProfiler(config)
with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.PrivateUse1],
             experimental_config=config, on_trace_ready=exporter.export_trace) as prof:
    loss = step(mlp, x.to("neuron"))
    torch.neuron.synchronize()

# ---- checks (not from the page) ----
torch.testing.assert_close(loss.cpu(), step(cpu_mlp, x).detach(), rtol=1e-5, atol=1e-6)
traces = glob.glob("./profile_output/*_pid_*/*/trace.json")
assert len(traces) == 1, traces
events = json.load(open(traces[0]))["traceEvents"]
device_rows = [e for e in events if e.get("ph") == "X" and (e.get("args") or {}).get("device_type") == "neuron"]
assert device_rows, "no device activity in the trace"
print(f"profile written: {os.path.relpath(traces[0])}, {len(device_rows)} device rows, "
      f"{sum(e['dur'] for e in device_rows):.1f} us of device time; loss matches CPU")
