# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/get-started/quickstart-nki-kernel.html
# (Prerequisites: "this command checks both packages"). Verbatim.
python -c "import torch_neuronx, nki; print('torch-neuronx and NKI are ready')"
