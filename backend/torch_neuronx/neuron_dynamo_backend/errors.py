"""Errors of torch.compile(backend="neuron"), with TorchNeuron's names."""


class NeuronCompileError(RuntimeError):
    """Base class of the backend's errors."""


class NEFFCompilationError(NeuronCompileError):
    """A graph could not be compiled to one program (an op has no Neuron lowering)."""


class NEFFExecutionError(NeuronCompileError):
    """A compiled graph failed while it ran."""


class DynamicShapeError(NeuronCompileError):
    """dynamic=True or symbolic sizes: the backend compiles static shapes only."""


class CPUInputError(NeuronCompileError):
    """A CPU tensor reached a compiled graph with TORCH_NEURONX_DYNAMO_DISABLE_CPU_AUTOCOPY=1."""
