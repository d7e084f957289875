#include "comm/algorithms/fingerprint.h"

#include <fmt/format.h>

#include <array>
#include <bit>

#include "comm/algorithms/selection.h"
#include "kernels/dtype.h"
#include "kernels/reduce.h"

namespace strait::comm {

std::string Fingerprint::algorithm_suffix() const {
  if (algorithm == 0) return {};
  const AlgorithmInfo* info = algorithm_by_id(algorithm);
  if (info == nullptr) return fmt::format(", algorithm #{}", algorithm);
  return ", " + Selection{info, AlgorithmParams{segment_bytes}}.describe();
}

std::string Fingerprint::describe() const {
  if (!known_kind(kind)) {
    return fmt::format("an unknown operation (kind {}) #{}", static_cast<int>(kind), seq);
  }
  const CollectiveKindInfo& info = kind_info(kind);
  if (info.send == BufferUse::None && info.recv == BufferUse::None) {
    return fmt::format("{} #{}", info.name, seq);
  }
  const auto t = kernels::dtype_name(static_cast<kernels::DType>(dtype));
  if (kind == Kind::AlltoallV) {
    return fmt::format("{} #{} ({}, {} elements to the peer and {} back)", info.name, seq, t, count,
                       counts);
  }
  std::string detail =
      fmt::format("{} x {}{}", t, count, info.per_rank_counts ? " in all" : info.per);
  if (info.reduces) {
    detail += fmt::format(", {}", kernels::reduce_op_name(static_cast<kernels::ReduceOp>(op)));
  }
  if (info.rooted) detail += fmt::format(", root {}", root);
  if (info.per_rank_counts) detail += fmt::format(", counts hash {:#018x}", counts);
  if (kind == Kind::AllreduceCompressed)
    detail += fmt::format(", codec spec hash {:#018x}", counts);
  if (info.tuned) detail += algorithm_suffix();
  return fmt::format("{} #{} ({})", info.name, seq, detail);
}

// Sent as raw bytes and compared with ==: nothing but plain fields, no padding (whose bytes would
// be indeterminate).
static_assert(std::is_trivially_copyable_v<Fingerprint> &&
              std::has_unique_object_representations_v<Fingerprint>);

std::uint64_t codec_spec_hash(std::string_view spec) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : spec) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ULL;
  return h;
}

std::uint64_t fingerprint_hash(const Fingerprint& f) noexcept {
  const auto words = std::bit_cast<std::array<std::uint64_t, sizeof(Fingerprint) / 8>>(f);
  std::uint64_t h = 0x9e3779b97f4a7c15ULL;
  for (const std::uint64_t w : words) {  // SplitMix64's finaliser over each word in turn
    h ^= w;
    h = (h ^ (h >> 30)) * 0xbf58476d1ce4e5b9ULL;
    h = (h ^ (h >> 27)) * 0x94d049bb133111ebULL;
    h ^= h >> 31;
  }
  return h;
}

std::uint64_t counts_hash(std::span<const std::size_t> counts) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;  // FNV-1a offset basis and prime
  for (const std::size_t c : counts) {
    auto v = static_cast<std::uint64_t>(c);
    for (int i = 0; i < 8; ++i, v >>= 8) {
      h = (h ^ (v & 0xffU)) * 0x100000001b3ULL;
    }
  }
  return h;
}

}  // namespace strait::comm
