# Source: https://awsdocs-neuron.readthedocs-hosted.com/en/latest/torch/get-started/quickstart-build-first-model.html
# ("Confirm your environment before you start"). Verbatim; the page shows, on a trn2.3xlarge,
# "instance-type: trn2.3xlarge" and "logical-neuroncore-config: 2" above the device table.
neuron-ls
