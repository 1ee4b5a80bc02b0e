"""``neuronxcc.nki.typing``: annotation names legacy kernels use (``a: nt.tensor``,
``nt.tensor[shape, dtype]``, ``nt.mutable_tensor``). Annotations are not checked on the
simulator; an argument is whatever array or tensor the caller passes."""

from neuron_sim.nki.tensor import NkiTensor


class tensor(NkiTensor):       # noqa: N801  (the legacy name)
    """``nt.tensor`` / ``nt.tensor[shape, dtype]`` in a kernel signature."""

    def __class_getitem__(cls, item):
        return cls


class mutable_tensor(tensor):  # noqa: N801
    """An argument the kernel writes in place (legacy output arguments)."""


scalar = float

__all__ = ["mutable_tensor", "scalar", "tensor"]
