#include "runtime/NeuronGenerator.h"

#include "runtime/NeuronGuard.h"
#include "runtime/NeuronRuntime.h"

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/core/DistributionsHelper.h>
#include <c10/core/TensorImpl.h>
#include <c10/util/Exception.h>

#include <ATen/ops/empty.h>

#include <array>
#include <cstring>
#include <mutex>

namespace neuron {

namespace {
// SplitMix64 finaliser: spreads (seed, offset) pairs over mt19937 seeds.
uint64_t mix(uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

NeuronGeneratorImpl* neuron_impl(const at::Generator& gen) {
  auto* impl = dynamic_cast<NeuronGeneratorImpl*>(gen.unsafeGetGeneratorImpl());
  TORCH_CHECK(impl != nullptr, "Expected a neuron generator, got one for ", gen.device());
  return impl;
}
}  // namespace

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device, uint64_t seed)
    : NeuronGeneratorImpl(device, c10::make_intrusive<NeuronGeneratorState>(seed)) {}

NeuronGeneratorImpl::NeuronGeneratorImpl(c10::DeviceIndex device,
                                         c10::intrusive_ptr<NeuronGeneratorState> state)
    : c10::GeneratorImpl(c10::Device(c10::DeviceType::PrivateUse1, device),
                         c10::DispatchKeySet(c10::DispatchKey::PrivateUse1)),
      state_(std::move(state)) {}

void NeuronGeneratorImpl::set_current_seed(uint64_t seed) {
  state_->seed = seed;
  state_->offset = 0;
}

void NeuronGeneratorImpl::set_offset(uint64_t offset) { state_->offset = offset; }
uint64_t NeuronGeneratorImpl::get_offset() const { return state_->offset; }
uint64_t NeuronGeneratorImpl::current_seed() const { return state_->seed; }

uint64_t NeuronGeneratorImpl::seed() {
  const uint64_t random = c10::detail::getNonDeterministicRandom(true);
  set_current_seed(random);
  return random;
}

void NeuronGeneratorImpl::set_state(const c10::TensorImpl& new_state) {
  TORCH_CHECK_TYPE(new_state.dtype() == caffe2::TypeMeta::Make<uint8_t>(),
                   "RNG state must be a torch.ByteTensor (uint8), got ", new_state.dtype());
  TORCH_CHECK(new_state.numel() == static_cast<int64_t>(kStateBytes),
              "Invalid neuron RNG state: expected ", kStateBytes, " bytes (an 8-byte seed, then "
              "an 8-byte offset, as torch.neuron.get_rng_state() returns), got ",
              new_state.numel(), ". States saved from a CPU generator do not apply to 'neuron'.");
  const auto* bytes = static_cast<const uint8_t*>(new_state.data());
  uint64_t seed = 0, offset = 0;
  std::memcpy(&seed, bytes, 8);
  std::memcpy(&offset, bytes + 8, 8);
  state_->seed = seed;
  state_->offset = offset;
}

c10::intrusive_ptr<c10::TensorImpl> NeuronGeneratorImpl::get_state() const {
  at::Tensor state = at::empty({static_cast<int64_t>(kStateBytes)},
                               at::TensorOptions().dtype(at::kByte).device(at::kCPU));
  auto* bytes = state.data_ptr<uint8_t>();
  std::memcpy(bytes, &state_->seed, 8);
  std::memcpy(bytes + 8, &state_->offset, 8);
  return state.getIntrusivePtr();
}

void NeuronGeneratorImpl::graphsafe_set_state(
    const c10::intrusive_ptr<c10::GeneratorImpl>& state) {
  auto* other = dynamic_cast<NeuronGeneratorImpl*>(state.get());
  TORCH_CHECK(other != nullptr, "graphsafe_set_state: expected the state of a neuron generator "
              "(from graphsafe_get_state() or clone_state()), got a generator for ",
              state->device());
  state_ = other->state_;
}

c10::intrusive_ptr<c10::GeneratorImpl> NeuronGeneratorImpl::graphsafe_get_state() const {
  return c10::make_intrusive<NeuronGeneratorImpl>(device().index(), state_);
}

at::Generator NeuronGeneratorImpl::cpu_generator_at_offset() const {
  // At offset 0 the CPU generator is seeded with the seed itself, so the first random op
  // after manual_seed(s) gives what CPU gives after manual_seed(s).
  const uint64_t seed = state_->seed, offset = state_->offset;
  return at::make_generator<at::CPUGeneratorImpl>(offset == 0 ? seed : mix(seed ^ mix(offset)));
}

void NeuronGeneratorImpl::advance(uint64_t values) {
  state_->offset += (std::max<uint64_t>(values, 1) + 3) / 4 * 4;
}

NeuronGeneratorImpl* NeuronGeneratorImpl::clone_impl() const {
  auto* copy = new NeuronGeneratorImpl(device().index(), state_->seed);
  copy->state_->offset = state_->offset;
  return copy;
}

OpRandomness::OpRandomness(const at::Generator& gen) : gen_(gen) {
  std::lock_guard<std::mutex> lock(gen_.mutex());
  cpu_ = neuron_impl(gen_)->cpu_generator_at_offset();
}

void OpRandomness::consumed(uint64_t values) {
  std::lock_guard<std::mutex> lock(gen_.mutex());
  neuron_impl(gen_)->advance(values);
}

at::Generator new_generator(c10::DeviceIndex device) {
  if (device < 0) device = current_device();
  check_device_index(device);
  return at::make_generator<NeuronGeneratorImpl>(device, c10::default_rng_seed_val);
}

const at::Generator& default_generator(c10::DeviceIndex device) {
  static std::array<at::Generator, kMaxDevices> generators;
  static std::mutex mutex;
  if (device < 0) device = current_device();
  check_device_index(device);
  std::lock_guard<std::mutex> lock(mutex);
  if (!generators[device].defined()) generators[device] = new_generator(device);
  return generators[device];
}

}  // namespace neuron
