/// \file
/// The kinds of Communicator operation, and what each one is, in one table (the role of NCCL's
/// ncclFunc_t and its name table): its name, which ranks use its send and recv buffers, what its
/// count counts, and where CommStats counts the bytes it sends. The operation record
/// (comm/collective_args.h), its checks and descriptions, the fingerprint ranks exchange
/// (comm/algorithms/fingerprint.h) and the statistics all read this table, so a new kind is one
/// enumerator and one row (plus its check, its algorithm and, if NCCL has it, its NCCL call).
/// Thread-safety: constants.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

namespace strait::comm {

/// The device-capable kinds (those NCCL runs) come first, through Alltoall.
enum class CollectiveKind : std::uint8_t {
  Send,
  Recv,
  Broadcast,
  Allreduce,
  Allgather,
  ReduceScatter,
  Reduce,
  Gather,
  Scatter,
  Alltoall,
  /// Host memory only (NCCL has no equivalent):
  Barrier,
  AllreduceCompressed,
  AllgatherV,
  ReduceScatterV,
  AlltoallV,
};
/// Number of CollectiveKind enumerators (rows of kind_table::kRows).
inline constexpr std::size_t kCollectiveKinds = 15;

/// Which ranks use one of an operation's buffers (the others ignore it; it may be null there).
enum class BufferUse : std::uint8_t { None, All, Root };

/// CommStats' byte counters (comm/communicator.h): where a kind counts what it sends.
enum class StatSlot : std::uint8_t {
  None,
  Allreduce,
  Broadcast,
  Allgather,
  Send,
  ReduceScatter,
  Reduce,
  Gather,
  Scatter,
  Alltoall,
};
/// Number of StatSlot enumerators.
inline constexpr std::size_t kStatSlots = 10;

/// One row of the kind table: what an operation kind is.
struct CollectiveKindInfo {
  /// The kind this row describes (rows are in the enum's order).
  CollectiveKind kind;
  std::string_view name;  ///< the Communicator's name: "allreduce", "reduce_scatter_v", ...
  bool point_to_point;    ///< Send, Recv: `root` is the peer
  bool reduces;           ///< takes a ReduceOp
  bool rooted;            ///< has a root
  bool per_rank_counts;   ///< a v-form: per-rank counts instead of one count
  bool tuned;             ///< the selection table offers several algorithms (descriptions name one)
  /// Which ranks use the send buffer.
  BufferUse send;
  /// Which ranks use the recv buffer.
  BufferUse recv;
  /// How descriptions qualify the count: "" (the whole vector), " per rank", " per pair".
  std::string_view per;
  /// Point to point: "to" or "from" the peer.
  std::string_view direction;
  /// Where CommStats counts the bytes it sends.
  StatSlot stat;
};

namespace kind_table {
using enum CollectiveKind;
using enum BufferUse;
/// The table: one row per CollectiveKind, in the enum's order.
inline constexpr std::array<CollectiveKindInfo, kCollectiveKinds> kRows{{
    // kind, name, p2p, reduces, rooted, v, tuned, send, recv, per, direction, stat
    {Send, "send", true, false, false, false, false, All, None, "", "to", StatSlot::Send},
    {Recv, "recv", true, false, false, false, false, None, All, "", "from", StatSlot::None},
    {Broadcast, "broadcast", false, false, true, false, true, None, All, "", "",
     StatSlot::Broadcast},
    {Allreduce, "allreduce", false, true, false, false, true, All, All, "", "",
     StatSlot::Allreduce},
    {Allgather, "allgather", false, false, false, false, true, All, All, "", "",
     StatSlot::Allgather},
    {ReduceScatter, "reduce_scatter", false, true, false, false, true, All, All, " per rank", "",
     StatSlot::ReduceScatter},
    {Reduce, "reduce", false, true, true, false, true, All, Root, "", "", StatSlot::Reduce},
    {Gather, "gather", false, false, true, false, true, All, Root, " per rank", "",
     StatSlot::Gather},
    {Scatter, "scatter", false, false, true, false, true, Root, All, " per rank", "",
     StatSlot::Scatter},
    {Alltoall, "alltoall", false, false, false, false, true, All, All, " per pair", "",
     StatSlot::Alltoall},
    {Barrier, "barrier", false, false, false, false, false, None, None, "", "", StatSlot::None},
    {AllreduceCompressed, "allreduce_compressed", false, true, false, false, false, All, All, "",
     "", StatSlot::Allreduce},
    {AllgatherV, "allgather_v", false, false, false, true, true, All, All, "", "",
     StatSlot::Allgather},
    {ReduceScatterV, "reduce_scatter_v", false, true, false, true, true, All, All, "", "",
     StatSlot::ReduceScatter},
    {AlltoallV, "alltoall_v", false, false, false, true, true, All, All, "", "",
     StatSlot::Alltoall},
}};
}  // namespace kind_table

/// The rows are in the enum's order.
static_assert([] {
  for (std::size_t i = 0; i < kCollectiveKinds; ++i) {
    if (static_cast<std::size_t>(kind_table::kRows[i].kind) != i) return false;
  }
  return true;
}());

/// Whether `kind` names a row (a kind read from the network may not).
[[nodiscard]] constexpr bool known_kind(CollectiveKind kind) noexcept {
  return static_cast<std::size_t>(kind) < kCollectiveKinds;
}
/// The row of a known kind.
[[nodiscard]] constexpr const CollectiveKindInfo& kind_info(CollectiveKind kind) noexcept {
  return kind_table::kRows[static_cast<std::size_t>(kind)];
}
/// "allreduce", "reduce_scatter_v", ...; "operation" for an unknown kind.
[[nodiscard]] constexpr std::string_view collective_name(CollectiveKind kind) noexcept {
  return known_kind(kind) ? kind_info(kind).name : "operation";
}
/// The kinds NCCL runs when the buffers are device memory.
[[nodiscard]] constexpr bool device_capable(CollectiveKind kind) noexcept {
  return kind <= CollectiveKind::Alltoall;
}

}  // namespace strait::comm
