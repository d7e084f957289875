#include "comm/algorithms/mailbox_allreduce.h"

#include <fmt/format.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <memory>
#include <optional>
#include <thread>

#include "comm/algorithms/scratch.h"
#include "comm/transport/op.h"
#include "comm/transport/peer_memory.h"
#include "core/error.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace strait::comm {
namespace {

// memcpy in pieces of less than a core's L2 (1 MiB on machine A), from which glibc's memmove on AMD
// leaves `rep movsb` for a vector loop: a whole 1 MiB slot made a 2-rank call 2.2x as long as one
// of 1020 KiB (269 against 123 us; perf: memmove 69% of the call against 42%); in pieces, 109 us.
void copy_in_pieces(void* to, const void* from, std::size_t bytes) noexcept {
  constexpr std::size_t kPiece = 512 << 10;
  auto* out = static_cast<std::byte*>(to);
  const auto* in = static_cast<const std::byte*>(from);
  for (std::size_t at = 0; at < bytes; at += kPiece) {
    std::memcpy(out + at, in + at, std::min(kPiece, bytes - at));
  }
}

void relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

#if defined(__x86_64__) || defined(__i386__)
// PREFETCHW (a no-op on x86 processors without it), in assembly: the compiler drops the
// intrinsic where the build's target lacks the feature.
void prefetch_for_write(const void* p) noexcept {
  asm volatile("prefetchw %0" : : "m"(*static_cast<const char*>(p)));
}
#endif

}  // namespace

void claim_next_slot(LocalMailbox& box, std::size_t bytes) noexcept {
#if defined(__x86_64__) || defined(__i386__)
  const LocalMailbox::Slot& slot = box.mine(box.taken());
  prefetch_for_write(&slot.ticket);
  const std::size_t upto = std::min(bytes, MailboxCall::kPrefetchBytes);
  for (std::size_t at = MailboxCall::kTicketLineData; at < upto; at += 64) {
    prefetch_for_write(slot.data + at);
  }
#else
  (void)box;
  (void)bytes;
#endif
}

void MailboxCall::prefetch_lines(const LocalMailbox::Slot& slot) const noexcept {
#if defined(__x86_64__) || defined(__i386__)
  const std::size_t bytes = count_ * kernels::dtype_size(dtype_);
  if (bytes <= kTicketLineData || bytes > kPrefetchBytes) return;
  for (std::size_t at = kTicketLineData; at < bytes; at += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(slot.data + at), _MM_HINT_T0);
  }
#else
  (void)slot;
#endif
}

MailboxCall::MailboxCall(LocalMailbox& box, const Group& group, const void* send, void* recv,
                         std::size_t count, kernels::DType dtype, kernels::ReduceOp op)
    : box_(box),
      group_(group),
      send_(send),
      recv_(recv),
      count_(count),
      dtype_(dtype),
      op_(op),
      ticket_(box.take_ticket()),
      split_(recv != nullptr && group.size() >= 3 &&
             count * kernels::dtype_size(dtype) * static_cast<std::size_t>(group.size()) >=
                 kSplitMinWork) {}

bool MailboxCall::try_post(const Fingerprint& fingerprint,
                           std::optional<std::uint64_t> announcement) {
  if (posted_) return true;
  if (box_.finished() != ticket_) return false;  // an earlier call still reads (two slots)
  fingerprint_ = fingerprint;
  announcement_ = announcement;
  LocalMailbox::Slot& slot = box_.mine(ticket_);
  slot.fingerprint = fingerprint;
  slot.fingerprint_hash = fingerprint_hash(fingerprint);
  const std::size_t bytes = count_ * kernels::dtype_size(dtype_);
  // Split: a vector in a symmetric buffer stays there, and peers reduce it from their mappings
  // (safe without a further round: a peer reads it only before it publishes its reduced block,
  // and this rank returns only once every peer has).
  // Only split calls touch those fields: they lie a slot's length away from the ticket, and an
  // extra line written here and read by every peer cost 0.07 - 0.09 us of a 0.25 us 8-byte call.
  std::uint64_t serial = 0;
  if (split_) {
    serial = bytes != 0 ? own_serial_of(send_, bytes) : 0;
    slot.in_place_serial = serial;
    slot.in_place_address = reinterpret_cast<std::uintptr_t>(send_);
  }
  if (bytes != 0 && serial == 0) copy_in_pieces(slot.data, send_, bytes);
  slot.ticket.store(ticket_ + 1, std::memory_order_release);
  posted_ = true;
  return true;
}

