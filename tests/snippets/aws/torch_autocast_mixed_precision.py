# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/index.html
# ("What changes are needed? For eager mode: ... Mixed precision: Use torch.autocast(device_type=
# "neuron")"). Not a copy of a page: written for this test, it runs a small classifier's forward and
# loss under torch.autocast(device_type="neuron") and the backward after it, then compares the
# dtypes, the loss and the gradients with CPU PyTorch casting by hand as CUDA's autocast lists do
# (TorchNeuron uses them; the dtype is float16, PyTorch's PrivateUse1 default, which TorchNeuron
# keeps): linear in float16; cross_entropy calls log_softmax with dtype=its input's (float16),
# which the fp32_set_opt_dtype rule leaves alone, then nll_loss in float32. CPU autocast is not
# the reference: its op lists differ.
import torch
import torch.nn.functional as F

torch.manual_seed(0)
net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
data, target = torch.randn(16, 32), torch.randint(0, 10, (16,))


def train_step(model, device):
    model = model.to(device)
    model.zero_grad()
    with torch.autocast(device_type=device):
        output = model(data.to(device))
        loss = F.cross_entropy(output, target.to(device))
    loss.backward()
    return output, loss, [p.grad.cpu() for p in model.parameters()]


out_n, loss_n, grads_n = train_step(net, "neuron")
low = torch.get_autocast_dtype("neuron")
assert low == torch.float16 and out_n.dtype == low and loss_n.dtype == torch.float32, (low, out_n.dtype, loss_n.dtype)

# ---- reference (not from the page): CUDA's autocast rules, applied by hand on CPU ----
net = net.cpu()
net.zero_grad()
l1, l2 = net[0], net[2]
hidden = F.relu(F.linear(data.to(low), l1.weight.to(low), l1.bias.to(low)))
out_c = F.linear(hidden, l2.weight.to(low), l2.bias.to(low))
loss_c = F.nll_loss(F.log_softmax(out_c, 1, dtype=low).float(), target)
loss_c.backward()
grads_c = [p.grad for p in net.parameters()]
torch.testing.assert_close(out_n.cpu(), out_c)
torch.testing.assert_close(loss_n.cpu(), loss_c)
for gn, gc in zip(grads_n, grads_c):
    torch.testing.assert_close(gn, gc)
print(f"autocast(neuron): output {out_n.dtype}, loss {loss_n.item():.6f} = CPU {loss_c.item():.6f}, "
      "gradients equal")
