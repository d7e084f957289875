// LocalCopy's v forms: allgather_v, reduce_scatter_v and alltoall_v (the protocol: local_copy.h).
#include <fmt/format.h>

#include <cstring>

#include "comm/algorithms/local_copy.h"
#include "comm/algorithms/scratch.h"
#include "core/error.h"

namespace strait::comm {

void LocalCopy::check_pair_counts() const {
  const int p = group().size();
  for (int i = 0; i < p; ++i) {
    for (int j = 0; j < p; ++j) {
      const std::uint64_t sends = published(i, 4 + j);
      const std::uint64_t expects = published(j, 4 + p + i);
      if (sends == expects) continue;
      throw Error(
          ErrorCode::Mismatch,
          fmt::format("alltoall_v: {} would send {} elements to {}, whose recv_counts[{}] "
                      "is {}: rank i's send_counts[j] must equal rank j's recv_counts[i]",
                      group().describe_rank(i), sends, group().describe_rank(j), i, expects));
    }
  }
}

void LocalCopy::copy_v() {
  const auto p = static_cast<std::size_t>(group().size());
  const auto me = static_cast<std::size_t>(group().rank);
  const auto* send = static_cast<const std::byte*>(b_.send);
  auto* recv = static_cast<std::byte*>(b_.recv);
  const auto length = [](const std::vector<std::size_t>& at, std::size_t q) {
    return at[q + 1] - at[q];
  };
  switch (kind_) {
    case Kind::AllgatherV: {
      const std::size_t own = length(offsets_, me);
      if (own != 0 && send != recv + offsets_[me]) std::memcpy(recv + offsets_[me], send, own);
      for (std::size_t k = 1; k < p; ++k) {
        const std::size_t q = (me + k) % p;
        const auto r = static_cast<int>(q);
        if (length(offsets_, q) != 0) {
          read(r, published(r, 0), recv + offsets_[q], length(offsets_, q));
        }
      }
      break;
    }
    case Kind::ReduceScatterV:
      if (length(offsets_, me) != 0) reduce_block(offsets_[me], recv, length(offsets_, me));
      break;
    case Kind::AlltoallV: {
      check_pair_counts();
      // In place (send_counts = recv_counts), a peer still reads this rank's block for it where
      // the block from it lands: stage, as alltoall.
      const bool in_place = send == recv;
      staged_ = in_place && recv_offsets_.back() != 0;
      if (staged_) scratch_ = scratch_buffer(recv_offsets_.back());
      std::byte* into = staged_ ? scratch_.get() : recv;
      if (!in_place) {
        std::memcpy(recv + recv_offsets_[me], send + offsets_[me], length(recv_offsets_, me));
      }
      const std::size_t elem = kernels::dtype_size(b_.dtype);
      for (std::size_t k = 1; k < p; ++k) {
        const std::size_t q = (me + k) % p;
        const auto r = static_cast<int>(q);
        if (length(recv_offsets_, q) == 0) continue;
        // This rank's block of q's send buffer starts at the sum of q's send counts before it.
        std::uint64_t at = 0;
        for (std::size_t j = 0; j < me; ++j) at += published(r, static_cast<int>(4 + j)) * elem;
        read(r, published(r, 0) + at, into + recv_offsets_[q], length(recv_offsets_, q));
      }
      break;
    }
    default: break;
  }
}

}  // namespace strait::comm
