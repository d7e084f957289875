#include "comm/algorithms/local_copy.h"

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "comm/algorithms/local_mailbox.h"
#include "comm/algorithms/scratch.h"
#include "comm/symmetric_heap.h"
#include "comm/transport/partition.h"
#include "comm/transport/peer_memory.h"

namespace strait::comm {
namespace {

// Reductions read a peer's data in pieces this size and reduce each while it is in cache.
constexpr std::size_t kPiece = 256 << 10;

std::uint64_t address(const void* p) {
  return reinterpret_cast<std::uintptr_t>(p);
}

// The id of the symmetric buffer holding [p, p + len) on this rank, 0 when none.
std::uint64_t symmetric_id(const Group& g, const void* p, std::size_t len) {
  return g.symmetric && p != nullptr ? g.symmetric->id_of(p, len) : 0;
}

// Byte offsets of blocks of `counts` elements packed in rank order: size() + 1 entries; none
// without counts (the forms with one count).
std::vector<std::size_t> offsets_of(std::span<const std::size_t> counts, std::size_t elem) {
  if (counts.empty()) return {};
  std::vector<std::size_t> at(counts.size() + 1, 0);
  for (std::size_t q = 0; q < counts.size(); ++q) at[q + 1] = at[q] + counts[q] * elem;
  return at;
}

// What a rank publishes (LocalCopy::words_).
std::vector<std::uint64_t> published_words(LocalCopy::Kind kind, const LocalCopy::Buffers& b) {
  std::vector<std::uint64_t> w{address(kind == LocalCopy::Kind::Broadcast ? b.recv : b.send),
                               address(b.recv), 0, 0};
  if (kind == LocalCopy::Kind::AlltoallV) {
    w.insert(w.end(), b.counts.begin(), b.counts.end());
    w.insert(w.end(), b.recv_counts.begin(), b.recv_counts.end());
  }
  return w;
}

}  // namespace

LocalCopy::LocalCopy(OpContext ctx, Kind kind, const Buffers& b)
    : CollectiveOp(std::move(ctx)),
      kind_(kind),
      b_(b),
      block_(b.count * kernels::dtype_size(b.dtype)),
      offsets_(offsets_of(b.counts, kernels::dtype_size(b.dtype))),
      recv_offsets_(offsets_of(b.recv_counts, kernels::dtype_size(b.dtype))),
      words_(published_words(kind, b)),
      publish_(*group().mailbox, group(), words_.data(), nullptr, words_.size(),
               kernels::DType::I64, kernels::ReduceOp::Sum),
      reduced_(kind == Kind::Allreduce || kind == Kind::Reduce
                   ? std::optional<MailboxCall>(std::in_place, *group().mailbox, group(), nullptr,
                                                nullptr, 0, kernels::DType::U8,
                                                kernels::ReduceOp::Sum)
                   : std::nullopt),
      done_(*group().mailbox, group(), nullptr, nullptr, 0, kernels::DType::U8,
            kernels::ReduceOp::Sum) {
  // Copied into offsets_ and words_: the caller's spans need not outlive the call.
  b_.counts = {};
  b_.recv_counts = {};
  // The extent of each buffer that peers read, for the symmetric lookup.
  words_[2] = symmetric_id(group(), kind == Kind::Broadcast ? b.recv : b.send, send_extent());
  words_[3] = symmetric_id(group(), b.recv, recv_extent());
}

bool LocalCopy::is_v() const noexcept {
  return kind_ == Kind::AllgatherV || kind_ == Kind::ReduceScatterV || kind_ == Kind::AlltoallV;
}

std::size_t LocalCopy::own_block(const std::vector<std::size_t>& offsets) const {
  const auto me = static_cast<std::size_t>(group().rank);
  return offsets[me + 1] - offsets[me];
}

std::size_t LocalCopy::send_extent() const {
  const auto p = static_cast<std::size_t>(group().size());
  switch (kind_) {
    case Kind::ReduceScatter:
    case Kind::Alltoall:
    case Kind::Scatter: return block_ * p;
    case Kind::AllgatherV: return own_block(offsets_);
    case Kind::ReduceScatterV:
    case Kind::AlltoallV: return offsets_.back();
    default: return block_;  // broadcast, allgather, allreduce, reduce, gather: one block
  }
}

std::size_t LocalCopy::recv_extent() const {
  const auto p = static_cast<std::size_t>(group().size());
  switch (kind_) {
    case Kind::Allgather:
    case Kind::Alltoall:
    case Kind::Gather: return block_ * p;
    case Kind::AllgatherV: return offsets_.back();
    case Kind::ReduceScatterV: return own_block(offsets_);
    case Kind::AlltoallV: return recv_offsets_.back();
    default: return block_;  // broadcast, reduce_scatter, allreduce, reduce, scatter
  }
}

std::size_t LocalCopy::read_from_here() const {
  const int p = group().size();
  const int me = group().rank;
  const auto peers = static_cast<std::size_t>(p - 1);
  switch (kind_) {
    case Kind::Broadcast:
    case Kind::Scatter: return me == b_.root ? block_ * peers : 0;
    case Kind::Gather: return me == b_.root ? 0 : block_;
    case Kind::Allreduce: return block_ / static_cast<std::size_t>(p) * 2 * peers;
    case Kind::Reduce: {  // the peers' chunks of its input; a non-root's own reduced chunk
      const std::size_t own =
          part(b_.count, static_cast<std::size_t>(p), static_cast<std::size_t>(me)).count *
          kernels::dtype_size(b_.dtype);
      return me == b_.root ? block_ - own : block_;
    }
    case Kind::AllgatherV: return own_block(offsets_) * peers;
    case Kind::ReduceScatterV:
    case Kind::AlltoallV: return offsets_.back() - own_block(offsets_);
    default: return block_ * peers;  // allgather, reduce_scatter, alltoall
  }
}

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

std::uint64_t LocalCopy::published(int r, int word) const {
  std::uint64_t v = 0;
  std::memcpy(&v, group().mailbox->of(r, publish_.ticket()).data + word * sizeof v, sizeof v);
  return v;
}

const std::byte* LocalCopy::mapped(int r, std::uint64_t at, std::size_t len, bool recv) const {
  if (!group().symmetric) return nullptr;
  return group().symmetric->find(r, published(r, recv ? 3 : 2), at, len);
}

void LocalCopy::read(int r, std::uint64_t at, std::byte* into, std::size_t len, bool recv) const {
  if (const std::byte* in_place = mapped(r, at, len, recv)) {
    std::memcpy(into, in_place, len);
    group().symmetric->count_in_place(len);
    return;
  }
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

void LocalCopy::reduce_block(std::size_t offset, std::byte* out, std::size_t bytes) {
  const int p = group().size();
  const int me = group().rank;
  const std::size_t elem = kernels::dtype_size(b_.dtype);
  const auto op = b_.op == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : b_.op;
  const auto* own = static_cast<const std::byte*>(b_.send) + offset;
  if (!scratch_) scratch_ = scratch_buffer(std::min(kPiece, bytes));
  for (std::size_t at = 0; at < bytes; at += kPiece) {
    const std::size_t m = std::min(kPiece, bytes - at);
    if (own != out) std::memcpy(out + at, own + at, m);
    for (int k = 1; k < p; ++k) {
      const int q = (me + k) % p;
      const std::uint64_t theirs = published(q, 0) + offset + at;
      const std::byte* in = mapped(q, theirs, m, false);
      if (in != nullptr) {
        group().symmetric->count_in_place(m);
      } else {
        read(q, theirs, scratch_.get(), m);
        in = scratch_.get();
      }
      kernels::reduce(b_.dtype, op, out + at, in, m / elem);
    }
  }
  if (b_.op == kernels::ReduceOp::Avg) kernels::scale(b_.dtype, out, bytes / elem, 1.0 / p);
}

void LocalCopy::copy_from_peers() {
  const int p = group().size();
  const int me = group().rank;
  const auto* send = static_cast<const std::byte*>(b_.send);
  auto* recv = static_cast<std::byte*>(b_.recv);
  switch (kind_) {
    case Kind::Broadcast:
      if (me != b_.root) read(b_.root, published(b_.root, 0), recv, block_);
      break;
    case Kind::Allgather:
      if (send != recv + me * block_) std::memcpy(recv + me * block_, send, block_);
      for (int k = 1; k < p; ++k) {
        const int q = (me + k) % p;
        read(q, published(q, 0), recv + q * block_, block_);
      }
      break;
    case Kind::ReduceScatter: reduce_block(me * block_, recv, block_); break;
    case Kind::Alltoall: {
      // In place a peer still reads block q of this buffer, where block q from it lands: stage.
      const bool in_place = send == recv;
      staged_ = in_place;
      if (in_place) scratch_ = scratch_buffer(p * block_);
      std::byte* into = in_place ? scratch_.get() : recv;
      if (!in_place) std::memcpy(recv + me * block_, send + me * block_, block_);
      for (int k = 1; k < p; ++k) {
        const int q = (me + k) % p;
        read(q, published(q, 0) + me * block_, into + q * block_, block_);
      }
      break;
    }
    case Kind::Allreduce: {
      const std::size_t elem = kernels::dtype_size(b_.dtype);
      const Part c = part(b_.count, static_cast<std::size_t>(p), static_cast<std::size_t>(me));
      if (c.count != 0) reduce_block(c.offset * elem, recv + c.offset * elem, c.count * elem);
      break;
    }
    case Kind::Reduce:
    case Kind::Gather:
    case Kind::Scatter: copy_rooted(); break;
    case Kind::AllgatherV:
    case Kind::ReduceScatterV:
    case Kind::AlltoallV: copy_v(); break;
  }
}

void LocalCopy::gather_reduced() {
  // Allreduce: every rank reads every peer's reduced chunk from its output; reduce: the root
  // reads them from the peers' scratch (published as their receive address), at its start.
  if (kind_ == Kind::Reduce && group().rank != b_.root) return;
  const int p = group().size();
  const std::size_t elem = kernels::dtype_size(b_.dtype);
  auto* recv = static_cast<std::byte*>(b_.recv);
  for (int k = 1; k < p && block_ != 0; ++k) {
    const int q = (group().rank + k) % p;
    const Part c = part(b_.count, static_cast<std::size_t>(p), static_cast<std::size_t>(q));
    const std::uint64_t at = kind_ == Kind::Reduce ? 0 : c.offset * elem;
    if (c.count != 0) {
      read(q, published(q, 1) + at, recv + c.offset * elem, c.count * elem, true);
    }
  }
}

bool LocalCopy::advance(Transport& t) {
  if (!copied_) {
    if (kind_ == Kind::Reduce && group().rank != b_.root && !result_) {
      // A non-root's reduced chunk lives here until the root has read it: published as its
      // receive address.
      const auto p = static_cast<std::size_t>(group().size());
      const Part c = part(b_.count, p, static_cast<std::size_t>(group().rank));
      result_ = scratch_buffer(std::max<std::size_t>(c.count * kernels::dtype_size(b_.dtype), 1));
      words_[1] = address(result_.get());
    }
    if (!round(t, publish_)) return false;
    if (block_ != 0 || is_v()) copy_from_peers();  // the v forms skip their empty blocks
    copied_ = true;
  }
  if (reduced_ && !gathered_) {  // allreduce, reduce: every chunk reduced, then gather them
    if (!round(t, *reduced_)) return false;
    gather_reduced();
    gathered_ = true;
  }
  if (!round(t, done_)) return false;
  if (staged_) {  // in-place alltoall(_v): every peer has read this buffer
    auto* recv = static_cast<std::byte*>(b_.recv);
    for (int q = 0; q < group().size(); ++q) {
      if (q == group().rank) continue;
      const auto i = static_cast<std::size_t>(q);
      const std::size_t at = kind_ == Kind::AlltoallV ? recv_offsets_[i] : i * block_;
      const std::size_t len = kind_ == Kind::AlltoallV ? recv_offsets_[i + 1] - at : block_;
      std::memcpy(recv + at, scratch_.get() + at, len);
    }
  }
  count_sent(read_from_here());
  return true;
}

std::string LocalCopy::waiting_for() const {
  if (!copied_) return publish_.waiting_for();
  if (reduced_ && !gathered_) {
    return fmt::format("every rank to reduce its chunk; {}", reduced_->waiting_for());
  }
  return fmt::format("{} to finish reading this rank's memory (single copy); {}",
                     done_.waiting_on() >= 0 ? group().describe_rank(done_.waiting_on())
                                             : std::string("the peers"),
                     done_.waiting_for());
}

}  // namespace strait::comm