bool MailboxCall::try_finish() {
  if (reduced_) return finish_split();  // past the first publication
  const int p = group_.size();
  while (arrived_ < p) {
    const LocalMailbox::Slot& slot = box_.of(arrived_, ticket_);
    prefetch_lines(slot);
    if (slot.ticket.load(std::memory_order_acquire) != ticket_ + 1) return false;
    ++arrived_;
  }
  const std::uint64_t mine = box_.mine(ticket_).fingerprint_hash;
  for (int r = 0; r < p; ++r) {
    const LocalMailbox::Slot& theirs = box_.of(r, ticket_);
    if (theirs.fingerprint_hash != mine) {
      throw mismatch_error(group_, r, theirs.fingerprint, fingerprint_);
    }
  }
  if (split_) return finish_split();
  // Every rank sums in rank order, from the slots: the same bits everywhere.
  if (count_ != 0 && recv_ != nullptr) reduce_slots(0, count_, static_cast<std::byte*>(recv_));
  box_.finish(ticket_);
  return true;
}

void MailboxCall::reduce_slots(std::size_t first, std::size_t last, std::byte* out) const {
  if (first >= last) return;
  const std::size_t elem = kernels::dtype_size(dtype_);
  const std::size_t n = last - first;
  // Split calls may leave vectors in symmetric buffers (try_post): read those from this process's
  // mappings (the table locked meanwhile), this rank's own where it lies, and, should this process
  // not map a peer's, across processes into `copied`.
  std::optional<PeerMappings> mappings;
  std::shared_ptr<std::byte[]> copied;
  const auto source = [&](int r) -> const std::byte* {
    const LocalMailbox::Slot& s = box_.of(r, ticket_);
    if (!split_ || s.in_place_serial == 0) return s.data + first * elem;
    if (r == box_.rank()) return static_cast<const std::byte*>(send_) + first * elem;
    const std::uint64_t at = s.in_place_address + first * elem;
    if (!mappings) mappings.emplace();
    if (const std::byte* m = mappings->find(box_.pid(r), s.in_place_serial, at, n * elem)) return m;
    if (!copied) copied = scratch_buffer(n * elem);
    const PeerRead got = read_peer_memory(box_.pid(r), at, copied.get(), n * elem);
    if (got.error != 0) {
      throw Error(ErrorCode::PeerLost,
                  fmt::format("reading {}'s vector from its memory failed: {}",
                              group_.describe_rank(r), std::strerror(got.error)));
    }
    return copied.get();
  };
  // In place on this rank, `out` is its own input: sum into scratch first.
  std::shared_ptr<std::byte[]> sum;
  std::byte* into = out;
  if (split_ && box_.of(box_.rank(), ticket_).in_place_serial != 0 &&
      source(box_.rank()) == static_cast<const std::byte*>(out)) {
    sum = scratch_buffer(n * elem);
    into = sum.get();
  }
  copy_in_pieces(into, source(0), n * elem);
  const auto op = op_ == kernels::ReduceOp::Avg ? kernels::ReduceOp::Sum : op_;
  for (int r = 1; r < group_.size(); ++r) kernels::reduce(dtype_, op, into, source(r), n);
  if (op_ == kernels::ReduceOp::Avg) kernels::scale(dtype_, into, n, 1.0 / group_.size());
  if (into != out) copy_in_pieces(out, into, n * elem);
}

