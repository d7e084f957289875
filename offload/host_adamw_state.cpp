#include "offload/host_adamw_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace strait::offload {

HostAdamWState::HostAdamWState(std::size_t count, const HostAdamWStateOptions& options)
    : count_(count), opt_(options.threads) {
  const std::size_t page = page_size();
  v_offset_ = (count * sizeof(float) + page - 1) / page * page;
  memory_ = PinnedBuffer(2 * v_offset_);
}

unsigned HostAdamWState::threads() const noexcept {
  return opt_.threads();
}

std::string HostAdamWState::describe() const {
  return fmt::format("{:.1f} MiB in {} host RAM", static_cast<double>(memory_.size()) / (1 << 20),
                     memory_.locked() ? "locked" : "unlocked (mlock refused)");
}

std::span<float> HostAdamWState::m() const noexcept {
  // The mapping is page-aligned, so float access through it is aligned.
  return {reinterpret_cast<float*>(memory_.data()), count_};
}

std::span<float> HostAdamWState::v() const noexcept {
  return {reinterpret_cast<float*>(memory_.data() + v_offset_), count_};
}

void HostAdamWState::step(std::span<float> params, std::span<const float> grads,
                          std::span<const DecayGroup> groups, const kernels::AdamWHyper& hyper,
                          std::int64_t t) {
  const auto start = std::chrono::steady_clock::now();
  const std::vector<DecayGroup> sorted =
      detail::check_step(params, grads, groups, hyper, t, count_);
  if (count_ > 0) {
    std::size_t cursor = 0;
    detail::adamw_range(opt_, sorted, cursor, 0, params, grads, m(), v(), hyper, t);
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  stats_ = AdamWStepStats{.total_s = s, .compute_s = s};
}

void HostAdamWState::read_moments(std::span<float> m_out, std::span<float> v_out) {
  detail::check_length("m", m_out.size(), count_);
  detail::check_length("v", v_out.size(), count_);
  if (count_ == 0) return;
  std::copy_n(m().data(), count_, m_out.data());
  std::copy_n(v().data(), count_, v_out.data());
}

void HostAdamWState::write_moments(std::span<const float> m_in, std::span<const float> v_in) {
  detail::check_length("m", m_in.size(), count_);
  detail::check_length("v", v_in.size(), count_);
  if (count_ == 0) return;
  std::copy_n(m_in.data(), count_, m().data());
  std::copy_n(v_in.data(), count_, v().data());
}

}  // namespace strait::offload
