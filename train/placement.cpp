#include "train/placement.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <numeric>

#include "core/error.h"

namespace strait::train {
namespace {

Error bad(const std::string& what) {
  return {ErrorCode::InvalidArgument, what};
}

}  // namespace

int placement_rank(std::span<const int> placement, int stages, int replica, int stage) {
  const int slot = replica * stages + stage;
  if (placement.empty()) return slot;
  if (slot < 0 || slot >= static_cast<int>(placement.size())) {
    throw bad(fmt::format("placement: slot (replica {}, stage {}) is outside the {} slots", replica,
                          stage, placement.size()));
  }
  return placement[static_cast<std::size_t>(slot)];
}

Slot placement_slot(std::span<const int> placement, int stages, int rank) {
  int slot = rank;
  if (!placement.empty()) {
    slot = -1;
    for (std::size_t i = 0; i < placement.size(); ++i) {
      if (placement[i] == rank) slot = static_cast<int>(i);
    }
    if (slot < 0) {
      throw bad(fmt::format("placement {}: rank {} runs no slot", fmt::join(placement, ","), rank));
    }
  }
  return {slot / stages, slot % stages};
}

bool identity_placement(std::span<const int> placement) {
  for (std::size_t i = 0; i < placement.size(); ++i) {
    if (placement[i] != static_cast<int>(i)) return false;
  }
  return true;
}

std::vector<int> placement_or_identity(std::span<const int> placement, int world_size) {
  if (!placement.empty()) return {placement.begin(), placement.end()};
  std::vector<int> out(static_cast<std::size_t>(world_size));
  std::iota(out.begin(), out.end(), 0);
  return out;
}

void check_placement(std::span<const int> placement, int stages, int replicas,
                     const std::string& option) {
  if (placement.empty()) return;
  const int world = stages * replicas;
  if (static_cast<int>(placement.size()) != world) {
    throw bad(fmt::format(
        "{} {} has {} entries, but --stages {} x --replicas {} is {} slots: give one world rank "
        "per (replica, stage) slot in replica-major order",
        option, fmt::join(placement, ","), placement.size(), stages, replicas, world));
  }
  std::vector<int> seen(static_cast<std::size_t>(world), 0);
  for (const int r : placement) {
    if (r < 0 || r >= world) {
      throw bad(fmt::format("{} {}: rank {} is outside the world's ranks 0..{}", option,
                            fmt::join(placement, ","), r, world - 1));
    }
    if (++seen[static_cast<std::size_t>(r)] > 1) {
      throw bad(fmt::format(
          "{} {} is not a permutation: rank {} runs two slots; name every rank 0..{} once", option,
          fmt::join(placement, ","), r, world - 1));
    }
  }
}

}  // namespace strait::train