std::pair<std::size_t, std::size_t> MailboxCall::block(int r) const noexcept {
  // Blocks start on cache lines, so that no two ranks write one line of a slot.
  const std::size_t align = std::max<std::size_t>(1, 64 / kernels::dtype_size(dtype_));
  const auto p = static_cast<std::size_t>(group_.size());
  const std::size_t per = ((count_ + p - 1) / p + align - 1) / align * align;
  const auto q = static_cast<std::size_t>(r);
  return {std::min(count_, q * per), std::min(count_, (q + 1) * per)};
}

bool MailboxCall::finish_split() {
  const int p = group_.size();
  const std::size_t elem = kernels::dtype_size(dtype_);
  auto* out = static_cast<std::byte*>(recv_);
  if (!reduced_) {
    // This rank's block, into the output, then into its own slot, where only this rank reads
    // that block (every other rank reads its own block of each slot meanwhile).
    const auto [first, last] = block(box_.rank());
    reduce_slots(first, last, out + first * elem);
    LocalMailbox::Slot& slot = box_.mine(ticket_);
    if (last > first)
      copy_in_pieces(slot.data + first * elem, out + first * elem, (last - first) * elem);
    slot.reduced.store(ticket_ + 1, std::memory_order_release);
    reduced_ = true;
    arrived_ = 0;
  }
  while (arrived_ < p) {
    const LocalMailbox::Slot& theirs = box_.of(arrived_, ticket_);
    if (theirs.reduced.load(std::memory_order_acquire) != ticket_ + 1) return false;
    if (arrived_ != box_.rank()) {
      const auto [first, last] = block(arrived_);
      if (last > first)
        copy_in_pieces(out + first * elem, theirs.data + first * elem, (last - first) * elem);
    }
    ++arrived_;
  }
  box_.finish(ticket_);
  return true;
}

int MailboxCall::waiting_on() const noexcept {
  if (!posted_) return -1;
  return arrived_ < group_.size() ? arrived_ : -1;
}

std::string MailboxCall::waiting_for() const {
  if (!posted_) return "this rank's earlier mailbox calls to finish";
  const int r = waiting_on();
  if (r < 0) return "nothing (it was about to finish)";
  if (reduced_) {
    return fmt::format("the reduced block from {} in the shared-memory mailbox",
                       group_.describe_rank(r));
  }
  return fmt::format(
      "the vector from {} in the shared-memory mailbox (if it called an "
      "operation of another size or kind, that one goes through the network)",
      group_.describe_rank(r));
}

void MailboxCall::check_announced() const {
  const int r = waiting_on();
  if (!announcement_ || r < 0) return;
  if (auto d = box_.disagreeing(r, fingerprint_, *announcement_)) {
    throw mismatch_error(group_, r, *d, fingerprint_);
  }
}

std::string MailboxCall::lost(int r) const {
  if (!box_.peer_exited(r)) return {};
  return fmt::format("{}'s process exited", group_.describe_rank(r));
}

Error MailboxCall::lost_error(const std::string& lost) const {
  return Error(ErrorCode::PeerLost,
               fmt::format("{}; this rank was still waiting for {}", lost, waiting_for()));
}

std::vector<MailboxCall> mailbox_pieces(LocalMailbox& box, const Group& group, const void* send,
                                        void* recv, std::size_t count, kernels::DType dtype,
                                        kernels::ReduceOp op) {
  const std::size_t elem = kernels::dtype_size(dtype);
  const std::size_t per = LocalMailbox::kPayloadBytes / elem;
  const std::size_t n = std::max<std::size_t>(1, (count + per - 1) / per);
  std::vector<MailboxCall> pieces;
  pieces.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t first = i * per;
    const std::size_t len = std::min(per, count - std::min(count, first));
    pieces.emplace_back(box, group, static_cast<const std::byte*>(send) + first * elem,
                        recv == nullptr ? nullptr : static_cast<std::byte*>(recv) + first * elem,
                        len, dtype, op);
  }
  return pieces;
}

