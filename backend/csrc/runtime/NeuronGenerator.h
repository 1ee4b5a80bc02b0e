// Random numbers on 'neuron': one default generator per device, with TorchNeuron's state
// layout (16 bytes: an 8-byte seed, then an 8-byte offset, as Philox generators keep it and
// DTensor's RNG tracker reads it). A random op runs its CPU kernel with a CPU generator
// derived from (seed, offset) and advances the offset by the values it drew, so the same
// state always gives the same values and neuron random streams are independent of CPU's.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

#include <cstdint>

namespace neuron {

// The (seed, offset) pair. A generator and the views graphsafe_get_state() hands out share
// one, as CUDA's generators share their Philox state: torch.compile's RNG functionalisation
// for activation checkpointing points a default generator at a graph-owned state for one op
// and back (graphsafe_set_state), and that state advances with the values the op drew.
struct NeuronGeneratorState final : c10::intrusive_ptr_target {
  explicit NeuronGeneratorState(uint64_t seed) : seed(seed) {}
  uint64_t seed;
  uint64_t offset = 0;
};

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  static constexpr size_t kStateBytes = 16;

  NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed);
  NeuronGeneratorImpl(c10::DeviceIndex device, c10::intrusive_ptr<NeuronGeneratorState> state);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  void graphsafe_set_state(const c10::intrusive_ptr<c10::GeneratorImpl>& state) override;
  c10::intrusive_ptr<c10::GeneratorImpl> graphsafe_get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  // The CPU generator one op draws from: a function of (seed, offset) only.
  at::Generator cpu_generator_at_offset() const;
  // Moves the offset past `values` drawn values, in Philox's steps of 4.
  void advance(uint64_t values);

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  c10::intrusive_ptr<NeuronGeneratorState> state_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);

// A random op's view of a neuron generator: the CPU generator its CPU kernel uses, and
// after the kernel ran, the offset advanced by the number of values it produced.
class OpRandomness {
 public:
  explicit OpRandomness(const at::Generator& gen);
  const at::Generator& cpu() const { return cpu_; }
  void consumed(uint64_t values);

 private:
  at::Generator gen_;
  at::Generator cpu_;
};

}  // namespace neuron
