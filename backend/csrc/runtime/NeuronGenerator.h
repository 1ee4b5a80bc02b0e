// Random numbers on 'neuron': one default generator per device. Each delegates to an
// inner CPU generator, which the fallback hands to the CPU kernels it runs, so neuron
// random streams are their own and reproducible under torch.manual_seed.
#pragma once

#include <ATen/core/Generator.h>
#include <c10/core/GeneratorImpl.h>

namespace neuron {

class NeuronGeneratorImpl final : public c10::GeneratorImpl {
 public:
  NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed);

  void set_current_seed(uint64_t seed) override;
  void set_offset(uint64_t offset) override;
  uint64_t get_offset() const override;
  uint64_t current_seed() const override;
  uint64_t seed() override;
  void set_state(const c10::TensorImpl& new_state) override;
  c10::intrusive_ptr<c10::TensorImpl> get_state() const override;
  static c10::DeviceType device_type() { return c10::DeviceType::PrivateUse1; }

  const at::Generator& cpu_generator() const { return cpu_; }

 private:
  NeuronGeneratorImpl* clone_impl() const override;
  at::Generator cpu_;
};

const at::Generator& default_generator(c10::DeviceIndex device);
at::Generator new_generator(c10::DeviceIndex device);
// The CPU generator to give a CPU kernel in place of `gen` (a neuron generator).
const at::Generator& cpu_generator_of(const at::Generator& gen);

}  // namespace neuron
