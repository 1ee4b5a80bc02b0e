// The zero-copy CPU fallback for ops without an explicit 'neuron' kernel.
#pragma once

namespace neuron {

// Makes the fallback the direct 'neuron' kernel of every structured ATen op (see .cpp);
// returns how many ops were registered. Idempotent.
int register_direct_kernels();

}  // namespace neuron
