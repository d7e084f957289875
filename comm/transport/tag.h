// Layout of the 64-bit message tags that the transports match on.
//
//   63........52 51..........38 37 36..34 33..........16 15..........0
//   [ comm id  ][ source rank  ][P][lane ][ coll. seq    ][ step       ]   P = 0: collective
//   [ comm id  ][ source rank  ][P][ user tag (37 bits)                ]   P = 1: send/recv
//
// The source rank is part of the tag because UCP tag matching ignores the sender; with it, a
// receive names its peer exactly. The lane is 0 as algorithms post a message; a transport that
// stripes a message over several connections to a peer (STRAIT_STREAMS, ucx_transport.h) sends
// part i with lane i, so the parts match their receives whatever order they arrive in.
// Limits that follow: 4096 communicators per job, 16384 ranks per communicator, 8 lanes,
// collective sequence numbers wrap at 2^18 (only operations that far apart could be confused, and
// ops complete in order), 65535 steps per collective (step 65535 carries the operation's
// fingerprint, comm/algorithms/collective_op.h), user tags < 2^37.
// Peers on this host have one lane, so UcxTransport's single-copy path (ucx_transport.h) marks its
// control messages with lanes there: lane 4 an announcement that stands in for a collective
// message (its receive ignores that bit, so it takes the data or the announcement), lane 2 the
// receiver's "done reading" back to the sender, with the receiver as the source rank (a message
// sent to several peers under one tag gets one "done" from each).
#pragma once

#include <cstdint>

namespace strait::comm {

using Tag = std::uint64_t;

inline constexpr int kMaxComms = 1 << 12;
inline constexpr int kMaxRanks = 1 << 14;
inline constexpr std::uint64_t kSeqMask = (1ULL << 18) - 1;
inline constexpr int kLaneShift = 34;
inline constexpr int kMaxLanes = 8;
inline constexpr int kMaxSteps = 1 << 16;
inline constexpr int kHeaderStep = kMaxSteps - 1;  // the fingerprint exchange of a collective
inline constexpr std::uint64_t kMaxUserTag = (1ULL << 37) - 1;
inline constexpr Tag kSingleCopyAnnounceBit = Tag{4} << kLaneShift;
inline constexpr Tag kSingleCopyDoneBit = Tag{2} << kLaneShift;
inline constexpr int kSourceShift = 38;
inline constexpr Tag kSourceBits = static_cast<Tag>(kMaxRanks - 1) << kSourceShift;

constexpr Tag collective_tag(int comm_id, int src, std::uint64_t seq, int step) noexcept {
  return (static_cast<Tag>(comm_id) << 52) | (static_cast<Tag>(src) << 38) |
         ((seq & kSeqMask) << 16) | static_cast<Tag>(step & (kMaxSteps - 1));
}

// A collective tag's part sent over lane `lane` (< kMaxLanes).
constexpr Tag with_lane(Tag tag, int lane) noexcept {
  return tag | (static_cast<Tag>(lane & (kMaxLanes - 1)) << kLaneShift);
}

// The tag with `src` as its source rank.
constexpr Tag with_source(Tag tag, int src) noexcept {
  return (tag & ~kSourceBits) | (static_cast<Tag>(src & (kMaxRanks - 1)) << 38);
}

constexpr bool is_collective_tag(Tag tag) noexcept {
  return ((tag >> 37) & 1) == 0;
}

constexpr Tag p2p_tag(int comm_id, int src, std::uint64_t user_tag) noexcept {
  return (static_cast<Tag>(comm_id) << 52) | (static_cast<Tag>(src) << 38) | (1ULL << 37) |
         (user_tag & kMaxUserTag);
}

}  // namespace strait::comm