MailboxAllreduce::MailboxAllreduce(OpContext ctx, const ReduceBuffers& b)
    : AllreduceOp(std::move(ctx), b),
      pieces_(mailbox_pieces(*group().mailbox, group(), b.send, b.recv, b.count, b.dtype, b.op)) {}

bool MailboxAllreduce::advance(Transport& t) {
  const Fingerprint fp = fingerprint() != nullptr ? *fingerprint() : Fingerprint{};
  while (next_ < pieces_.size()) {
    MailboxCall& call = pieces_[next_];
    if (!call.try_post(fp, announcement())) return false;
    if (!call.try_finish()) {
      call.check_announced();
      // The transport's view of the peer (its pidfd, checked every few ms by the engine).
      const int r = call.waiting_on();
      const int world = group().world_ranks.at(static_cast<std::size_t>(r));
      if (const auto& lost = t.peer_lost(world); !lost.empty()) throw call.lost_error(lost);
      return false;
    }
    ++next_;
  }
  count_sent(count_ * elem_);
  return true;
}

std::string MailboxAllreduce::waiting_for() const {
  const std::size_t i = std::min(next_, pieces_.size() - 1);
  if (pieces_.size() == 1) return pieces_[i].waiting_for();
  return fmt::format("{} (piece {} of {})", pieces_[i].waiting_for(), i + 1, pieces_.size());
}

void run_inline(std::span<MailboxCall> calls, const Fingerprint& fingerprint,
                const InlineWait& wait) {
  // Polls between checks of the clock, the peers' pidfds and the communicator's state.
  constexpr unsigned kCheckEvery = 1024;
  // Spinning this long without an answer means the peers are busy elsewhere (computing, or in
  // another operation): sleep between polls from then on, 10 us doubling to 500 us, so a rank
  // that waits long leaves its core to others.
  constexpr auto kSpinBudget = std::chrono::milliseconds(2);
  constexpr auto kFirstSleep = std::chrono::microseconds(10);
  constexpr auto kLongestSleep = std::chrono::microseconds(500);
  const auto fail = [&wait](const Error& e) {
    return Error(e.code(), fmt::format("{}: {}", wait.describe(), e.message()));
  };
  for (MailboxCall& call : calls) {  // the timeout runs per piece: it bounds a wait, not a call
    std::chrono::steady_clock::time_point start{};  // of the waiting: set at the first check
    std::chrono::microseconds sleep{0};
    for (unsigned polls = 1;; ++polls) {
      try {
        if (call.try_post(fingerprint, wait.announcement) && call.try_finish()) break;
      } catch (const Error& e) {  // as the engine reports an operation's errors
        throw fail(e);
      }
      if (sleep.count() > 0) {
        std::this_thread::sleep_for(sleep);
        sleep = std::min(2 * sleep, std::chrono::microseconds(kLongestSleep));
      } else if (wait.yield) {
        ::sched_yield();
      } else {
        relax();
      }
      if (sleep.count() == 0 && polls % kCheckEvery != 0) continue;
      if (auto e = wait.broken ? wait.broken() : std::nullopt) throw fail(*e);
      try {
        call.check_announced();
      } catch (const Error& e) {
        throw fail(e);
      }
      if (const int r = call.waiting_on(); r >= 0) {
        if (std::string lost = call.lost(r); !lost.empty()) throw fail(call.lost_error(lost));
      }
      const auto now = std::chrono::steady_clock::now();
      if (start == std::chrono::steady_clock::time_point{}) start = now;
      if (now - start >= wait.timeout) {
        throw timeout_error(wait.describe(), wait.timeout, call.waiting_for());
      }
      if (sleep.count() == 0 && now - start > kSpinBudget) sleep = kFirstSleep;
    }
  }
}

}  // namespace strait::comm
