#include "comm/algorithms/ring_allgather.h"

#include <vector>

namespace strait::comm {

RingAllgather::RingAllgather(std::shared_ptr<const Group> group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* out,
                             std::span<const std::size_t> bytes)
    : RingOp(std::move(group), seq, bytes_sent),
      phase_{.own_send = static_cast<const std::byte*>(send),
             .out = static_cast<std::byte*>(out),
             .blocks = Blocks::packed(bytes)} {}

RingAllgather::RingAllgather(const std::shared_ptr<const Group>& group, std::uint64_t seq,
                             std::atomic<std::uint64_t>* bytes_sent, const void* send, void* out,
                             std::size_t bytes)
    : RingAllgather(group, seq, bytes_sent, send, out,
                    std::vector<std::size_t>(group->world_ranks.size(), bytes)) {}

bool RingAllgather::advance(Transport& t) {
  return advance_phase(t, phase_);
}

}  // namespace strait::comm
