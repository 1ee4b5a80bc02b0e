# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/reference/api/torch-neuron-module.html
# ("How the module is registered"). The search excerpt of the page ends inside the print call
# ("torch.accelerator."); it is completed with current_accelerator(), the torch.accelerator
# function the page's text describes ("torch.accelerator resolves to the neuron device").
import torch

assert torch.neuron.is_available()
print(torch.neuron.device_count(), torch.accelerator.current_accelerator())
