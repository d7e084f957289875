#include "offload/adamw_state.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "core/error.h"

namespace strait::offload {

void AdamWState::step(std::span<float> params, std::span<const float> grads,
                      const kernels::AdamWHyper& hyper, std::int64_t t) {
  const DecayGroup all{0, count(), hyper.weight_decay};
  step(params, grads, {&all, 1}, hyper, t);
}

namespace detail {

std::vector<DecayGroup> checked_groups(std::span<const DecayGroup> groups, std::size_t count) {
  std::vector<DecayGroup> sorted(groups.begin(), groups.end());
  std::sort(sorted.begin(), sorted.end(),
            [](const DecayGroup& a, const DecayGroup& b) { return a.offset < b.offset; });
  std::size_t next = 0;
  for (const DecayGroup& g : sorted) {
    if (g.offset > next) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: parameters [{}, {}) are in no decay group; groups "
                              "must cover [0, {}) exactly",
                              next, g.offset, count));
    }
    if (g.offset < next) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay groups overlap at parameter {}; groups must "
                              "cover [0, {}) exactly",
                              g.offset, count));
    }
    if (g.count > count - g.offset) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay group [{}, +{}) ends past the {} parameters",
                              g.offset, g.count, count));
    }
    if (!(g.weight_decay >= 0.0 && std::isfinite(g.weight_decay))) {
      throw Error(ErrorCode::InvalidArgument,
                  fmt::format("adamw offload: decay group at {} has weight_decay {}: it must be "
                              "finite and >= 0",
                              g.offset, g.weight_decay));
    }
    next = g.offset + g.count;
  }
  if (next != count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: decay groups cover [0, {}) but there are {} parameters",
                            next, count));
  }
  return sorted;
}

void check_length(const char* what, std::size_t got, std::size_t count) {
  if (got != count) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: {} has {} elements but the state holds {} parameters",
                            what, got, count));
  }
}

std::vector<DecayGroup> check_step(std::span<const float> params, std::span<const float> grads,
                                   std::span<const DecayGroup> groups,
                                   const kernels::AdamWHyper& hyper, std::int64_t t,
                                   std::size_t count) {
  check_length("params", params.size(), count);
  check_length("grads", grads.size(), count);
  if (t < 1) {
    throw Error(ErrorCode::InvalidArgument,
                fmt::format("adamw offload: step is {} but counts from 1", t));
  }
  kernels::validate(hyper);
  return checked_groups(groups, count);
}

void adamw_range(kernels::ParallelAdamW& opt, std::span<const DecayGroup> sorted,
                 std::size_t& first_group, std::size_t lo, std::span<float> params,
                 std::span<const float> grads, std::span<float> m, std::span<float> v,
                 const kernels::AdamWHyper& hyper, std::int64_t t) {
  const std::size_t hi = lo + m.size();
  while (first_group < sorted.size() &&
         sorted[first_group].offset + sorted[first_group].count <= lo) {
    ++first_group;
  }
  for (std::size_t g = first_group; g < sorted.size() && sorted[g].offset < hi; ++g) {
    const std::size_t a = std::max(lo, sorted[g].offset);
    const std::size_t b = std::min(hi, sorted[g].offset + sorted[g].count);
    if (a >= b) continue;
    kernels::AdamWHyper h = hyper;
    h.weight_decay = sorted[g].weight_decay;
    opt.step(params.subspan(a, b - a), grads.subspan(a, b - a), m.subspan(a - lo, b - a),
             v.subspan(a - lo, b - a), h, t);
  }
}

}  // namespace detail
}  // namespace strait::offload
