#include "comm/algorithms/local_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/algorithms/local_mailbox.h"
#include "comm/transport/peer_memory.h"

namespace strait::comm {
namespace {

// reduce_scatter reads a peer's block in pieces this size and reduces each while it is in cache.
constexpr std::size_t kPiece = 256 << 10;

std::uint64_t address(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

}  // namespace

LocalCopy::LocalCopy(OpContext ctx, Kind kind, const Buffers& b)
    : CollectiveOp(std::move(ctx)),
      kind_(kind),
      b_(b),
      block_(b.count * kernels::dtype_size(b.dtype)),
      addresses_{address(kind == Kind::Broadcast ? b.recv : b.send), address(b.recv)},
      publish_(*group().mailbox, group(), addresses_, nullptr, 2, kernels::DType::I64,
               kernels::ReduceOp::Sum),
      done_(*group().mailbox, group(), nullptr, nullptr, 0, kernels::DType::U8,
            kernels::ReduceOp::Sum) {}

bool LocalCopy::round(Transport& t, MailboxCall& call) {
  const Fingerprint f = fingerprint() != nullptr ? *fingerprint() : Fingerprint{};
  if (!call.try_post(f, announcement())) return false;
  if (call.try_finish()) return true;
  call.check_announced();
  const int r = call.waiting_on();
  const int world = group().world_ranks.at(static_cast<std::size_t>(r));
  if (const auto& lost = t.peer_lost(world); !lost.empty()) {
    throw call.lost_error(lost + also_gone(r, &t));
  }
  return false;
}

std::string LocalCopy::also_gone(int r, const Transport* t) const {
  // The awaited rank may have exited on the error of another's loss: name every rank gone.
  std::string also;
  for (int q = 0; q < group().size(); ++q) {
    if (q == r || q == group().rank) continue;
    const int world = group().world_ranks.at(static_cast<std::size_t>(q));
    if (group().mailbox->peer_exited(q) || (t != nullptr && !t->peer_lost(world).empty())) {
      also += fmt::format("; also gone: {}'s process exited", group().describe_rank(q));
    }
  }
  return also;
}

void LocalCopy::read(int r, std::uint64_t at, std::byte* into, std::size_t len) const {
  const LocalMailbox& box = *group().mailbox;
  const PeerRead got = read_peer_memory(box.pid(r), at, into, len);
  // A readable pidfd: the pid may since name another process, whose bytes these would be.
  // ESRCH: the process is gone (its pidfd may not say so yet).
  if (got.error == ESRCH || box.peer_exited(r)) {
    throw Error(ErrorCode::PeerLost,
                fmt::format("{}'s process exited while this rank read {} bytes of its memory "
                            "(single copy){}",
                            group().describe_rank(r), len, also_gone(r, nullptr)));
  }
  if (got.error != 0) {
    throw Error(ErrorCode::PeerLost,
                fmt::format("reading {} bytes from the memory of {} failed after {}: {} (it "
                            "left the collective: it failed, or its caller freed the buffer){}",
                            len, group().describe_rank(r), got.bytes, std::strerror(got.error),
                            also_gone(r, nullptr)));
  }
}

void LocalCopy::reduce_own_block() {
  const int p = group().size();
  const int me = group().rank;
  const std::size_t elem = kernels::dtype_size(b_.dtype);
  const auto op = b_.op == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : b_.op;
  const LocalMailbox& box = *group().mailbox;
  const auto* own = static_cast<const std::byte*>(b_.send) + me * block_;
  auto* out = static_cast<std::byte*>(b_.recv);
  scratch_ = std::make_unique_for_overwrite<std::byte[]>(std::min(kPiece, block_));
  for (std::size_t at = 0; at < block_; at += kPiece) {
    const std::size_t m = std::min(kPiece, block_ - at);
    if (own != out) std::memcpy(out + at, own + at, m);
    for (int k = 1; k < p; ++k) {
      const int q = (me + k) % p;
      std::uint64_t base = 0;
      std::memcpy(&base, box.of(q, publish_.ticket()).data, sizeof base);
      read(q, base + me * block_ + at, scratch_.get(), m);
      kernels::reduce(b_.dtype, op, out + at, scratch_.get(), m / elem);
    }
  }
  if (b_.op == kernels::ReduceOp::Avg) kernels::scale(b_.dtype, out, b_.count, 1.0 / p);
}

void LocalCopy::copy_from_peers() {
  const int p = group().size();
  const int me = group().rank;
  const LocalMailbox& box = *group().mailbox;
  const auto peer_send = [&](int q) {
    std::uint64_t a = 0;
    std::memcpy(&a, box.of(q, publish_.ticket()).data, sizeof a);
    return a;
  };
  const auto* send = static_cast<const std::byte*>(b_.send);
  auto* recv = static_cast<std::byte*>(b_.recv);
  switch (kind_) {
    case Kind::Broadcast:
      if (me != b_.root && block_ != 0) read(b_.root, peer_send(b_.root), recv, block_);
      break;
    case Kind::Allgather:
      if (send != recv + me * block_) std::memcpy(recv + me * block_, send, block_);
      for (int k = 1; k < p; ++k) {
        const int q = (me + k) % p;
        read(q, peer_send(q), recv + q * block_, block_);
      }
      break;
    case Kind::ReduceScatter: reduce_own_block(); break;
    case Kind::Alltoall: {
      // In place a peer still reads block q of this buffer, where block q from it lands: stage.
      const bool in_place = send == recv;
      if (in_place) scratch_ = std::make_unique_for_overwrite<std::byte[]>(p * block_);
      std::byte* into = in_place ? scratch_.get() : recv;
      if (!in_place) std::memcpy(recv + me * block_, send + me * block_, block_);
      for (int k = 1; k < p; ++k) {
        const int q = (me + k) % p;
        read(q, peer_send(q) + me * block_, into + q * block_, block_);
      }
      break;
    }
  }
}

bool LocalCopy::advance(Transport& t) {
  if (!copied_) {
    if (!round(t, publish_)) return false;
    if (block_ != 0) copy_from_peers();
    copied_ = true;
  }
  if (!round(t, done_)) return false;
  if (kind_ == Kind::Alltoall && scratch_) {  // in place: every peer has read this buffer
    auto* recv = static_cast<std::byte*>(b_.recv);
    for (int q = 0; q < group().size(); ++q) {
      if (q != group().rank) std::memcpy(recv + q * block_, scratch_.get() + q * block_, block_);
    }
  }
  // What the peers read from this rank.
  const bool sends = kind_ != Kind::Broadcast || group().rank == b_.root;
  count_sent(sends ? block_ * static_cast<std::size_t>(group().size() - 1) : 0);
  return true;
}

std::string LocalCopy::waiting_for() const {
  if (!copied_) return publish_.waiting_for();
  return fmt::format("{} to finish reading this rank's memory (single copy); {}",
                     done_.waiting_on() >= 0 ? group().describe_rank(done_.waiting_on())
                                             : std::string("the peers"),
                     done_.waiting_for());
}

}  // namespace strait::comm
