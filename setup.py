"""Builds torch_neuronx._C, the C++ core of the simulated 'neuron' device.

Lean includes and several small translation units keep a cold build near half a minute
on two cores; ninja recompiles only what changed. The version pairs with the torch the
extension is built against, as TorchNeuron's 2.13.3.x / 2.14.3.x families do.
"""
import glob
import os

# The build must not autoload the (possibly stale) installed extension it is rebuilding.
os.environ["TORCH_DEVICE_BACKEND_AUTOLOAD"] = "0"

import torch  # noqa: E402
from setuptools import find_packages, setup  # noqa: E402
from torch.utils.cpp_extension import BuildExtension, CppExtension, include_paths

CSRC = os.path.join("backend", "csrc")
sources = sorted(glob.glob(os.path.join(CSRC, "*", "*.cpp")))
kineto_include = [os.path.join(p, "kineto") for p in include_paths() if p.endswith("include")]
torch_major, torch_minor = torch.__version__.split(".")[:2]

setup(
    version=f"{torch_major}.{torch_minor}.3.0+sim",
    packages=find_packages(include=["neuron_sim", "neuron_sim.*"])
    + find_packages("backend", include=["torch_neuronx", "torch_neuronx.*", "nki", "nki.*",
                                        "neuronxcc", "neuronxcc.*"]),
    package_dir={"torch_neuronx": "backend/torch_neuronx", "nki": "backend/nki",
                 "neuronxcc": "backend/neuronxcc"},
    ext_modules=[
        CppExtension(
            name="torch_neuronx._C",
            sources=sources,
            include_dirs=[os.path.abspath(CSRC)] + kineto_include,
            define_macros=[("USE_KINETO", None)],
            extra_compile_args=["-O2", "-Wno-unused-parameter"],
        )
    ],
    cmdclass={"build_ext": BuildExtension.with_options(use_ninja=True)},
)
