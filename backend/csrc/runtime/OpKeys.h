// Identity keys of queued ops and of fused groups of them, interned to small integers when an
// op is queued. The cost model caches an op's simulated time by its key, so a drain of ops it
// has seen before is a lookup per op, with no description of the op built in Python.
#pragma once

#include "runtime/NeuronQueue.h"

#include <cstdint>
#include <vector>

namespace neuron {

// An op's layout key: its name; per argument its kind and, for tensors, sizes, strides, dtype
// and device (not where the data lives), integer and boolean values, integer lists. Float
// scalars are left out: a learning rate or a bias correction changes an op's values, never its
// program. Ops with equal keys lower to the same program. Ids count from 0 and are stable for
// the process (the table only grows, like the program cache it indexes).
int32_t intern_op_key(const OpDesc& op);

// The dataflow inside a fused group (the ops at `group` in `ops`, in order): one entry per
// described tensor (tensor arguments and tensor-list elements, then outputs; undefined ones
// skipped), the position of the tensor whose value it is. An output is itself; an input is the
// latest earlier output of the group at the same place (storage, offset, layout), since every
// write to device memory inside a group is one of its ops; any other input is itself (two
// outside reads of one place may be a freed tensor and its successor). A write ends every
// other place of its storage it overlaps, so a reused address never passes for an earlier
// output. The readable reference is `identity_pattern` in torch_neuronx/cost.py.
std::vector<int32_t> identity_pattern(const std::vector<OpDesc>& ops,
                                      const std::vector<int64_t>& group);

// A fused group's key: its ops' keys and its identity pattern, interned.
int32_t intern_group_key(const std::vector<OpDesc>& ops, const std::vector<int64_t>& group);

}  // namespace neuron
