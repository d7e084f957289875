// Fingerprint: what a collective is, as every rank must agree, and the header every collective
// sends its peers ahead of its data (comm/algorithms/collective_op.h exchanges it).
// Bytes from the network: a received header is any 40 bytes; describe() and == are defined for
// every bit pattern (unknown kinds, dtypes, ops and algorithms are named as such), which the fuzz
// target tests/fuzz/fingerprint_fuzz.cpp checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "comm/algorithms/collective_kind.h"

namespace strait::comm {

// FNV-1a (64-bit) over the values of `counts`: ranks that pass different counts to a v-collective
// get different fingerprints (Fingerprint::counts; a collision has a chance of 2^-64).
std::uint64_t counts_hash(std::span<const std::size_t> counts) noexcept;
// FNV-1a (64-bit) over the bytes of a codec spec (compressed collectives put it in counts).
std::uint64_t codec_spec_hash(std::string_view spec) noexcept;

struct Fingerprint;
// A 64-bit hash of every field of `f` (the shared-memory mailbox carries it in a slot's first
// cache line instead of the 40 bytes; a collision has a chance of about 2^-64).
std::uint64_t fingerprint_hash(const Fingerprint& f) noexcept;

// What a collective is, as every rank must agree: kind, sequence number, dtype, count, op, root.
// Ranks exchange it (comm/transport/tag.h's header step) ahead of the operation's first message to
// each peer, so ranks that disagree fail with Mismatch naming both sides rather than hang or reduce
// data of the wrong size or type. Sent as raw bytes: all ranks run the same build.
// The newer collectives use the fields so: count is per rank for reduce_scatter, gather, scatter
// and alltoall, the total for the v-forms, and for alltoall_v what the header's sender sends its
// receiver; counts is counts_hash() of a v-form's counts, and for alltoall_v what the header's
// sender expects back (CollectiveOp::set_pair_counts); root is also reduce's, gather's and
// scatter's, op also reduce_scatter's and reduce's; a compressed allreduce's counts is the
// codec_spec_hash() of its codec spec (PowerSGD's: PowerSgdPlan::hash(), spec and layout).
struct Fingerprint {
  using Kind = CollectiveKind;  // collectives only (not Send and Recv)
  std::uint64_t seq = 0;
  std::uint64_t count = 0;   // elements
  std::uint64_t counts = 0;  // v-forms: FNV-1a hash of the per-rank counts (alltoall_v: per pair)
  std::int32_t root = -1;    // rooted collectives (broadcast, reduce, gather, scatter)
  Kind kind = Kind::Barrier;
  std::uint8_t dtype = 0;  // kernels::DType
  std::uint8_t op = 0;     // kernels::ReduceOp (reducing collectives)
  // The algorithm and its parameters (comm/algorithms/selection.h; 0: the collective has one).
  // Ranks with different tuning tables then fail with Mismatch rather than hang.
  std::uint8_t algorithm = 0;
  std::uint64_t segment_bytes = 0;
  bool operator==(const Fingerprint&) const = default;
  // "allreduce #3 (f32 x 9, sum, ring@seg=1M)".
  [[nodiscard]] std::string describe() const;
  // ", ring@seg=1M": the algorithm, for describe(); empty when none was selected.
  [[nodiscard]] std::string algorithm_suffix() const;
};
// Sent as raw bytes: no padding, nothing but plain fields.
static_assert(std::is_trivially_copyable_v<Fingerprint> && sizeof(Fingerprint) == 40);

}  // namespace strait::comm
