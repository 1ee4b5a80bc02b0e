"""What a lowering rule sees of an op: names, shapes, strides and dtypes, no torch.

`TensorSpec` is one tensor argument or output; `OpSpec` one op call with its arguments in ATen
order (tensors as TensorSpec, tensor lists as lists, scalars as Python values).
`normalize_name` maps every spelling the device queue produces to the functional op the rules are
registered under: in-place `aten::add_.Tensor` and out= `aten::add.out` time like
`aten::add.Tensor` (the same work; only where the result lands differs)."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from math import prod

from ..numerics.formats import itemsize
from ..program.ap import row_major

# Storage dtypes on the device: 64-bit types run in 32 bits on Trainium (TorchNeuron casts
# float64/int64 to float32/int32 inside each op) [torchneuron-api §3].
DTYPE_ALIASES = {
    "float64": "float32", "double": "float32", "float": "float32", "int64": "int32",
    "long": "int32", "uint64": "uint32", "half": "float16", "complex64": "float32",
    "complex128": "float32", "complex32": "float16",
    "float8_e4m3fnuz": "float8_e4m3", "float8_e5m2fnuz": "float8_e5m2",
}


def device_dtype(name: str) -> str:
    name = str(name).replace("torch.", "")
    return DTYPE_ALIASES.get(name, name)


@dataclass(frozen=True)
class TensorSpec:
    shape: tuple
    dtype: str = "float32"
    strides: tuple | None = None
    id: object = None            # identity inside lower_sequence (None: match by layout)
    on_device: bool = True       # False: a 0-dim CPU scalar passed into a device op

    def __post_init__(self):
        object.__setattr__(self, "shape", tuple(int(s) for s in self.shape))
        object.__setattr__(self, "dtype", device_dtype(self.dtype))
        if self.strides is None:
            object.__setattr__(self, "strides", row_major(self.shape))
        else:
            object.__setattr__(self, "strides", tuple(int(s) for s in self.strides))

    def __getattr__(self, name):
        """numel, nbytes, is_contiguous, layout_key: derived on first use and kept (rules ask for
        them at every chunk of every op). Not fields: == and hash read the fields alone."""
        if name == "nbytes":            # (alone: an unknown dtype fails here, not at numel)
            self.__dict__["nbytes"] = n = self.numel * itemsize(self.dtype)
            return n
        if name not in ("numel", "is_contiguous", "layout_key"):
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        shape, strides = self.shape, self.strides
        want = row_major(shape)
        d = self.__dict__
        d["numel"] = int(prod(shape)) if shape else 1
        d["is_contiguous"] = all(s == w or n == 1 for s, w, n in zip(strides, want, shape))
        d["layout_key"] = (shape, strides, self.dtype)
        return d[name]

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def with_id(self, id) -> "TensorSpec":
        """This tensor under identity `id` (what dataclasses.replace(t, id=id) gives, without
        re-checking fields that are already checked)."""
        t = object.__new__(TensorSpec)
        t.__dict__.update(self.__dict__)
        t.__dict__["id"] = id
        return t


@dataclass(frozen=True)
class OpSpec:
    name: str
    args: tuple = ()
    outputs: tuple = ()
    kwargs: dict = field(default_factory=dict, compare=False, hash=False)

    def __getattr__(self, name):
        """`op`: the normalised (functional) name the rules are registered under, derived on
        first use and kept, as the device inputs (`inputs`) are."""
        if name == "op":
            self.__dict__["op"] = op = normalize_name(self.name)
            return op
        if name == "_inputs":
            out = []
            for a in self.args:
                if isinstance(a, TensorSpec):
                    if a.on_device:
                        out.append(a)
                elif tensor_list(a):
                    out.extend(t for t in a if t.on_device)
            self.__dict__["_inputs"] = out = tuple(out)
            return out
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    @property
    def inputs(self) -> list:
        """Device tensors among the arguments, flattened, in order (CPU scalars excluded)."""
        return list(self._inputs)

    def arg(self, i, default=None):
        return self.args[i] if i < len(self.args) else default

    def key(self) -> tuple:
        """Hashable description for the program cache (ids excluded)."""
        def k(a):
            if isinstance(a, TensorSpec):
                return ("T",) + a.layout_key + (a.on_device,)
            if isinstance(a, (list, tuple)):
                return tuple(k(x) for x in a)
            if isinstance(a, float):     # values never change the program, only the result
                return "f"
            return a
        return (self.op, k(self.args), k(self.outputs))


def dense_order(shape, strides) -> tuple | None:
    """`shape` in memory order, outermost dimension first, when the tensor holds its elements
    without gaps or overlaps whatever the order of its dimensions (a weight's transpose, a clone
    of a transposed view keeps its strides); None when it has gaps or overlaps. A size-1
    dimension is never stepped over: its stride does not count, and it goes inside a dimension
    of equal stride (a view that moved it lists its dimensions as its base does)."""
    order = sorted(range(len(shape)), key=lambda d: (-strides[d], -shape[d]))
    span = 1
    for d in reversed(order):
        if shape[d] > 1:
            if strides[d] != span:
                return None
            span *= shape[d]
    return tuple(shape[d] for d in order)


def tensor_list(a) -> bool:
    """Whether argument `a` is a tensor list (a non-empty list or tuple of TensorSpecs).
    (Plain loops: this runs for every op of every fused group, where generator expressions
    cost more than the work.)"""
    if not isinstance(a, (list, tuple)) or not a:
        return False
    for t in a:
        if not isinstance(t, TensorSpec):
            return False
    return True


@lru_cache(maxsize=None)      # a few hundred names; asked at every op of every program
def normalize_name(name: str) -> str:
    """'aten::add_.Tensor' / 'aten::add.out' / 'add.Tensor' -> 'aten::add', the base name the
    rule table (`registry`) is keyed by: the overload dropped, an in-place underscore removed."""
    if "::" not in name:
        name = "aten::" + name
    ns, rest = name.split("::", 1)
    base = rest.split(".", 1)[0]
    # a dunder's trailing underscores (__and__, __lshift__) are its name, not the in-place marker
    if base.endswith("_") and (base.startswith("_foreach") or not base.endswith("__")):
        base = base[:-1]
    return f"{ns}::{base}"
